// Multiple-choice scoring by log-likelihood, as lm-evaluation-harness scores HellaSwag, ARC,
// PIQA...: each choice is a continuation of the question's context, scored by the sum of its
// tokens' log-probabilities given the context; the model's answer is the best choice (acc),
// or the best per character of the choice's text (acc_norm, the harness's len(choice)). Tasks are
// JSONL, one question a line:
//   {"context": "The cat sat on the", "choices": [" mat", " moon"], "label": 0}
// A vision-language model's question may carry images, the i-th filling the context's i-th
// `<image>` (paths relative to the task file's folder):
//   {"context": "<image>\nWhat shape is this?", "images": ["a.png"], "choices": [...], "label": 0}
// Runs on a Generator (any checkpoint layout, tensor-parallel ranks included). Non-goals:
// few-shot prompting and task-specific preprocessing (write them into the context).
#pragma once

#include <string>
#include <vector>

#include "lattice/infer.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "lattice/tokenizer.h"

namespace lattice {

struct ChoiceQuestion {
  std::string context;
  std::vector<std::string> choices;  // at least two, none empty
  int label = 0;                     // index of the right choice
  int line = 0;                      // 1-based line of the task file, for messages
  // Image files, resolved against the task file's folder; the i-th fills the context's i-th
  // `<image>`. Empty: a text question.
  std::vector<std::string> images;
};

// The questions of a task file; an error names the file, the line and the rule broken.
// Blank lines are skipped. A question's "images" must be a list of file names, one per
// `<image>` of its context (none in its choices), each a file that opens and starts as a PNG or
// JPEG (data/image_io.h check_image_file; decoded only when scored).
Result<std::vector<ChoiceQuestion>> read_choice_task(const std::string& path);

// What a model of `config` cannot score, naming the task (`where`) and line, or ok: a question
// with images on a model without a vision tower (or with a tower not square RGB), or a
// vision-language model's question whose text holds `<image>` but that gives no images. Needs
// only the model's shape, so it runs before the model exists (training's --eval-tasks at its
// start); score_choice_task runs it too.
Status check_choice_images(const std::vector<ChoiceQuestion>& questions, const ModelConfig& config,
                           const std::string& where);

struct ChoiceTaskScore {
  int64_t questions = 0;
  double acc = 0;       // share of questions whose most likely choice (summed logprob) is the label
  double acc_norm = 0;  // the same with each sum divided by the choice's length in characters
  // (questions, choices): sum of log p(choice token | context, earlier choice tokens).
  std::vector<std::vector<double>> loglikelihoods;
};

// Scores `questions` with `generator` (collective under tensor parallelism: every rank passes
// the same questions). Tokenised as lm-evaluation-harness does: the choice's tokens are those
// of tokenize(context + choice) after the tokens of tokenize(context) (the tokenizer's BOS, if
// any, first; whitespace ending the context moved to the choice's side), so a merge across
// the boundary is scored as the harness scores it. Ties go to
// the lower index. A question's images are decoded and preprocessed as `lattice generate
// --image` does (infer/prompt_images.h: the model's recorded size, mean and std), and each
// `<image>` of its context becomes the tower's Np placeholder ids in every choice's prompt;
// an image that does not decode fails the task, naming the line and the file. `where` names
// the task in messages.
Result<ChoiceTaskScore> score_choice_task(const std::vector<ChoiceQuestion>& questions,
                                          const Tokenizer& tokenizer, Generator& generator,
                                          const std::string& where);

}  // namespace lattice
