// The mechanism every Hugging Face architecture's interchange shares (hf_gpt2.cpp,
// hf_llama.cpp): a table of HF tensors, each with the Lattice tensor it lives in and how its
// rows map there; matching a file against the table with every problem named; import (rows
// scattered into the arena, the vocabulary's padding rows the mean of its real rows) and export (safetensors sources that
// gather the rows back). Import and export walk the same table, so they cannot disagree.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/hf_files.h"
#include "checkpoint/safetensors.h"
#include "lattice/status.h"
#include "model/param_layout.h"

namespace lattice {

// One HF tensor. Its rows are its first dimension (elements of the rest: the row width; one
// element for a 1-d tensor); row r is our tensor's row row_of(r) of the same width (identity
// when null). `transposed`: HF stores (width, rows), our rows are its columns (GPT-2's Conv1D).
struct HfTensor {
  std::string name;            // as the architecture spells it (no "transformer." prefix)
  std::vector<int64_t> shape;  // as HF stores it
  const ParamTensor* param;    // where it lives in our arena
  std::string flags;           // the flags that fix `shape`, for messages
  std::function<int64_t(int64_t)> row_of;
  bool transposed = false;
  std::string shape_note;  // appended to a wrong-shape message
};

// The table entry of HF tensor `name` (`shape`) that lives in `layout`'s tensor `our_name`, which
// must exist (asserted: the table is built for ParamLayout(config) of its architecture).
HfTensor hf_tensor(const ParamLayout& layout, std::string name, std::vector<int64_t> shape,
                   const std::string& our_name, std::string flags,
                   std::function<int64_t(int64_t)> row_of = nullptr);

// How an architecture's files are named, for matching and messages.
struct HfNaming {
  std::string architecture;  // "GPT-2", "Llama": "cannot import PATH as GPT-2"
  // A file tensor's name as the table spells it (a prefix stripped), or "" to skip it (buffers
  // such as GPT-2's causal masks or Llama's rotary inv_freq are no parameters).
  std::function<std::string(const std::string&)> canonical;
  // The layer of a canonical name, or -1; layer_prefix spells layer N as prefix + N.
  std::function<int(const std::string&)> layer_of;
  std::string layer_prefix;
  int num_layers = 0;  // the model's --num-layers
  // With a tied head: the canonical name of a copy of the first table tensor (the word
  // embedding) a file may hold; it must equal that tensor byte for byte. Empty: none.
  std::string tied_copy;
};

// Layer N of a canonical name "<prefix>N.<...>", or -1.
int hf_layer_of(const std::string& name, const std::string& prefix);

// Imports the model at `path` (HfWeights::open) into `params`, laid out by `into`: the table's
// layout (ParamLayout(config), whole) or any shard of it (ParamLayout(config, shard): a rank's
// chunk), whose every tensor gets its slice of the global tensor the table's entries assemble;
// the vocabulary tables' padding rows, which no entry covers, are the mean of their real rows
// (Note [vocabulary padding rows] in hf_tensors.cpp). First the whole file is
// checked against the table: every mismatch (missing, unexpected, wrong shape or dtype, the
// layer count, a tied copy that differs) in one invalid_argument message that names the file,
// the tensor and the flags that fix the expected shape, the first twelve listed and the rest
// counted. On error `params` is left untouched. Memory: the mapped files plus the largest global
// tensor and the largest HF tensor (OutOfMemory, counted as weights, when they cannot be had).
Status import_hf_tensors(const std::string& path, const std::vector<HfTensor>& table,
                         const HfNaming& naming, const ParamLayout& into, float* params);

// The table's tensors from `params` as safetensors sources (contiguous ones pointed at, the
// others gathered row by row when written).
std::vector<safetensors::TensorSource> hf_tensor_sources(const std::vector<HfTensor>& table,
                                                         const float* params);

}  // namespace lattice
