// ParallelSection: layout and batch fields, with DP and the micro-batch count derived live.
#include "plan/parallel_section.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>

namespace lattice::ui {

ParallelSection::ParallelSection(PlanModel* model, QWidget* parent)
    : FormSection(tr("Parallelism and batch"), model, parent) {
  QSpinBox* tp = intEditor(
      1, 4096, "tensor-model-parallel-size", tr("Set tensor parallel size"),
      [](const Plan& p) { return p.options.model.tensor_model_parallel_size; },
      [](Plan& p, int v) { p.options.model.tensor_model_parallel_size = v; });
  addRow(tr("Tensor parallel (TP)"), tp, {"tensor-model-parallel-size"},
         tr("Ranks that split every layer; keep a TP group inside a node  "
            "(--tensor-model-parallel-size)"));
  QSpinBox* pp = intEditor(
      1, 4096, "pipeline-model-parallel-size", tr("Set pipeline parallel size"),
      [](const Plan& p) { return p.options.parallel.pipeline_model_parallel_size; },
      [](Plan& p, int v) { p.options.parallel.pipeline_model_parallel_size = v; });
  addRow(tr("Pipeline parallel (PP)"), pp,
         {"pipeline-model-parallel-size", "decoder-first-pipeline-num-layers",
          "decoder-last-pipeline-num-layers"},
         tr("Ranks that split the layers into stages  (--pipeline-model-parallel-size)"));
  QSpinBox* cp = intEditor(
      1, 4096, "context-parallel-size", tr("Set context parallel size"),
      [](const Plan& p) { return p.options.parallel.context_parallel_size; },
      [](Plan& p, int v) { p.options.parallel.context_parallel_size = v; });
  addRow(tr("Context parallel (CP)"), cp, {"context-parallel-size"},
         tr("Ranks that split every sequence; each holds 1/CP of the tokens  "
            "(--context-parallel-size)"));
  // The experts live in the model (--num-experts); EP splits them over the ranks of DP x CP.
  QSpinBox* experts = intEditor(
      0, 1 << 16, "num-experts", tr("Set the number of experts"),
      [](const Plan& p) { return p.options.model.num_experts; },
      [](Plan& p, int v) { p.options.model.num_experts = v; });
  experts->setSpecialValueText(tr("dense"));
  experts->setToolTip(tr("Experts of each MoE layer, 0 for a dense model  (--num-experts)"));
  QSpinBox* ep = intEditor(
      1, 4096, "expert-model-parallel-size", tr("Set expert parallel size"),
      [](const Plan& p) { return p.options.parallel.expert_model_parallel_size; },
      [](Plan& p, int v) { p.options.parallel.expert_model_parallel_size = v; });
  ep->setToolTip(
      tr("Ranks that split the experts of every MoE layer  "
         "(--expert-model-parallel-size)"));
  addRow(tr("Experts, EP"), pair(experts, tr("EP"), ep),
         {"num-experts", "expert-model-parallel-size"});
  QSpinBox* vpp = intEditor(
      0, 4096, "num-layers-per-virtual-pipeline-stage", tr("Set layers per virtual stage"),
      [](const Plan& p) { return p.options.parallel.num_layers_per_virtual_pipeline_stage; },
      [](Plan& p, int v) { p.options.parallel.num_layers_per_virtual_pipeline_stage = v; });
  vpp->setSpecialValueText(tr("no interleaving"));
  vpp->setSuffix(tr(" layers"));
  addRow(tr("Virtual stage size"), vpp, {"num-layers-per-virtual-pipeline-stage"},
         tr("Layers per virtual pipeline stage for interleaved 1F1B; smaller bubbles, more "
            "pipeline traffic  (--num-layers-per-virtual-pipeline-stage)"));

  QCheckBox* sp = boolEditor(
      tr("Sequence parallel"), "sequence-parallel", tr("Toggle sequence parallelism"),
      [](const Plan& p) { return p.options.parallel.sequence_parallel; },
      [](Plan& p, bool on) { p.options.parallel.sequence_parallel = on; });
  sp->setToolTip(
      tr("Split LayerNorm and dropout activations along the sequence over the TP "
         "ranks  (--sequence-parallel)"));
  QCheckBox* distributed = boolEditor(
      tr("Distributed optimizer"), "use-distributed-optimizer",
      tr("Toggle the distributed optimizer"),
      [](const Plan& p) { return p.options.parallel.use_distributed_optimizer; },
      [](Plan& p, bool on) { p.options.parallel.use_distributed_optimizer = on; });
  distributed->setToolTip(
      tr("Shard the optimizer state over the data-parallel ranks, ZeRO-1  "
         "(--use-distributed-optimizer)"));
  // One row each: side by side they were the form's widest row.
  addRow({}, sp, {"sequence-parallel"});
  addRow({}, distributed, {"use-distributed-optimizer"});
  addRecompute();
  addPrecision();

  QSpinBox* micro = intEditor(
      1, 1 << 20, "micro-batch-size", tr("Set micro batch size"),
      [](const Plan& p) { return p.options.micro_batch_size; },
      [](Plan& p, int v) { p.options.micro_batch_size = v; });
  micro->setToolTip(tr("Samples per forward/backward pass on one rank  (--micro-batch-size)"));
  QSpinBox* global = intEditor(
      1, 1 << 30, "global-batch-size", tr("Set global batch size"),
      [](const Plan& p) { return p.options.global_batch_size; },
      [](Plan& p, int v) { p.options.global_batch_size = v; });
  global->setToolTip(
      tr("Samples per iteration over all data-parallel ranks  (--global-batch-size)"));
  addRow(tr("Micro batch"), pair(micro, tr("global"), global),
         {"micro-batch-size", "global-batch-size"});

  QLabel* note = addNote();
  note->setObjectName("derived-layout");
  onRefresh([note](const Plan& p, const PlanAnalysis& a) {
    const int world = p.cluster.world();
    const int tp = p.options.model.tensor_model_parallel_size;
    const int pp = p.options.parallel.pipeline_model_parallel_size;
    const int cp = p.options.parallel.context_parallel_size;
    if (!a.layout) {
      note->setText(tr("Data parallel (DP) = world %1 / (TP %2 × CP %3 × PP %4): fix the errors "
                       "to see the layout")
                        .arg(world)
                        .arg(tp)
                        .arg(cp)
                        .arg(pp));
      return;
    }
    const ParallelLayout& l = *a.layout;
    QString text = tr("Data parallel (DP) = %1 / (%2 × %3 × %4) = %5 · %6 micro-batches of %7 per "
                      "DP rank and iteration")
                       .arg(world)
                       .arg(tp)
                       .arg(cp)
                       .arg(pp)
                       .arg(l.dp)
                       .arg(a.memory ? a.memory->micro_batches : 0)
                       .arg(p.options.micro_batch_size);
    if (l.vpp > 1) text += tr(" · %1 model chunks per pipeline rank").arg(l.vpp);
    if (l.ep > 1)
      text += tr(" · experts: EP %1 × expert DP %2 × ETP %3").arg(l.ep).arg(l.edp).arg(l.etp);
    note->setText(text);
  });
}

void ParallelSection::addRecompute() {
  auto* mode = new QComboBox(this);
  mode->setObjectName("recompute-granularity");
  mode->addItem(tr("None"), QStringList{"", ""});
  mode->addItem(tr("Full, uniform"), QStringList{"full", "uniform"});
  mode->addItem(tr("Full, block"), QStringList{"full", "block"});
  mode->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  mode->setMinimumContentsLength(10);
  auto* layers = new QSpinBox(this);
  layers->setObjectName("recompute-num-layers");
  layers->setRange(0, 4096);
  layers->setKeyboardTracking(false);
  layers->setSuffix(tr(" layers"));
  auto* box = new QWidget(this);
  auto* row = new QHBoxLayout(box);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(mode, 2);
  row->addWidget(layers, 1);
  connect(mode, &QComboBox::activated, this, [this, mode](int index) {
    const QStringList v = mode->itemData(index).toStringList();
    model_->edit(tr("Set recomputation"), [&](Plan& p) {
      ParallelOptions& par = p.options.parallel;
      par.recompute_granularity = v[0].toStdString();
      par.recompute_method = v[1].toStdString();
      if (v[0] == QLatin1String("full") && par.recompute_num_layers <= 0)
        par.recompute_num_layers = 1;
      if (v[0] != QLatin1String("full")) par.recompute_num_layers = 0;
    });
  });
  connect(layers, &QSpinBox::valueChanged, this, [this](int v) {
    model_->edit(
        tr("Set recomputed layers"), [&](Plan& p) { p.options.parallel.recompute_num_layers = v; },
        "recompute-num-layers");
  });
  onRefresh([mode, layers](const Plan& p, const PlanAnalysis&) {
    const ParallelOptions& par = p.options.parallel;
    // "selective" (a Megatron command line's) shows as None: it is the same run.
    const int index = mode->findData(QStringList{QString::fromStdString(par.recompute_granularity),
                                                 QString::fromStdString(par.recompute_method)});
    mode->setCurrentIndex(std::max(index, 0));
    layers->setValue(par.recompute_num_layers);
    layers->setEnabled(par.recompute_granularity == "full");
  });
  addRow(tr("Recomputation"), box,
         {"recompute-granularity", "recompute-method", "recompute-num-layers"},
         tr("Recompute activations in the backward pass: full keeps only each layer's input "
            "(--recompute-granularity, --recompute-method, --recompute-num-layers). Megatron's "
            "selective is the same as none here: the attention keeps no scores to drop."));
}

void ParallelSection::addPrecision() {
  auto* precision = new QComboBox(this);
  precision->setObjectName("precision");
  precision->addItem(tr("fp32"), "fp32");
  precision->addItem(tr("bf16 (fp32 master weights)"), "bf16");
  precision->addItem(tr("fp16 (loss scaling)"), "fp16");
  precision->addItem(tr("fp64 (verification runs)"), "fp64");
  connect(precision, &QComboBox::activated, this, [this, precision](int index) {
    const QString value = precision->itemData(index).toString();
    model_->edit(tr("Set precision %1").arg(value),
                 [&](Plan& p) { setPrecision(p.options, value); });
  });
  onRefresh([precision](const Plan& p, const PlanAnalysis&) {
    const int index = precision->findData(precisionOf(p.options));
    precision->setCurrentIndex(std::max(index, 0));
  });
  addRow(tr("Precision"), precision, {"precision"},
         tr("Training precision (--bf16, --fp16); the CPU engine trains bf16 where the CPU has "
            "bf16 instructions (AVX512_BF16 or AMX) and fp16 as fp32 arithmetic with the loss "
            "scaler; the CUDA build trains both"));
}

}  // namespace lattice::ui
