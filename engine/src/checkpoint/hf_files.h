// A Hugging Face model as it lies on disk, for every architecture's interchange (hf_gpt2.h,
// hf_llama.h): one safetensors file with its config.json beside it, or a model directory with
// config.json and model.safetensors or the shards model-0000N-of-0000M.safetensors named by
// model.safetensors.index.json. Reading opens and checks every file once; writing shards above
// a size as save_pretrained does. What the tensors mean is the architectures' business.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "lattice/status.h"

namespace lattice {

// One tensor of an HF model and the file that holds it.
struct HfEntry {
  const safetensors::File* file;
  const safetensors::TensorInfo* info;
  const std::string& name() const { return info->name; }
};

class HfWeights {
 public:
  // `path`: a directory (model.safetensors, else model.safetensors.index.json and its shards;
  // config.json in it), a *.index.json file (its shards beside it), or one .safetensors file
  // (config.json beside it, when there is one). io_error / corrupt name the file: a directory
  // with neither weights file, an index whose weight_map names a shard that is missing or a
  // tensor its shard lacks, a tensor held by two shards, and every safetensors::File::open error.
  static Result<HfWeights> open(const std::string& path);

  const std::string& path() const { return path_; }
  // The config.json of the model; empty when a lone file has none beside it.
  const std::string& config_path() const { return config_path_; }
  // Every tensor of every file, files in the index's order, tensors in each file's data order.
  const std::vector<HfEntry>& tensors() const { return tensors_; }
  const HfEntry* find(const std::string& name) const;
  // Where the weights were read from, for messages: the file, or "DIR (N shards)".
  std::string describe() const;

 private:
  std::string path_, config_path_;
  std::vector<std::unique_ptr<safetensors::File>> files_;
  std::vector<HfEntry> tensors_;
};

// Reads config.json as a JSON object; invalid_argument naming `path` when it is not one.
Result<nlohmann::json> read_hf_config(const std::string& path);

// How HF weights are written.
struct HfWriteOptions {
  safetensors::Dtype dtype = safetensors::Dtype::kF32;  // kF32 or kBF16 (--hf-dtype)
  // A directory's weights are split into model-0000N-of-0000M.safetensors shards of at most
  // this many tensor bytes (a larger tensor has a shard of its own) with
  // model.safetensors.index.json; transformers' save_pretrained default (5 GB).
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Where an export goes: PATH is a directory when it is one already or its name has no extension
// (`out/llama-8b`): weights and config.json go into it; otherwise PATH is the weights file itself
// (one file, never sharded) and config.json goes beside it. Missing directories are created.
struct HfTarget {
  std::string weights_dir;  // the directory of the weights and config.json
  std::string single_file;  // the weights file when PATH names one; empty for a directory
  std::string config_path() const { return weights_dir + "/config.json"; }
};
HfTarget hf_target(const std::string& path);

// Writes `tensors` (their dtype set from options) to `target` with metadata {"format": "pt"}:
// one file, or shards and the index. Each file is written atomically (safetensors::write);
// files of an earlier export in the directory that this one does not replace (model.safetensors,
// the index, model-*-of-*.safetensors) are removed, so the directory holds one model.
Status write_hf_weights(const HfTarget& target, std::vector<safetensors::TensorSource> tensors,
                        const HfWriteOptions& options);

// A float flag's value as the decimal the user typed (0.02f is written 0.02, not 0.0199999995),
// for config.json.
double hf_decimal(float x);

// "F32" -> "float32", "BF16" -> "bfloat16": config.json's torch_dtype.
const char* hf_torch_dtype(safetensors::Dtype dtype);

}  // namespace lattice
