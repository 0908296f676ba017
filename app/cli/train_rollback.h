// Note [rollback]. `--on-spike rollback` (docs/studio.md "Instability"), PaLM's remedy for loss
// spikes: at a spike or a non-finite loss or norm the trainer ends the run segment without
// stepping or saving (TrainSummary::rollback_at), and `lattice train` starts it again in the same
// process, on every rank alike (each rank saw the same all-reduced loss and norm), from the latest
// checkpoint in --save, with the iterations from that checkpoint through the spike added to
// --iterations-to-skip: their batches, which led into the spike, are consumed untrained. Each
// segment is a run of its own in the store whose parent is the run that saved the checkpoint, so
// the Dashboard draws one curve with the abandoned tail faded (run lineage). At most
// kMaxRollbacks per invocation, then the run ends with an error.
#pragma once

#include <string>

#include "lattice/status.h"
#include "lattice/train_options.h"

namespace lattice::cli {

inline constexpr int kMaxRollbacks = 5;

struct Rollback {
  TrainOptions options;  // the next segment's: --load the checkpoint, the skips added
  std::string flags;     // what the command line gains, e.g. " --load ckpt --ckpt-step 20 ..."
  std::string sentence;  // "rolled back by --on-spike rollback to iteration 20 of ckpt, ..."
};

// The next segment after a spike at iteration `spike` of a run with `options`. Errors: no
// checkpoint in --save from before the spike (one sentence naming the directory).
Result<Rollback> plan_rollback(const TrainOptions& options, int spike);

// The name of the segment after `rollbacks` rollbacks: "NAME-rollback1", ...
std::string rollback_run_name(const std::string& first, int rollbacks);

}  // namespace lattice::cli
