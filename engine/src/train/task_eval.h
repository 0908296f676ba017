// --eval-tasks: multiple-choice accuracy (lattice/multiple_choice.h) of the model being
// trained, at every validation point. The master weights are gathered to rank 0 (as
// --save-hf gathers them), which scores the tasks on an inference copy of the whole model,
// whatever the layout; the other ranks wait at their next collective.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lattice/multiple_choice.h"
#include "lattice/train.h"
#include "train/trainer.h"

namespace lattice {

class TrainingTasks {
 public:
  // Reads every file of options.eval_tasks (comma-separated) on every rank, so that a bad
  // line fails the run at the start on all of them (the error names the file and line), as
  // does a question that `model` cannot take (images without a vision tower:
  // check_choice_images).
  static Result<TrainingTasks> open(const TrainOptions& options, const ModelConfig& model);
  bool empty() const { return paths_.empty(); }

  // Collective over groups.world. Rank 0 scores every task and tells `sink`; a task it cannot
  // score (a question longer than the context, an image that does not decode) is reported as a
  // message, not a failure.
  template <typename A>
  Status report(RankModel<A>& rank, const ProcessGroups& groups, const TrainOptions& options,
                const ModelConfig& model, int iteration, MetricsSink& sink);

 private:
  std::vector<std::string> paths_;
  std::vector<std::vector<ChoiceQuestion>> questions_;
  std::shared_ptr<Tokenizer> tokenizer_;  // rank 0's
};

}  // namespace lattice
