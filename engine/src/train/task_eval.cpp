// --eval-tasks during training (task_eval.h).
#include "train/task_eval.h"

#include <sstream>

#include "lattice/infer.h"

namespace lattice {

Result<TrainingTasks> TrainingTasks::open(const TrainOptions& o, const ModelConfig& model) {
  TrainingTasks t;
  std::stringstream list(o.eval_tasks);
  for (std::string path; std::getline(list, path, ',');) {
    if (path.empty()) continue;
    Result<std::vector<ChoiceQuestion>> q = read_choice_task(path);
    if (!q) return Status::invalid_argument("--eval-tasks " + q.status().message());
    if (Status s = check_choice_images(*q, model, path); !s)
      return Status::invalid_argument("--eval-tasks " + s.message());
    t.paths_.push_back(path);
    t.questions_.push_back(std::move(*q));
  }
  if (!t.paths_.empty()) {
    Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(o.tokenizer);
    if (!tokenizer)
      return Status::invalid_argument("--eval-tasks: " + tokenizer.status().message());
    t.tokenizer_ = std::move(*tokenizer);
  }
  return t;
}

template <typename A>
Status TrainingTasks::report(RankModel<A>& rank, const ProcessGroups& g, const TrainOptions& o,
                             const ModelConfig& model, int iteration, MetricsSink& sink) {
  if (empty()) return Status::ok();
  Result<std::vector<accum_t<A>>> full = gather_rank_weights(rank, g, o, model);
  if (!full) return full.status();
  if (g.world->rank() != 0) return Status::ok();
  // An --fp64 run's master weights are rounded to float, the inference engine's type.
  const std::vector<float> weights(full->begin(), full->end());
  std::unique_ptr<Generator> generator = Generator::from_weights(model, weights.data());
  generator->set_tokenizer(tokenizer_.get());
  std::vector<TaskScoreMetrics> scores;
  for (size_t i = 0; i < paths_.size(); i++) {
    Result<ChoiceTaskScore> s =
        score_choice_task(questions_[i], *tokenizer_, *generator, paths_[i]);
    if (!s) {
      sink.on_message("--eval-tasks " + s.status().message() + " (task skipped)");
      continue;
    }
    scores.push_back({iteration, paths_[i], s->questions, s->acc, s->acc_norm});
  }
  sink.on_task_scores(scores);
  return Status::ok();
}

#define LATTICE_TRAINING_TASKS(A)                                                                 \
  template Status TrainingTasks::report(RankModel<A>&, const ProcessGroups&, const TrainOptions&, \
                                        const ModelConfig&, int, MetricsSink&);
LATTICE_TRAINING_TASKS(float)
LATTICE_TRAINING_TASKS(double)
LATTICE_TRAINING_TASKS(bf16)
LATTICE_TRAINING_TASKS(fp16)
#undef LATTICE_TRAINING_TASKS

}  // namespace lattice
