// lattice-bench-decode: decoding rate of the Generator (greedy, key/value cache) on a random
// model of config A or B, at one batch size. Prints the first generated tokens (so that
// decode_vs_pytorch.sh can check the peer decodes the same) and, last, one line
//   RESULT {"impl":"lattice","config":"B","batch":1,"tokens_per_s":...,"ms_per_step":...}
// --save-hf FILE also writes the model's weights as GPT-2 safetensors for the peer.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "checkpoint/hf_gpt2.h"
#include "infer/infer_model.h"
#include "lattice/infer.h"
#include "lattice/kernels.h"

using namespace lattice;

namespace {

ModelConfig preset(const std::string& name) {
  ModelConfig c;
  c.attention_dropout = c.hidden_dropout = 0.0f;
  if (name == "A") {
    c.num_layers = 4, c.hidden_size = 256, c.num_attention_heads = 4, c.vocab_size = 8192;
    c.seq_length = 256;
  } else {
    c.num_layers = 12, c.hidden_size = 768, c.num_attention_heads = 12, c.vocab_size = 50257;
    c.seq_length = 256;
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  lattice::kernels::apply_process_settings(argv);  // kernels.h
  std::string config = "B", save_hf;
  int batch = 1, prompt_len = 16, tokens = 64, threads = 2, repeats = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--config")
      config = v;
    else if (a == "--batch")
      batch = std::stoi(v);
    else if (a == "--prompt-len")
      prompt_len = std::stoi(v);
    else if (a == "--tokens")
      tokens = std::stoi(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--repeats")
      repeats = std::stoi(v);
    else if (a == "--save-hf")
      save_hf = v;
    else {
      std::fprintf(stderr,
                   "usage: lattice-bench-decode [--config A|B] [--batch N] "
                   "[--prompt-len P] [--tokens N] [--threads T] [--repeats R] "
                   "[--save-hf FILE]\n");
      return 2;
    }
  }
  kernels::set_num_threads(threads);
  const ModelConfig m = preset(config);
  std::unique_ptr<Generator> gen = Generator::random(m, 1234, nullptr, batch);
  if (!save_hf.empty()) {
    if (Status s =
            export_hf_gpt2(save_hf, gen->config(), gen->model().layout(), gen->model().params());
        !s) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
  }
  // Prompt b: ids (b * 131 + i * 7919) % V, the same formula as decode_torch.py.
  std::vector<GenerationRequest> requests(batch);
  for (int b = 0; b < batch; b++) {
    for (int i = 0; i < prompt_len; i++)
      requests[b].prompt.push_back(static_cast<int32_t>((b * 131 + i * 7919) % m.vocab_size));
    requests[b].tokens_to_generate = tokens;
    requests[b].sampling.temperature = 0.0f;
    requests[b].stop_at_eod = false;
    requests[b].logprobs = false;
  }
  using clock = std::chrono::steady_clock;
  double best_rate = 0, best_ms = 0;
  std::vector<GenerationResult> last;
  for (int r = 0; r < repeats; r++) {
    clock::time_point first_token{}, last_token{};
    int seen = 0;
    auto on_token = [&](int, int32_t, float) {
      // The first step's tokens come from the prefill: the decode clock starts after them.
      if (++seen == batch) first_token = clock::now();
      last_token = clock::now();
    };
    auto out = gen->generate(requests, on_token);
    if (!out) {
      std::fprintf(stderr, "%s\n", out.status().message().c_str());
      return 1;
    }
    const double s = std::chrono::duration<double>(last_token - first_token).count();
    const double rate = static_cast<double>(batch) * (tokens - 1) / s;
    if (rate > best_rate) best_rate = rate, best_ms = 1e3 * s / (tokens - 1);
    last = std::move(*out);
  }
  std::printf("%s\n", lattice::bench::machine_line().c_str());
  std::printf("first tokens:");
  for (int i = 0; i < std::min<int>(8, static_cast<int>(last[0].tokens.size())); i++)
    std::printf(" %d", last[0].tokens[i]);
  std::printf(
      "\nRESULT {\"impl\":\"lattice\",\"config\":\"%s\",\"batch\":%d,\"threads\":%d,"
      "\"tokens_per_s\":%.2f,\"ms_per_step\":%.3f,\"first\":[",
      config.c_str(), batch, threads, best_rate, best_ms);
  for (int i = 0; i < std::min<int>(8, static_cast<int>(last[0].tokens.size())); i++)
    std::printf("%s%d", i ? "," : "", last[0].tokens[i]);
  std::printf("]}\n");
  return 0;
}
