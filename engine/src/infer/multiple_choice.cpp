// Multiple-choice scoring (lattice/multiple_choice.h): each (context, choice) pair is one
// prompt whose prompt log-probabilities the generator computes (no token is generated); the
// choice's score is the sum over its tokens.
#include "lattice/multiple_choice.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace lattice {

namespace {

using json = nlohmann::json;

// Prompts per generate() call: bounds the memory of the results, not the batching (the
// generator batches by its own --max-batch-size).
constexpr size_t kPromptsPerCall = 256;

Status bad_line(const std::string& path, int line, const std::string& rule) {
  return Status::invalid_argument(path + ":" + std::to_string(line) + ": " + rule);
}

Result<ChoiceQuestion> parse_question(const std::string& text, const std::string& path, int line) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return bad_line(path, line,
                    "not a JSON object (expected {\"context\": ..., \"choices\": [...], "
                    "\"label\": k})");
  ChoiceQuestion q;
  q.line = line;
  const auto context = j.find("context");
  if (context == j.end() || !context->is_string())
    return bad_line(path, line, "\"context\" must be a string");
  q.context = context->get<std::string>();
  const auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->size() < 2)
    return bad_line(path, line, "\"choices\" must be a list of at least two strings");
  for (const json& c : *choices) {
    if (!c.is_string() || c.get_ref<const std::string&>().empty())
      return bad_line(path, line, "\"choices\" must hold non-empty strings");
    q.choices.push_back(c.get<std::string>());
  }
  const auto label = j.find("label");
  if (label == j.end() || !label->is_number_integer() || label->get<int64_t>() < 0 ||
      label->get<int64_t>() >= static_cast<int64_t>(q.choices.size()))
    return bad_line(path, line,
                    "\"label\" must be an integer index into \"choices\" (0 to " +
                        std::to_string(q.choices.size() - 1) + ")");
  q.label = static_cast<int>(label->get<int64_t>());
  return q;
}

// Unicode code points of UTF-8 `s` (Python's len(), which the harness divides by).
size_t characters(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// The index of the largest of `v`; the lowest among equals.
size_t best(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

Result<std::vector<ChoiceQuestion>> read_choice_task(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::invalid_argument(path + ": cannot open the task file");
  std::vector<ChoiceQuestion> out;
  std::string text;
  for (int line = 1; std::getline(in, text); line++) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<ChoiceQuestion> q = parse_question(text, path, line);
    if (!q) return q.status();
    out.push_back(std::move(*q));
  }
  if (out.empty()) return Status::invalid_argument(path + ": the task file holds no questions");
  return out;
}

Result<ChoiceTaskScore> score_choice_task(const std::vector<ChoiceQuestion>& questions,
                                          const Tokenizer& tokenizer, Generator& generator,
                                          const std::string& where) {
  // One prompt per (question, choice), with where its choice's tokens begin.
  std::vector<GenerationRequest> requests;
  std::vector<size_t> first_choice_token;
  for (const ChoiceQuestion& q : questions) {
    // As the harness: whitespace that ends the context starts the continuation instead.
    const size_t kept = q.context.find_last_not_of(" \t\n\r") + 1;  // npos + 1 == 0
    const std::string context = q.context.substr(0, kept), moved = q.context.substr(kept);
    const size_t context_tokens = tokenize_with_bos(tokenizer, context).size();
    for (const std::string& choice : q.choices) {
      GenerationRequest r;
      r.prompt = tokenize_with_bos(tokenizer, context + moved + choice);
      r.tokens_to_generate = 0;
      r.logprobs = false;
      r.prompt_logprobs = true;
      // The choice's first token needs a token before it to be predicted from.
      const size_t begin = std::max<size_t>(context_tokens, 1);
      if (r.prompt.size() <= begin)
        return bad_line(where, q.line,
                        "the choice \"" + choice + "\" adds no token after the context" +
                            (context_tokens == 0 ? " (the context is empty and the tokenizer "
                                                   "has no BOS: give a context)"
                                                 : ""));
      if (Status s = generator.check(r); !s) return bad_line(where, q.line, s.message());
      first_choice_token.push_back(begin);
      requests.push_back(std::move(r));
    }
  }
  std::vector<double> sums;
  sums.reserve(requests.size());
  for (size_t at = 0; at < requests.size(); at += kPromptsPerCall) {
    const size_t n = std::min(kPromptsPerCall, requests.size() - at);
    const std::vector<GenerationRequest> part(requests.begin() + at, requests.begin() + at + n);
    Result<std::vector<GenerationResult>> results = generator.generate(part);
    if (!results) return results.status();
    for (size_t i = 0; i < n; i++) {
      // prompt_logprobs[k - 1] is log p(prompt[k] | prompt[0..k-1]).
      const std::vector<float>& lp = (*results)[i].prompt_logprobs;
      double sum = 0;
      for (size_t k = first_choice_token[at + i]; k < requests[at + i].prompt.size(); k++)
        sum += lp[k - 1];
      sums.push_back(sum);
    }
  }
  ChoiceTaskScore score;
  score.questions = static_cast<int64_t>(questions.size());
  size_t next = 0;
  int64_t right = 0, right_norm = 0;
  for (const ChoiceQuestion& q : questions) {
    std::vector<double> ll(sums.begin() + next, sums.begin() + next + q.choices.size());
    std::vector<double> per_byte(ll.size());  // per character
    for (size_t c = 0; c < ll.size(); c++)
      per_byte[c] = ll[c] / static_cast<double>(characters(q.choices[c]));
    next += q.choices.size();
    right += best(ll) == static_cast<size_t>(q.label) ? 1 : 0;
    right_norm += best(per_byte) == static_cast<size_t>(q.label) ? 1 : 0;
    score.loglikelihoods.push_back(std::move(ll));
  }
  score.acc = static_cast<double>(right) / static_cast<double>(score.questions);
  score.acc_norm = static_cast<double>(right_norm) / static_cast<double>(score.questions);
  return score;
}

}  // namespace lattice
