// lattice-bench-tokenizer: the encode rate of GPT2BPETokenizer (or, with --hf, of
// HuggingFaceTokenizer) on a text file, one document per line (or per frame of a .bin file:
// u32 byte count, then the bytes, as hf_tokenizer_reference.js writes them), with 1, 2, ...
// threads that each encode a contiguous share of the documents. Every pass runs on fresh
// threads, so each starts with empty word caches (Note [per-thread word cache]). Prints a
// table and one "RESULT {json}" line per thread count. Compare with gpt_tokenizer_peer.js
// through tokenizer_vs_npm.sh (GPT-2), with hf_tokenizers_peer.js through
// hf_tokenizer_vs_rust.sh (--hf).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_machine.h"
#include "lattice/tokenizer.h"

namespace {

void usage(FILE* to) {
  std::fprintf(to,
               "usage: lattice-bench-tokenizer FILE [--threads 1,2] [--repeat 3] "
               "[--vocab-dir DIR | --hf PATH]\n"
               "  FILE         text to encode, one document per line (empty lines skipped), or\n"
               "               FILE.bin: documents framed by a little-endian u32 byte count\n"
               "  --threads    thread counts to measure, comma separated (default 1,2)\n"
               "  --repeat     passes per thread count; the fastest is reported (default 3)\n"
               "  --vocab-dir  GPT2BPETokenizer: holds vocab.json and merges.txt (default %s)\n"
               "  --hf         HuggingFaceTokenizer: a tokenizer.json or its directory\n",
               lattice::gpt2_vocab_dir().c_str());
}

struct Pass {
  double seconds;
  size_t tokens;
};

// Encodes every line once with `threads` threads, each taking a contiguous share of about
// equal bytes.
Pass run_pass(const lattice::Tokenizer& tokenizer, const std::vector<std::string_view>& lines,
              size_t bytes, int threads) {
  std::vector<size_t> first_line(threads + 1, lines.size());
  first_line[0] = 0;
  size_t seen = 0;
  int share = 1;
  for (size_t i = 0; i < lines.size() && share < threads; i++) {
    if (seen >= bytes * share / threads) first_line[share++] = i;
    seen += lines[i].size();
  }
  std::vector<size_t> tokens(threads, 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; w++) {
    workers.emplace_back([&, w] {
      size_t n = 0;
      for (size_t i = first_line[w]; i < first_line[w + 1]; i++) {
        n += tokenizer.encode(lines[i]).size();
      }
      tokens[w] = n;
    });
  }
  for (std::thread& t : workers) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t total = 0;
  for (const size_t n : tokens) total += n;
  return {seconds, total};
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, vocab_dir = lattice::gpt2_vocab_dir(), hf_path, thread_list = "1,2";
  int repeat = 3;
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if ((arg == "--threads" || arg == "--repeat" || arg == "--vocab-dir" || arg == "--hf") &&
        !has_value) {
      std::fprintf(stderr, "error: %s needs a value\n", arg.c_str());
      return 2;
    }
    if (arg == "--threads") {
      thread_list = argv[++i];
    } else if (arg == "--repeat") {
      repeat = std::atoi(argv[++i]);
    } else if (arg == "--vocab-dir") {
      vocab_dir = argv[++i];
    } else if (arg == "--hf") {
      hf_path = argv[++i];
    } else if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else if (path.empty() && !arg.starts_with("-")) {
      path = arg;
    } else {
      std::fprintf(stderr, "error: unexpected argument '%s'\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  std::vector<int> thread_counts;
  for (size_t at = 0; at <= thread_list.size();) {
    const size_t comma = std::min(thread_list.find(',', at), thread_list.size());
    const int n = std::atoi(thread_list.substr(at, comma - at).c_str());
    if (n < 1) {
      std::fprintf(stderr, "error: --threads '%s' must list positive integers\n",
                   thread_list.c_str());
      return 2;
    }
    thread_counts.push_back(n);
    at = comma + 1;
  }
  if (path.empty() || repeat < 1) {
    usage(stderr);
    return 2;
  }

  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: cannot open '%s'\n", path.c_str());
    return 1;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string_view> lines;  // documents: the non-empty lines, without '\n'
  size_t bytes = 0;
  if (path.ends_with(".bin")) {
    for (size_t at = 0; at + 4 <= text.size();) {
      uint32_t n = 0;
      std::memcpy(&n, text.data() + at, 4);
      n = static_cast<uint32_t>(std::min<size_t>(n, text.size() - at - 4));
      lines.emplace_back(text.data() + at + 4, n);
      bytes += n;
      at += 4 + size_t{n};
    }
  } else {
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find('\n', at), text.size());
      if (end > at) {
        lines.emplace_back(text.data() + at, end - at);
        bytes += end - at;
      }
      at = end + 1;
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  lattice::TokenizerOptions options;
  if (hf_path.empty()) {
    options.type = "GPT2BPETokenizer";
    options.vocab_file = vocab_dir + "/vocab.json";
    options.merge_file = vocab_dir + "/merges.txt";
  } else {
    options.type = "HuggingFaceTokenizer";
    options.model_file = hf_path;
  }
  lattice::Result<std::unique_ptr<lattice::Tokenizer>> loaded = lattice::make_tokenizer(options);
  if (!loaded) {
    std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
    return 1;
  }
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", lattice::bench::machine_line().c_str());
  std::printf(
      "lattice-bench-tokenizer: %s (%s), %zu documents, %.2f MB encoded (best of %d; "
      "tokenizer loaded in %.0f ms)\n",
      (*loaded)->type().c_str(), path.c_str(), lines.size(), bytes / 1e6, repeat,
      load_seconds * 1e3);
  std::printf("%8s %10s %10s %12s %12s %9s\n", "threads", "seconds", "MB/s", "Mtokens/s", "tokens",
              "speedup");
  double one_thread_rate = 0;
  for (const int threads : thread_counts) {
    Pass best{1e30, 0};
    for (int r = 0; r < repeat; r++) {
      const Pass p = run_pass(**loaded, lines, bytes, threads);
      if (p.seconds < best.seconds) best = p;
    }
    const double mb_per_s = bytes / 1e6 / best.seconds;
    if (one_thread_rate == 0 && threads == 1) one_thread_rate = mb_per_s;
    const double speedup = one_thread_rate > 0 ? mb_per_s / one_thread_rate : 0;
    std::printf("%8d %10.3f %10.2f %12.3f %12zu %8.2fx\n", threads, best.seconds, mb_per_s,
                best.tokens / 1e6 / best.seconds, best.tokens, speedup);
    std::printf(
        "RESULT {\"impl\":\"lattice\",\"threads\":%d,\"seconds\":%.4f,\"bytes\":%zu,"
        "\"tokens\":%zu,\"mb_per_s\":%.3f,\"tokens_per_s\":%.1f}\n",
        threads, best.seconds, bytes, best.tokens, mb_per_s, best.tokens / best.seconds);
  }
  return 0;
}
