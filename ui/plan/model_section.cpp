// ModelSection: presets, GPT-2's size fields, live parameter count (the Llama family's rows are
// in model_section_architecture.cpp).
#include "plan/model_section.h"

#include <QComboBox>
#include <QLabel>
#include <QSpinBox>

#include "plan/model_presets.h"
#include "plan/text_format.h"

namespace lattice::ui {

ModelSection::ModelSection(PlanModel* model, QWidget* parent)
    : FormSection(tr("Model"), model, parent) {
  auto* preset = new QComboBox(this);
  preset->setObjectName("preset");
  for (const ModelPreset& p : modelPresets()) preset->addItem(p.name);
  preset->addItem(tr("Custom"));
  connect(preset, &QComboBox::activated, this, [this](int index) {
    const std::vector<ModelPreset>& presets = modelPresets();
    if (index < 0 || index >= static_cast<int>(presets.size())) return;
    Plan next = model_->plan();
    applyPreset(next.options, presets[index]);
    model_->replacePlan(next, tr("Preset %1").arg(presets[index].name));
  });
  onRefresh([preset](const Plan& p, const PlanAnalysis&) {
    const int index = presetIndexOf(p.options);
    preset->setCurrentIndex(index >= 0 ? index : preset->count() - 1);
  });
  addRow(tr("Preset"), preset, {},
         tr("Published sizes; a preset sets the architecture, sequence length, vocabulary and "
            "batch sizes and keeps the parallel layout"));

  auto model_int = [this](const QString& what, const QString& flag, int min, int max, auto member,
                          const QString& tip) {
    QSpinBox* spin = intEditor(
        min, max, flag, tr("Set %1").arg(what),
        [member](const Plan& p) { return p.options.model.*member; },
        [member](Plan& p, int v) { p.options.model.*member = v; });
    spin->setToolTip(tip + "  (--" + flag + ")");
    return spin;
  };
  addRow(tr("Layers"),
         model_int(tr("layers"), "num-layers", 1, 4096, &ModelConfig::num_layers,
                   tr("Transformer layers")),
         {"num-layers"});
  QSpinBox* hidden = model_int(tr("hidden size"), "hidden-size", 1, 1 << 18,
                               &ModelConfig::hidden_size, tr("Width of the residual stream"));
  QSpinBox* heads = model_int(tr("attention heads"), "num-attention-heads", 1, 4096,
                              &ModelConfig::num_attention_heads,
                              tr("Attention heads; they must divide the hidden size"));
  addRow(tr("Hidden size"), pair(hidden, tr("heads"), heads),
         {"hidden-size", "num-attention-heads"});
  QSpinBox* ffn =
      model_int(tr("MLP hidden size"), "ffn-hidden-size", 0, 1 << 20, &ModelConfig::ffn_hidden_size,
                tr("0 means 4 x hidden size, or with SwiGLU 8/3 x hidden size "
                   "rounded down to a multiple of 64"));
  onRefresh([ffn](const Plan& p, const PlanAnalysis&) {
    ffn->setSpecialValueText(p.options.model.swiglu ? tr("8/3 × hidden") : tr("4 × hidden"));
  });
  addRow(tr("MLP hidden size"), ffn, {"ffn-hidden-size"});
  QSpinBox* seq = model_int(tr("sequence length"), "seq-length", 1, 1 << 22,
                            &ModelConfig::seq_length, tr("Tokens per sample"));
  QSpinBox* positions = model_int(tr("position table"), "max-position-embeddings", 0, 1 << 22,
                                  &ModelConfig::max_position_embeddings,
                                  tr("Learned position table; 0 means the sequence length"));
  positions->setSpecialValueText(tr("= sequence"));
  onRefresh([positions](const Plan& p, const PlanAnalysis&) {
    positions->setEnabled(p.options.model.learned_positions());  // RoPE has no table
  });
  addRow(tr("Sequence length"), pair(seq, tr("positions"), positions),
         {"seq-length", "max-position-embeddings"});

  QSpinBox* vocab = intEditor(
      1, 1 << 24, "vocab-size", tr("Set vocabulary"),
      [](const Plan& p) { return p.options.tokenizer.vocab_size; },
      [](Plan& p, int v) {
        p.options.tokenizer.type = "NullTokenizer";
        p.options.tokenizer.vocab_size = v;
      });
  const QString vocabTip =
      tr("Token ids of the tokenizer; the model adds one end-of-document id, as Megatron's "
         "NullTokenizer  (--vocab-size)");
  vocab->setToolTip(vocabTip);
  QSpinBox* padding = model_int(tr("vocabulary padding"), "make-vocab-size-divisible-by", 1,
                                1 << 16, &ModelConfig::make_vocab_size_divisible_by,
                                tr("The embedding rows are padded to a multiple of this times TP"));
  addRow(tr("Vocabulary"), pair(vocab, tr("pad to"), padding),
         {"vocab-size", "make-vocab-size-divisible-by"});

  addArchitectureRows();

  QLabel* note = addNote();
  note->setObjectName("parameters");
  onRefresh([note, vocab, vocabTip](const Plan& p, const PlanAnalysis& a) {
    const ModelConfig& m = p.options.model;
    const bool fileTokenizer = p.options.tokenizer.type != "NullTokenizer";
    vocab->setEnabled(!fileTokenizer);
    vocab->setToolTip(
        fileTokenizer
            ? tr("Read from the %1 files").arg(QString::fromStdString(p.options.tokenizer.type))
            : vocabTip);
    if (a.parameters <= 0) {
      note->setText(tr("Parameters: fix the fields above to see the count"));
      return;
    }
    note->setText(tr("%1 parameters · vocabulary %2 padded to %3 · head size %4\n%5")
                      .arg(humanCount(static_cast<double>(a.parameters)))
                      .arg(m.vocab_size)
                      .arg(m.padded_vocab_size())
                      .arg(m.num_attention_heads > 0 ? m.hidden_size / m.num_attention_heads : 0)
                      .arg(QString::fromStdString(architecture_text(m))));
  });
}

}  // namespace lattice::ui
