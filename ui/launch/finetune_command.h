// A fine-tune of a recorded run's checkpoint as a plan and Launch settings: the base run's
// model and layout flags, `--load <its save directory> --finetune`, the SFT dataset, and full
// parameters or LoRA adapters (`--lora-rank` ...). The Launch view then builds, shows and starts
// the command as it does any plan's (launch_command.h). Pure: tested without a window.
#pragma once

#include <QString>
#include <QStringList>

#include "launch/launch_command.h"
#include "plan/plan.h"

namespace lattice::ui {

// The linears LoRA can adapt, in Megatron's names (--lora-target-modules).
inline const QStringList kLoraTargetModules = {"linear_qkv", "linear_proj", "linear_fc1",
                                               "linear_fc2"};

struct FineTuneSettings {
  QString checkpoint;  // the base run's --save directory (its latest checkpoint is loaded)
  QString dataPath;    // indexed-dataset prefix written by `lattice data preprocess`
  bool sft = true;     // --sft: loss on the assistant tokens only ({prefix}_loss_mask)
  int loraRank = 0;    // 0: full-parameter fine-tune
  double loraAlpha = 16;
  QStringList loraTargets = kLoraTargetModules;
  double loraDropout = 0;
  int iterations = 100;
  double lr = 1e-5;
  QString saveDir;  // empty: the fine-tune saves nothing
  QString runName;  // empty: one is generated when the command is built
};

// Why `prefix` cannot be fine-tuned on, one sentence; empty when it can. SFT data needs the
// token files ({prefix}.bin/.idx) and the loss mask beside them ({prefix}_loss_mask.bin/.idx).
QString sftDatasetProblem(const QString& prefix, bool sft);

struct FineTuneLaunch {
  Plan plan;                // the base run's options with the fine-tune's load, save, length, LR
  LaunchSettings settings;  // the dataset, the base run's tokenizer, the fine-tune's flags
  QStringList errors;       // settings that make no fine-tune (shown before any command)
};

// The fine-tune of `base` (the base run's recorded options, world size `baseWorld`) with
// `settings`; `current` is the Launch form's settings (target, database, tags are kept) and
// `cluster` the plan's (its device is kept, its size becomes the base run's world).
FineTuneLaunch fineTuneLaunch(const TrainOptions& base, int baseWorld,
                              const ClusterSettings& cluster, const LaunchSettings& current,
                              const FineTuneSettings& settings);

}  // namespace lattice::ui
