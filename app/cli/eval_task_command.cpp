// lattice eval --task FILE: multiple-choice accuracy (lattice/multiple_choice.h) of a model
// loaded as `lattice generate` loads it (a checkpoint of any layout, --load-hf; tensor
// parallel under mpirun). Rank 0 prints one line per task, then all scores as one JSON line.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "infer_setup.h"
#include "lattice/multiple_choice.h"

namespace lattice::cli {

namespace {

constexpr const char* kUsage =
    "usage: lattice eval --task FILE.jsonl [--task ...] (--load DIR | --load-hf PATH)\n"
    "                    [model and tokenizer flags]\n\n"
    "Multiple-choice accuracy as lm-evaluation-harness computes it (HellaSwag, ARC, PIQA...).\n"
    "Each line of FILE is {\"context\": \"...\", \"choices\": [\"...\", ...], \"label\": k}; each\n"
    "choice is scored by the sum of its tokens' log-probabilities after the context. acc: the\n"
    "best sum is the label's; acc_norm: the best sum per character of the choice. For a\n"
    "vision-language model a line may add \"images\": [\"a.png\", ...] (paths relative to FILE's\n"
    "folder), the i-th filling the context's i-th <image>. Prints a line per task, then\n"
    "{\"tasks\": [{\"task\", \"questions\", \"acc\", \"acc_norm\"}, ...]} as one\n"
    "JSON line; --output FILE also writes each choice's log-likelihood.\n\n";

}  // namespace

int eval_task_command(const std::vector<std::string>& args) {
  std::vector<std::string> tasks;
  std::string output;
  int max_batch_size = 32;
  const std::vector<FlagSpec> specs = {
      {"output", "JSON file of the scores and every choice's log-likelihood", &output},
      {"max-batch-size", "prompts scored together", &max_batch_size},
  };
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << kUsage << "  --task FILE  a task file (repeatable)\n"
                << flags_help(specs) << "\n"
                << kModelFlagsHelp;
      return 0;
    }
  std::vector<std::string> rest;
  std::vector<std::string> errors = take_flags(args, specs, {{"task", &tasks}}, rest);
  if (max_batch_size < 1) errors.push_back("--max-batch-size must be 1 or more");
  if (tasks.empty()) errors.push_back("--task FILE is required");
  // Every task is read before the model is loaded: a bad line fails at once.
  std::vector<std::vector<ChoiceQuestion>> questions;
  for (const std::string& t : tasks) {
    if (!errors.empty()) break;
    Result<std::vector<ChoiceQuestion>> q = read_choice_task(t);
    if (!q)
      errors.push_back("--task " + q.status().message());
    else
      questions.push_back(std::move(*q));
  }
  if (!errors.empty()) {
    std::string all;
    for (const std::string& e : errors) all += (all.empty() ? "" : "\n") + e;
    print_error("eval", all);
    return 2;
  }
  int code = 0;
  std::unique_ptr<InferenceSetup> setup = setup_inference("eval", rest, max_batch_size, &code);
  if (!setup) {
    finalize_comm();
    return code;
  }
  const bool rank0 = setup->rank0();
  nlohmann::json summary = nlohmann::json::array(), details = nlohmann::json::array();
  int exit_code = 0;
  // What the loaded model cannot take (images for a text model) fails before any task is scored.
  for (size_t i = 0; i < tasks.size() && exit_code == 0; i++)
    if (Status s = check_choice_images(questions[i], setup->generator->config(), tasks[i]); !s) {
      if (rank0) print_error("eval", "--task " + s.message());
      exit_code = 2;
    }
  for (size_t i = 0; i < tasks.size() && exit_code == 0; i++) {
    Result<ChoiceTaskScore> s =
        score_choice_task(questions[i], *setup->tokenizer, *setup->generator, tasks[i]);
    if (!s) {
      if (rank0) print_error("eval", "--task " + s.status().message());
      exit_code = 1;
      break;
    }
    if (rank0)
      std::printf("task %s: %lld questions | acc %.4f | acc_norm %.4f\n", tasks[i].c_str(),
                  static_cast<long long>(s->questions), s->acc, s->acc_norm);
    const nlohmann::json one = {{"task", tasks[i]},
                                {"questions", s->questions},
                                {"acc", s->acc},
                                {"acc_norm", s->acc_norm}};
    summary.push_back(one);
    nlohmann::json full = one;
    full["loglikelihoods"] = s->loglikelihoods;
    details.push_back(std::move(full));
  }
  if (rank0 && exit_code == 0) {
    std::printf("%s\n", nlohmann::json{{"tasks", summary}}.dump().c_str());
    if (!output.empty()) {
      FILE* f = std::fopen(output.c_str(), "w");
      const std::string text = nlohmann::json{{"tasks", details}}.dump(1) + "\n";
      if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size()) {
        print_error("eval", "--output " + output + ": cannot write the file");
        exit_code = 1;
      }
      if (f) std::fclose(f);
    }
  }
  std::fflush(stdout);
  setup.reset();
  finalize_comm();
  return exit_code;
}

}  // namespace lattice::cli
