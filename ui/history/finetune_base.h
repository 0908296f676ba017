// Which run a fine-tune started from, read from the records alone: a run recorded with
// `--finetune` and `--load DIR` (checkpoint directories are recorded absolute) was fine-tuned
// from the run that saved into DIR. The engine records no parent for a fine-tune (its steps do
// not continue the base run's: storage's run_parents is for resumes), so History derives it.
#pragma once

#include <QString>
#include <functional>
#include <optional>
#include <vector>

#include "lattice/storage/run_store.h"

namespace lattice::ui {

// The checkpoint directory a fine-tune loaded; empty for a run that is no fine-tune (no
// --finetune, or no --load) or whose configuration is not read yet.
QString fineTuneCheckpoint(const storage::RunInfo& run);

// The base run of `fineTune` among `runs`: the newest run created before it whose --save is
// the directory it loaded. `config` gives a run's configuration JSON (History reads them
// apart from the rows). None when the base is not in the store (deleted, or another store's).
std::optional<qint64> fineTuneBase(const storage::RunInfo& fineTune,
                                   const std::vector<storage::RunInfo>& runs,
                                   const std::function<std::string(qint64)>& config);

}  // namespace lattice::ui
