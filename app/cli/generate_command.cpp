// lattice generate: continuations of prompts from a checkpoint or a Hugging Face GPT-2 model,
// printed at the end or streamed token by token. Under mpirun the model is split by tensor
// parallelism; rank 0 reads the prompts and prints, every rank computes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "infer_setup.h"
#include "infer/prompt_images.h"
#include "text_stream.h"

namespace lattice::cli {

namespace {

struct GenerateFlags {
  std::vector<std::string> prompts, stop, images;
  int tokens_to_generate = 64;
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 0.0f;
  uint64_t seed = 1234;
  bool stream = false, logprobs = false, ignore_eod = false;
  int max_batch_size = 32;
};

std::vector<FlagSpec> generate_specs(GenerateFlags& f) {
  return {
      {"tokens-to-generate",
       "tokens to generate per prompt (fewer at EOD, a stop string or the "
       "end of the context)",
       &f.tokens_to_generate},
      {"temperature", "divide the logits by this before sampling; 0 is greedy", &f.temperature},
      {"top-k", "sample among the K most likely tokens (0: all; 1: greedy)", &f.top_k},
      {"top-p", "sample among the most likely tokens holding probability P (0: off)", &f.top_p},
      {"seed", "random seed of the sampling (each prompt draws from its own generator)", &f.seed},
      {"stream", "print tokens as they are generated (prompts one after the other)", &f.stream},
      {"logprobs", "print each generated token's id and log-probability", &f.logprobs},
      {"ignore-eod", "keep generating past the end-of-document token", &f.ignore_eod},
      {"max-batch-size", "prompts decoded together", &f.max_batch_size},
  };
}

constexpr const char* kUsage =
    "usage: lattice generate (--load DIR | --load-hf PATH [model flags]) [--prompt TEXT]...\n"
    "                        [generation flags]\n\n"
    "Continues each prompt (--prompt, repeatable; without it, one prompt per line of stdin)\n"
    "and prints the prompt with its continuation. Under `mpirun -n T` with\n"
    "--tensor-model-parallel-size T the model is split over the ranks.\n\n"
    "generation:\n"
    "  --prompt TEXT                   a prompt (repeatable)\n"
    "  --image PATH                    a PNG or JPEG for a vision-language model (repeatable):\n"
    "                                  the i-th fills each prompt's i-th <image> (a prompt\n"
    "                                  without <image> gets \"<image>\\n\" prepended)\n"
    "  --stop TEXT                     end a continuation at this text (repeatable)\n";

// Checks the generation flags; every problem, one sentence each.
std::vector<std::string> validate(const GenerateFlags& f) {
  std::vector<std::string> e;
  if (f.tokens_to_generate < 0)
    e.push_back("--tokens-to-generate must be 0 or more, not " +
                std::to_string(f.tokens_to_generate));
  if (!(f.temperature >= 0.0f) || !std::isfinite(f.temperature))
    e.push_back("--temperature must be a number >= 0 (0: greedy)");
  if (f.top_k < 0) e.push_back("--top-k must be 0 (off) or more, not " + std::to_string(f.top_k));
  if (!(f.top_p >= 0.0f && f.top_p <= 1.0f)) e.push_back("--top-p must lie in [0, 1] (0: off)");
  if (f.top_k > 0 && f.top_p > 0.0f) e.push_back("--top-k and --top-p are alternatives; give one");
  if (f.max_batch_size < 1) e.push_back("--max-batch-size must be 1 or more");
  for (const std::string& s : f.stop)
    if (s.empty()) e.push_back("--stop needs a non-empty text");
  return e;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// The text of prompt + continuation, as Megatron's text field: the whole sequence decoded.
// The generated text as it reads after the prompt (decoded together with it, so that the
// tokenizer's spacing at the boundary is the one the whole text has), cut before the first
// stop string; *stopped tells whether one was found.
std::string continuation(const Tokenizer& tok, const GenerationRequest& req,
                         const std::vector<int32_t>& generated, bool* stopped = nullptr) {
  std::vector<int32_t> ids = prompt_text_tail(tok, req.prompt);  // no image placeholders
  const std::string prefix = tok.decode(ids);
  ids.insert(ids.end(), generated.begin(), generated.end());
  const std::string whole = tok.decode(ids);
  std::string text = whole.compare(0, prefix.size(), prefix) == 0 ? whole.substr(prefix.size())
                                                                  : tok.decode(generated);
  size_t cut = std::string::npos;
  for (const std::string& stop : req.stop)
    if (!stop.empty()) cut = std::min(cut, text.find(stop));
  if (stopped) *stopped = cut != std::string::npos;
  if (cut != std::string::npos) text.resize(cut);
  return text;
}

std::vector<int32_t> without_eod(const GenerationResult& res) {
  std::vector<int32_t> ids = res.tokens;
  if (res.finish == FinishReason::kEod && !ids.empty()) ids.pop_back();
  return ids;
}

std::string full_text(const Tokenizer& tok, const GenerationRequest& req,
                      const GenerationResult& res) {
  return decode_prompt(tok, req.prompt) + continuation(tok, req, without_eod(res));
}

void print_logprobs(const Tokenizer& tok, const GenerationResult& res) {
  for (size_t i = 0; i < res.tokens.size(); i++) {
    const int32_t id = res.tokens[i];
    std::printf("  %6d %10.5f  %s\n", id, res.logprobs[i],
                tok.decode(std::span<const int32_t>(&id, 1)).c_str());
  }
}

}  // namespace

int generate_command(const std::vector<std::string>& args) {
  GenerateFlags f;
  const std::vector<FlagSpec> specs = generate_specs(f);
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << kUsage << flags_help(specs) << "\n" << kModelFlagsHelp;
      return 0;
    }
  std::vector<std::string> rest;
  std::vector<std::string> errors = take_flags(
      args, specs, {{"prompt", &f.prompts}, {"stop", &f.stop}, {"image", &f.images}}, rest);
  for (const std::string& e : validate(f)) errors.push_back(e);
  if (!errors.empty()) {
    print_error("generate", join_lines(errors));
    return 2;
  }
  int code = 0;
  std::unique_ptr<InferenceSetup> setup =
      setup_inference("generate", rest, f.max_batch_size, &code);
  if (!setup) {
    finalize_comm();
    return code;
  }
  Comm& comm = *setup->world;
  const Tokenizer& tok = *setup->tokenizer;
  Generator& gen = *setup->generator;
  const bool rank0 = setup->rank0();
  auto finish = [&](int exit_code) {
    setup.reset();
    finalize_comm();
    return exit_code;
  };

