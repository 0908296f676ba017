// ModelSection's rows for the Llama family's flags (issue 23): attention groups, SwiGLU,
// positions and RoPE, the norm, the output layer and the biases. Each is one undoable edit of
// the plan, its messages under its row, as the other fields; the rows of fields the model
// ignores (RoPE's without rope, the groups without GQA, the QKV bias with biases on) are
// disabled, not hidden, so the form keeps its height.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSpinBox>

#include "plan/model_section.h"

namespace lattice::ui {

void ModelSection::addArchitectureRows() {
  auto flag = [](const QString& flag) { return "  (--" + flag + ")"; };

  QCheckBox* gqa = boolEditor(
      tr("Grouped-query attention"), "group-query-attention", tr("Toggle grouped-query attention"),
      [](const Plan& p) { return p.options.model.group_query_attention; },
      [](Plan& p, bool on) {
        ModelConfig& m = p.options.model;
        // Switched on at the default of 1 group: start from one group per head (the same
        // model as without the flag) rather than multi-query attention.
        if (on && !m.group_query_attention && m.num_query_groups == ModelConfig{}.num_query_groups)
          m.num_query_groups = m.num_attention_heads;
        m.group_query_attention = on;
      });
  gqa->setToolTip(tr("Query heads share key/value heads in groups (Llama 3, Mistral); TP must "
                     "divide the groups") +
                  flag("group-query-attention"));
  QSpinBox* groups = intEditor(
      1, 4096, "num-query-groups", tr("Set query groups"),
      [](const Plan& p) { return p.options.model.num_query_groups; },
      [](Plan& p, int v) { p.options.model.num_query_groups = v; });
  groups->setToolTip(tr("Key/value heads; they must divide the attention heads, 1 is "
                        "multi-query attention") +
                     flag("num-query-groups"));
  addRow(tr("Attention"), pair(gqa, tr("groups"), groups),
         {"group-query-attention", "num-query-groups"});

  QCheckBox* swiglu = boolEditor(
      tr("SwiGLU MLP"), "swiglu", tr("Toggle SwiGLU"),
      [](const Plan& p) { return p.options.model.swiglu; },
      [](Plan& p, bool on) { p.options.model.swiglu = on; });
  swiglu->setToolTip(tr("down(silu(gate(x)) × up(x)): three matrices of the MLP hidden size "
                        "instead of GELU's two") +
                     flag("swiglu"));
  addRow(tr("MLP"), swiglu, {"swiglu"});

  QComboBox* positions = choiceEditor(
      "position-embedding-type", tr("Set position embedding"),
      {{tr("Learned table"), "learned_absolute"}, {tr("RoPE"), "rope"}, {tr("None"), "none"}},
      [](const Plan& p) { return QString::fromStdString(p.options.model.position_embedding_type); },
      [](Plan& p, const QString& v) { p.options.model.position_embedding_type = v.toStdString(); });
  positions->setToolTip(tr("Learned absolute positions (GPT-2), rotary embeddings on queries "
                           "and keys (Llama), or none") +
                        flag("position-embedding-type"));
  addRow(tr("Positions"), positions, {"position-embedding-type"});

  QDoubleSpinBox* base = doubleEditor(
      1, 1e9, 0, {}, "rotary-base", tr("Set RoPE base"),
      [](const Plan& p) { return static_cast<double>(p.options.model.rotary_base); },
      [](Plan& p, double v) { p.options.model.rotary_base = static_cast<float>(v); });
  base->setSingleStep(10000);
  base->setToolTip(tr("RoPE's base θ: 10000 (Llama 2, Mistral), 500000 (Llama 3), 1000000 "
                      "(Qwen2.5)") +
                   flag("rotary-base"));
  QDoubleSpinBox* percent = doubleEditor(
      1, 100, 1, tr(" %"), "rotary-percent", tr("Set RoPE share"),
      [](const Plan& p) { return 100.0 * p.options.model.rotary_percent; },
      [](Plan& p, double v) { p.options.model.rotary_percent = static_cast<float>(v / 100); });
  percent->setToolTip(tr("The share of each head's dimensions RoPE rotates") +
                      flag("rotary-percent"));
  addRow(tr("RoPE base θ"), pair(base, tr("rotating"), percent), {"rotary-base", "rotary-percent"});

  QComboBox* norm = choiceEditor(
      "normalization", tr("Set normalization"),
      {{tr("LayerNorm"), "LayerNorm"}, {tr("RMSNorm"), "RMSNorm"}},
      [](const Plan& p) { return QString::fromStdString(p.options.model.normalization); },
      [](Plan& p, const QString& v) { p.options.model.normalization = v.toStdString(); });
  norm->setToolTip(tr("LayerNorm (weight and bias, GPT-2) or RMSNorm (weight only, Llama)") +
                   flag("normalization"));
  auto* epsilon = new ScientificSpinBox(this);
  epsilon->setRange(1e-12, 0.5);
  bindDouble(
      epsilon, "norm-epsilon", tr("Set norm epsilon"),
      [](const Plan& p) { return static_cast<double>(p.options.model.norm_epsilon); },
      [](Plan& p, double v) { p.options.model.norm_epsilon = static_cast<float>(v); });
  epsilon->setToolTip(tr("Added to the mean square (or variance) before the square root; "
                         "LayerNorm takes 1e-05 only") +
                      flag("norm-epsilon"));
  addRow(tr("Normalization"), pair(norm, tr("ε"), epsilon), {"normalization", "norm-epsilon"});

  QCheckBox* untied = boolEditor(
      tr("Untied output layer"), "untie-embeddings-and-output-weights",
      tr("Toggle the untied output layer"),
      [](const Plan& p) { return p.options.model.untie_embeddings_and_output_weights; },
      [](Plan& p, bool on) { p.options.model.untie_embeddings_and_output_weights = on; });
  untied->setToolTip(tr("An LM head of its own on the last pipeline stage, not the word "
                        "embedding") +
                     flag("untie-embeddings-and-output-weights"));
  addRow(tr("Output layer"), untied, {"untie-embeddings-and-output-weights"});

  QCheckBox* noBias = boolEditor(
      tr("No linear biases"), "disable-bias-linear", tr("Toggle the linear biases"),
      [](const Plan& p) { return p.options.model.disable_bias_linear; },
      [](Plan& p, bool on) { p.options.model.disable_bias_linear = on; });
  noBias->setToolTip(tr("Drop the biases of every linear layer (Llama)") +
                     flag("disable-bias-linear"));
  QCheckBox* qkvBias = boolEditor(
      tr("but QKV bias"), "add-qkv-bias", tr("Toggle the QKV bias"),
      [](const Plan& p) { return p.options.model.add_qkv_bias; },
      [](Plan& p, bool on) { p.options.model.add_qkv_bias = on; });
  qkvBias->setToolTip(tr("Keep the query/key/value bias without the others (Qwen2)") +
                      flag("add-qkv-bias"));
  addRow(tr("Biases"), pair(noBias, {}, qkvBias), {"disable-bias-linear", "add-qkv-bias"});

  onRefresh([=](const Plan& p, const PlanAnalysis&) {
    const ModelConfig& m = p.options.model;
    groups->setEnabled(m.group_query_attention);
    base->setEnabled(m.rope());
    percent->setEnabled(m.rope());
    qkvBias->setEnabled(m.disable_bias_linear || m.add_qkv_bias);
  });
}

}  // namespace lattice::ui
