// lattice ckpt merge-lora --base DIR --lora DIR --output DIR: a LoRA run's adapters folded into
// its base (Note [LoRA] in engine/src/model/param_layout.h), W' = W + (alpha / r) B A on every
// adapted linear, written as an ordinary weights-only checkpoint of the base's architecture
// (TP 1, PP 1; any layout loads it, `lattice generate` reads it like any other).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "commands.h"
#include "lattice/layout.h"

namespace lattice::cli {

namespace {

Result<CheckpointRef> resolve_dir(const std::string& path) {
  if (std::filesystem::exists(path + "/metadata.json")) {
    CheckpointRef ref;
    ref.path = path;
    return ref;
  }
  return find_checkpoint(path, 0);
}

// W (out, in) += s * B (out, r) A (r, in), summed in double; every shape as the checkpoints hold
// them (global). SwiGLU's (2, F, C) FC1 and its (2, F, r) B are (2F, C) and (2F, r) here.
Status merge_one(CheckpointReader& lora, const ParamTensor& w, float* weight, double s) {
  const std::string stem = w.name.substr(0, w.name.size() - std::string(".weight").size());
  std::vector<int64_t> a_shape, b_shape;
  std::vector<float> a, b;
  if (Status st = lora.read_global("model", stem + ".adapter.linear_in.weight", a_shape, a); !st)
    return st;
  if (Status st = lora.read_global("model", stem + ".adapter.linear_out.weight", b_shape, b); !st)
    return st;
  const int64_t in = w.global_shape.back(), out = static_cast<int64_t>(w.numel) / in;
  const int64_t r = a_shape.front();
  if (a_shape.size() != 2 || a_shape[1] != in || b_shape.back() != r ||
      static_cast<int64_t>(b.size()) != out * r)
    return Status::invalid_argument(lora.path() + ": the adapter of " + w.name +
                                    " does not fit the base's shape " +
                                    safetensors::shape_to_string(w.global_shape));
  std::vector<double> row(in);
  for (int64_t o = 0; o < out; o++) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t k = 0; k < r; k++) {
      const double bk = b[o * r + k];
      for (int64_t i = 0; i < in; i++) row[i] += bk * a[k * in + i];
    }
    for (int64_t i = 0; i < in; i++)
      weight[o * in + i] = static_cast<float>(weight[o * in + i] + s * row[i]);
  }
  return Status::ok();
}

}  // namespace

int merge_lora_command(const std::vector<std::string>& args) {
  std::string base, lora, output;
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    if (args[i] == "--base")
      base = args[i + 1];
    else if (args[i] == "--lora")
      lora = args[i + 1];
    else if (args[i] == "--output")
      output = args[i + 1];
    else {
      print_error("ckpt merge-lora", "unknown flag '" + args[i] +
                                         "'; usage: lattice ckpt merge-lora --base DIR --lora "
                                         "DIR --output DIR");
      return 2;
    }
  }
  if (base.empty() || lora.empty() || output.empty() || args.size() % 2 != 0) {
    print_error("ckpt merge-lora",
                "usage: lattice ckpt merge-lora --base DIR --lora DIR --output DIR");
    return 2;
  }
  Result<CheckpointRef> base_ref = resolve_dir(base);
  Result<CheckpointRef> lora_ref = base_ref ? resolve_dir(lora) : base_ref;
  if (!base_ref || !lora_ref) {
    print_error("ckpt merge-lora", (!base_ref ? base_ref : lora_ref).status().message());
    return 1;
  }
  Result<std::unique_ptr<CheckpointReader>> base_reader = CheckpointReader::open(base_ref->path);
  Result<std::unique_ptr<CheckpointReader>> lora_reader =
      base_reader ? CheckpointReader::open(lora_ref->path) : Status::ok();
  if (!base_reader || !lora_reader) {
    print_error("ckpt merge-lora",
                (!base_reader ? base_reader.status() : lora_reader.status()).message());
    return 1;
  }
  const ModelConfig adapted = (*lora_reader)->model();
  if (!adapted.lora()) {
    print_error("ckpt merge-lora", "--lora " + lora + " holds no LoRA adapters (no lora_rank)");
    return 2;
  }
  ModelConfig m = (*base_reader)->model();
  if (m.lora()) {
    print_error("ckpt merge-lora", "--base " + base + " is itself a LoRA checkpoint");
    return 2;
  }
  m.tensor_model_parallel_size = 1;
  if (Status s = check_architecture(lora_ref->path, adapted, m);
      !s || adapted.num_layers != m.num_layers || adapted.hidden_size != m.hidden_size) {
    print_error("ckpt merge-lora",
                s ? "--lora " + lora + " was trained on another model shape" : s.message());
    return 2;
  }
  HostChunk model(m);
  const ParallelLayout layout = [&] {
    ParallelLayout l;
    l.num_layers = m.num_layers;
    return l;
  }();
  RankParts parts;
  parts.layout = &layout;
  parts.chunks = {model.weights()};
  if (Status s = load_checkpoint(*base_ref, parts, true, nullptr); !s) {
    print_error("ckpt merge-lora", s.message());
    return 1;
  }
  const double scale = adapted.lora_scale();
  int merged = 0;
  for (const ParamTensor& t : model.layout.tensors()) {
    for (const char* linear : {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"}) {
      if (!adapted.lora_targets(linear) ||
          t.name.find(std::string(linear) + ".weight") == std::string::npos)
        continue;
      if (Status s = merge_one(**lora_reader, t, model.params.data() + t.offset, scale); !s) {
        print_error("ckpt merge-lora", s.message());
        return 1;
      }
      merged++;
    }
  }
  std::vector<std::string> notes;
  Result<SaveLock> lock = begin_save(output, 0, &notes);
  for (const std::string& note : notes) std::printf("%s\n", note.c_str());
  if (!lock) {
    print_error("ckpt merge-lora", output + ": " + lock.status().message());
    return 1;
  }
  // The base run's recorded settings (tokenizer, data), so generate and --load find them.
  const nlohmann::json meta =
      nlohmann::json::parse((*base_reader)->metadata_json(), nullptr, false);
  const std::string config =
      meta.is_object() && meta.contains("config") && meta["config"].is_object()
          ? meta["config"].dump()
          : "{}";
  int64_t bytes = 0;
  Status s = write_shard(lock->tmp_dir(), 0, {}, parts);
  if (s)
    s = finalize_checkpoint(output, 0, 1, TrainState{}, m, config, {layout, false, false, false}, 0,
                            &bytes);
  if (!s) {
    print_error("ckpt merge-lora", s.message());
    return 1;
  }
  std::printf("merged %d adapted linears (scale %g) into %s/%s (weights only, %.1f MB)\n", merged,
              scale, output.c_str(), checkpoint_directory_name(0).c_str(), bytes / 1e6);
  return 0;
}

}  // namespace lattice::cli