  // Rank 0 reads and encodes the prompts; the other ranks receive the requests.
  std::vector<GenerationRequest> requests;
  std::string problem;
  if (rank0) {
    if (f.prompts.empty())
      for (std::string line; std::getline(std::cin, line);)
        if (!line.empty()) f.prompts.push_back(line);
    if (f.prompts.empty()) problem = "no prompt: give --prompt TEXT or prompts on stdin";
    std::vector<float> images;
    if (problem.empty() && !f.images.empty()) {
      Result<std::vector<float>> loaded = load_prompt_images(gen.config(), f.images);
      if (loaded)
        images = std::move(*loaded);
      else
        problem = loaded.status().message();
    }
    for (size_t i = 0; i < f.prompts.size() && problem.empty(); i++) {
      GenerationRequest r;
      Result<std::vector<int32_t>> ids =
          f.images.empty() ? Result<std::vector<int32_t>>(tokenize_with_bos(tok, f.prompts[i]))
                           : tokenize_with_images(tok, gen.config(), f.prompts[i], f.images.size());
      if (!ids) {
        problem = "--prompt " + std::to_string(i + 1) + ": " + ids.status().message();
        break;
      }
      r.prompt = std::move(*ids);
      r.images = images;
      r.tokens_to_generate = f.tokens_to_generate;
      r.sampling = {f.temperature, f.top_k, f.top_p, f.seed};
      r.stop_at_eod = !f.ignore_eod;
      r.logprobs = f.logprobs;
      r.stop = f.stop;
      if (Status s = gen.check(r); !s)  // its sentence names the limit (context, vocabulary)
        problem = "--prompt " + std::to_string(i + 1) + ": " + s.message();
      requests.push_back(std::move(r));
    }
  }
  int bad = problem.empty() ? 0 : 1;
  if (comm.size() > 1) (void)comm.broadcast(&bad, 1, DType::kInt32, 0);
  if (bad) {
    if (rank0) print_error("generate", problem);
    return finish(2);
  }
  if (Status s = broadcast_requests(comm, requests, 0); !s) comm.abort(s.message(), 1);

  if (f.stream) {
    // One prompt at a time so that its tokens print as a readable line.
    for (const GenerationRequest& req : requests) {
      // The continuation as it reads after the prompt; text that could begin a stop string
      // waits.
      TextStream text([&](const std::vector<int32_t>& ids) { return continuation(tok, req, ids); },
                      req.stop);
      auto show = [](const std::string& piece) {
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      };
      if (rank0) std::fputs(decode_prompt(tok, req.prompt).c_str(), stdout);
      auto on_token = [&](int, int32_t token, float logprob) {
        if (!rank0 || text.stopped()) return;
        if (req.stop_at_eod && token == gen.eod()) return;
        show(text.push(token));
        if (f.logprobs) std::fprintf(stderr, "[%d %.5f]", token, logprob);
      };
      Result<std::vector<GenerationResult>> r = gen.generate({req}, on_token);
      if (!r) {
        if (rank0) print_error("generate", r.status().message());
        return finish(1);
      }
      if (rank0) {
        show(text.finish(continuation(tok, req, without_eod(r->front()))));  // a held-back tail
        std::printf("\n");
      }
    }
    return finish(0);
  }
  Result<std::vector<GenerationResult>> results = gen.generate(requests);
  if (!results) {
    if (rank0) print_error("generate", results.status().message());
    return finish(1);
  }
  if (rank0)
    for (size_t i = 0; i < requests.size(); i++) {
      const GenerationResult& res = (*results)[i];
      if (requests.size() > 1) std::printf("[%zu] ", i + 1);
      std::printf("%s\n", full_text(tok, requests[i], res).c_str());
      if (f.logprobs) print_logprobs(tok, res);
    }
  return finish(0);
}

}  // namespace lattice::cli
