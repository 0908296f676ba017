// fineTuneLaunch: the base run's options turned into a fine-tune of its checkpoint, and the
// SFT dataset check the dialog shows before any command.
#include "launch/finetune_command.h"

#include <QDir>
#include <QFileInfo>
#include <algorithm>

namespace lattice::ui {

namespace {

bool hasIndexedFiles(const QString& prefix) {
  return QFileInfo(prefix + ".bin").isFile() && QFileInfo(prefix + ".idx").isFile();
}

QString absolutePath(const QString& path) {
  return QDir::cleanPath(QFileInfo(path).absoluteFilePath());
}

}  // namespace

QString sftDatasetProblem(const QString& prefix, bool sft) {
  const QString p = prefix.trimmed();
  if (p.isEmpty()) return QObject::tr("Choose a dataset prefix (--data-path).");
  if (!hasIndexedFiles(p))
    return QObject::tr(
               "--data-path %1: no %1.bin and %1.idx (write them with `lattice data "
               "preprocess`).")
        .arg(p);
  if (sft && !hasIndexedFiles(p + "_loss_mask"))
    return QObject::tr(
               "--data-path %1 has no loss mask (%1_loss_mask.bin and .idx): it was not "
               "preprocessed as chat data, so --sft cannot tell the assistant's tokens "
               "from the prompt's. Preprocess the chat JSONL with `lattice data "
               "preprocess --sft`, or untick SFT to train on every token.")
        .arg(p);
  return {};
}

FineTuneLaunch fineTuneLaunch(const TrainOptions& base, int baseWorld,
                              const ClusterSettings& cluster, const LaunchSettings& current,
                              const FineTuneSettings& s) {
  FineTuneLaunch out;
  if (s.checkpoint.isEmpty())
    out.errors << QObject::tr("The base run saved no checkpoint (no --save recorded).");
  else if (!s.saveDir.isEmpty() && absolutePath(s.saveDir) == absolutePath(s.checkpoint))
    out.errors << QObject::tr(
                      "Save the fine-tune elsewhere: %1 holds the base run's "
                      "checkpoints, which it would overwrite.")
                      .arg(s.saveDir);
  if (const QString problem = sftDatasetProblem(s.dataPath, s.sft); !problem.isEmpty())
    out.errors << problem;
  if (s.loraRank > 0 && s.loraTargets.isEmpty())
    out.errors << QObject::tr(
        "Choose at least one module for the LoRA adapters "
        "(--lora-target-modules).");

  // The model, layout and tokenizer stay the base run's (the checkpoint's shapes and
  // vocabulary); what says how long, from where and into where is the fine-tune's own.
  TrainOptions o = base;
  o.load = s.checkpoint.toStdString();
  o.ckpt_step = 0;  // its latest checkpoint
  o.finetune = true;
  o.load_hf.clear();
  o.save = s.saveDir.toStdString();
  o.save_hf.clear();
  o.train_iters = s.iterations;
  o.optim.lr = static_cast<float>(s.lr);
  o.optim.min_lr = std::min(base.optim.min_lr, o.optim.lr);
  o.optim.lr_warmup_iters = 0;  // the base run's warm-up counted pretraining steps
  o.optim.lr_decay_iters = 0;   // decay over the fine-tune's own iterations
  o.exit_interval = 0;
  o.exit_duration_in_mins = 0;
  o.cpu_isa = "auto";  // the record names the kernels the base ran; this machine picks its own
  o.mock_data = false;
  // SFT and LoRA are the dialog's choice, not inherited from the base run; they are options of
  // the plan (not extra flags), so the Plan's estimate counts the adapters: moments for them
  // alone (engine/src/plan/memory_estimate.cpp).
  o.sft = s.sft;
  o.sft_packing = false;
  o.pretrained_checkpoint.clear();
  const ModelConfig defaults;
  o.model.lora_rank = s.loraRank;
  o.model.lora_alpha = s.loraRank > 0 ? static_cast<float>(s.loraAlpha) : defaults.lora_alpha;
  o.model.lora_dropout = s.loraRank > 0 ? static_cast<float>(s.loraDropout) : 0.0f;
  o.model.lora_target_modules =
      s.loraRank > 0 ? s.loraTargets.join(',').toStdString() : defaults.lora_target_modules;
  o.data_path.clear();  // the Launch settings give the dataset
  o.config_path.clear();
  o.run_name.clear();
  o.tags.clear();
  o.given_flags.clear();
  out.plan.options = o;
  out.plan.cluster = cluster;
  out.plan.cluster.nodes = 1;
  out.plan.cluster.devices_per_node = std::max(baseWorld, 1);

  // The base run's tokenizer whatever its data was (a mock-data run's is the NullTokenizer).
  LaunchSettings l = current;
  l.tokenizerType = QString::fromStdString(base.tokenizer.type);
  l.tokenizerModel = QString::fromStdString(base.tokenizer.model_file);
  l.vocabFile = QString::fromStdString(base.tokenizer.vocab_file);
  l.mergeFile = QString::fromStdString(base.tokenizer.merge_file);
  l.data = DataSource::kDataset;
  l.dataPath = s.dataPath.trimmed();
  l.runName = s.runName;
  l.saveCheckpoints = false;  // --save is the fine-tune's own directory
  l.extraFlags.clear();  // everything the fine-tune sets is in the plan's options
  out.settings = l;
  return out;
}

}  // namespace lattice::ui
