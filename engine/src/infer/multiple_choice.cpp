// Multiple-choice scoring (lattice/multiple_choice.h): each (context, choice) pair is one
// prompt whose prompt log-probabilities the generator computes (no token is generated); the
// choice's score is the sum over its tokens. A question's images go with each of its prompts,
// as `lattice generate --image` passes them (infer/prompt_images.h).
#include "lattice/multiple_choice.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/image_io.h"
#include "infer/prompt_images.h"

namespace lattice {

namespace {

using json = nlohmann::json;

// Prompts per generate() call: bounds the memory of the results, not the batching (the
// generator batches by its own --max-batch-size).
constexpr size_t kPromptsPerCall = 256;
// Image values (floats) per generate() call: every prompt holds its own copy of its question's
// images (GenerationRequest::images), 3 x 336 x 336 floats (1.4 MB) each at LLaVA-1.5's size,
// so a call stops taking questions past 64 MiB of them.
constexpr size_t kImageValuesPerCall = size_t{1} << 24;

Status bad_line(const std::string& path, int line, const std::string& rule) {
  return Status::invalid_argument(path + ":" + std::to_string(line) + ": " + rule);
}

// A question's "images" (optional): file names, relative to the task file's folder, one per
// `<image>` of the context; each must open and start as a PNG or JPEG. Errors without the line.
Status parse_images(const json& j, const std::string& task_path, ChoiceQuestion& q) {
  const auto images = j.find("images");
  if (images == j.end()) return Status::ok();
  if (!images->is_array())
    return Status::invalid_argument("\"images\" must be a list of image file names (strings)");
  const std::filesystem::path folder = std::filesystem::path(task_path).parent_path();
  for (const json& name : *images) {
    if (!name.is_string() || name.get_ref<const std::string&>().empty())
      return Status::invalid_argument("\"images\" must be a list of image file names (strings)");
    const std::filesystem::path file(name.get<std::string>());
    q.images.push_back(file.is_absolute() ? file.string() : (folder / file).string());
  }
  const size_t markers = count_image_markers(q.context);
  if (markers != q.images.size())
    return Status::invalid_argument("the context has " + std::to_string(markers) +
                                    " <image> marker(s) for " + std::to_string(q.images.size()) +
                                    " file(s) in \"images\"; give one image per <image>");
  for (const std::string& choice : q.choices)
    if (count_image_markers(choice) > 0)
      return Status::invalid_argument("the choice \"" + choice +
                                      "\" holds <image>; images go in the context");
  for (const std::string& file : q.images)
    if (Status s = check_image_file(file); !s) return s;
  return Status::ok();
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
  if (Status s = parse_images(j, path, q); !s) return bad_line(path, line, s.message());
  return q;
}

// A prompt to score, not continue: its tokens' log-probabilities, no token generated.
GenerationRequest scoring_request(std::vector<int32_t> prompt) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.tokens_to_generate = 0;
  r.logprobs = false;
  r.prompt_logprobs = true;
  return r;
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

// Every question's prompt per choice, tokenised as lattice/multiple_choice.h says, and where its
// choices' tokens begin.
struct TaskPrompts {
  std::vector<std::vector<std::vector<int32_t>>> prompts;  // (questions, choices) token ids
  std::vector<size_t> first_choice_token;                  // (questions)
};

// The prompts of `questions`, each checked by the generator (a question that cannot run fails
// here, before any is scored).
Result<TaskPrompts> task_prompts(const std::vector<ChoiceQuestion>& questions,
                                 const Tokenizer& tokenizer, const Generator& generator,
                                 const std::string& where) {
  const ModelConfig& config = generator.config();
  TaskPrompts out;
  // generator.check() wants the images a prompt's placeholders ask for, not their values: one
  // zero buffer, sized per question, is lent to every check (no copy per prompt).
  std::vector<float> zeros;
  const size_t image_values = config.has_vision()
                                  ? static_cast<size_t>(config.vision.num_channels) *
                                        config.vision.img_h * config.vision.img_w
                                  : 0;
  for (const ChoiceQuestion& q : questions) {
    // As the harness: whitespace that ends the context starts the continuation instead.
    const size_t kept = q.context.find_last_not_of(" \t\n\r") + 1;  // npos + 1 == 0
    const std::string context = q.context.substr(0, kept), moved = q.context.substr(kept);
    // A question with images: each `<image>` as the tower's Np placeholder ids, as generate
    // and chat expand it.
    auto tokenize = [&](const std::string& text) {
      return q.images.empty() ? tokenize_with_bos(tokenizer, text)
                              : tokenize_image_text(tokenizer, config, text);
    };
    const size_t context_tokens = tokenize(context).size();
    // The choice's first token needs a token before it to be predicted from.
    const size_t begin = std::max<size_t>(context_tokens, 1);
    zeros.resize(q.images.size() * image_values);
    std::vector<std::vector<int32_t>>& mine = out.prompts.emplace_back();
    for (const std::string& choice : q.choices) {
      GenerationRequest r = scoring_request(tokenize(context + moved + choice));
      if (r.prompt.size() <= begin)
        return bad_line(where, q.line,
                        "the choice \"" + choice + "\" adds no token after the context" +
                            (context_tokens == 0 ? " (the context is empty and the tokenizer "
                                                   "has no BOS: give a context)"
                                                 : ""));
      r.images = std::move(zeros);
      const Status s = generator.check(r);
      zeros = std::move(r.images);
      if (!s) return bad_line(where, q.line, s.message());
      mine.push_back(std::move(r.prompt));
    }
    out.first_choice_token.push_back(begin);
  }
  return out;
}

// Each choice's sum of log-probabilities, question by question (the prompts are consumed). Scored
// a part at a time: a part's questions' images are decoded and normalised once per question and
// copied into each of its choices' requests.
Result<std::vector<double>> choice_sums(const std::vector<ChoiceQuestion>& questions,
                                        TaskPrompts& prompts, Generator& generator,
                                        const std::string& where) {
  std::vector<double> sums;
  for (size_t next = 0; next < questions.size();) {
    std::vector<GenerationRequest> part;
    std::vector<size_t> part_question;  // (part) the question of each request
    size_t values = 0;
    while (next < questions.size() && part.size() < kPromptsPerCall &&
           values < kImageValuesPerCall) {
      const ChoiceQuestion& q = questions[next];
      std::vector<float> images;
      for (const std::string& file : q.images) {
        Result<RgbImage> image = read_image(file);
        if (!image) return bad_line(where, q.line, image.status().message());
        append_prompt_image(generator.config(), *image, images);
      }
      for (std::vector<int32_t>& prompt : prompts.prompts[next]) {
        GenerationRequest r = scoring_request(std::move(prompt));
        r.images = images;
        values += images.size();
        part.push_back(std::move(r));
        part_question.push_back(next);
      }
      next++;
    }
    Result<std::vector<GenerationResult>> results = generator.generate(part);
    if (!results) return results.status();
    for (size_t i = 0; i < part.size(); i++) {
      // prompt_logprobs[k - 1] is log p(prompt[k] | prompt[0..k-1]).
      const std::vector<float>& lp = (*results)[i].prompt_logprobs;
      double sum = 0;
      for (size_t k = prompts.first_choice_token[part_question[i]]; k < part[i].prompt.size(); k++)
        sum += lp[k - 1];
      sums.push_back(sum);
    }
  }
  return sums;
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

Status check_choice_images(const std::vector<ChoiceQuestion>& questions, const ModelConfig& config,
                           const std::string& where) {
  for (const ChoiceQuestion& q : questions) {
    if (!q.images.empty()) {
      if (!config.has_vision())
        return bad_line(where, q.line,
                        "the question has \"images\", but the model has no vision tower (a text "
                        "model)");
      if (Status s = check_image_model(config, "\"images\""); !s)
        return bad_line(where, q.line, s.message());
      continue;
    }
    // A text model reads `<image>` as text; a vision-language model would expand it to image
    // rows that no image fills.
    size_t markers = count_image_markers(q.context);
    for (const std::string& choice : q.choices) markers += count_image_markers(choice);
    if (config.has_vision() && markers > 0)
      return bad_line(where, q.line,
                      "the question's text holds " + std::to_string(markers) +
                          " <image> marker(s) but it gives no \"images\" (one image file per "
                          "<image>)");
  }
  return Status::ok();
}

Result<ChoiceTaskScore> score_choice_task(const std::vector<ChoiceQuestion>& questions,
                                          const Tokenizer& tokenizer, Generator& generator,
                                          const std::string& where) {
  if (Status s = check_choice_images(questions, generator.config(), where); !s) return s;
  Result<TaskPrompts> prompts = task_prompts(questions, tokenizer, generator, where);
  if (!prompts) return prompts.status();
  Result<std::vector<double>> sums = choice_sums(questions, *prompts, generator, where);
  if (!sums) return sums.status();
  ChoiceTaskScore score;
  score.questions = static_cast<int64_t>(questions.size());
  size_t next = 0;
  int64_t right = 0, right_norm = 0;
  for (const ChoiceQuestion& q : questions) {
    std::vector<double> ll(sums->begin() + next, sums->begin() + next + q.choices.size());
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
