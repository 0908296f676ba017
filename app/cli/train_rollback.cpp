#include "train_rollback.h"

#include "checkpoint/checkpoint.h"

namespace lattice::cli {

Result<Rollback> plan_rollback(const TrainOptions& options, int spike) {
  Result<CheckpointRef> ref = find_checkpoint(options.save, 0);
  if (!ref || ref->iteration >= spike)
    return Status::invalid_argument(
        "--on-spike rollback found no checkpoint from before iteration " + std::to_string(spike) +
        " in --save " + options.save + (ref ? "" : " (" + ref.status().message() + ")") +
        "; a smaller --save-interval leaves one closer to a spike");
  Rollback back;
  back.options = options;
  back.options.load = options.save;
  back.options.ckpt_step = ref->iteration;
  back.options.load_hf.clear();   // the checkpoint holds those weights now
  back.options.finetune = false;  // its iteration, data position and optimizer go on
  back.flags = " --load " + options.save + " --ckpt-step " + std::to_string(ref->iteration) +
               " --iterations-to-skip";
  for (int it = ref->iteration + 1; it <= spike; it++)
    back.options.iterations_to_skip.push_back(std::to_string(it));
  for (int it : back.options.skip_iterations()) {
    back.flags += ' ';  // not `" " + to_string(it)`: GCC 12 warns of a -Wrestrict false positive
    back.flags += std::to_string(it);
  }
  back.sentence = "rolled back by --on-spike rollback to the checkpoint of iteration " +
                  std::to_string(ref->iteration) + " in " + options.save +
                  ", skipping the batches of iterations " + std::to_string(ref->iteration + 1) +
                  (ref->iteration + 1 == spike ? "" : " to " + std::to_string(spike));
  return back;
}

std::string rollback_run_name(const std::string& first, int rollbacks) {
  return first + "-rollback" + std::to_string(rollbacks);
}

}  // namespace lattice::cli
