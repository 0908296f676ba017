// Safetensors files for the Hugging Face interchange tests (test_hf_gpt2, test_hf_llama): an
// arena of distinct values, a file's tensors read back to be written again changed, and a
// half-precision copy of a file.
// Header-only.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "model/param_layout.h"

namespace lattice::testing {

// Every arena element of `layout` holds its own index: distinct and exact in float.
inline std::vector<float> indexed_params(const ParamLayout& layout) {
  std::vector<float> params(layout.total_numel());
  for (size_t i = 0; i < params.size(); i++) params[i] = static_cast<float>(i);
  return params;
}

// `arena` as an import should leave it: the vocabulary tables' padding rows (rows >= the real
// vocabulary `V` of the word embedding and output layer) replaced by the mean of their real rows,
// summed in double (Note [vocabulary padding rows] in checkpoint/hf_tensors.cpp).
inline std::vector<float> with_mean_padding_rows(const ParamLayout& layout, std::vector<float> arena,
                                                 int64_t V) {
  for (const char* name : {"embedding.word_embeddings.weight", "output_layer.weight"}) {
    const ParamTensor* t = layout.find(name);
    if (!t || t->shape.size() != 2 || t->shape[0] <= V) continue;
    const int64_t C = t->shape[1];
    float* table = arena.data() + t->offset;
    for (int64_t c = 0; c < C; c++) {
      double sum = 0;
      for (int64_t r = 0; r < V; r++) sum += table[r * C + c];
      for (int64_t r = V; r < t->shape[0]; r++) table[r * C + c] = static_cast<float>(sum / V);
    }
  }
  return arena;
}

// Every tensor of `file` as float, ready to be written again under other names or shapes.
struct Tensors {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> values;
  explicit Tensors(const safetensors::File& file) {
    for (const safetensors::TensorInfo& t : file.tensors()) {
      names.push_back(t.name);
      shapes.push_back(t.shape);
      values.emplace_back(t.numel);
      (void)file.read_float(t, values.back().data());
    }
  }
  const std::vector<float>& values_of(const std::string& name) const {
    return values[std::find(names.begin(), names.end(), name) - names.begin()];
  }
  std::vector<safetensors::TensorSource> sources(const std::string& prefix = "") const {
    std::vector<safetensors::TensorSource> out;
    for (size_t i = 0; i < names.size(); i++)
      out.push_back({prefix + names[i], shapes[i], values[i].data(), nullptr});
    return out;
  }
};

// IEEE half bits of a small non-negative integer n < 2048 (exact).
inline uint16_t f16_bits_of_integer(int n) {
  if (n == 0) return 0;
  const int e = std::bit_width(static_cast<unsigned>(n)) - 1;
  return static_cast<uint16_t>(((e + 15) << 10) | ((n << (10 - e)) & 0x3FF));
}

// Writes `f32`'s tensors to `path` with the dtypes alternating F16, BF16, F16, ... (the writer
// has no F16). Every value must be an integer in [0, 256), exact in both.
inline void write_half_precision_copy(const safetensors::File& f32, const std::string& path) {
  std::string header = "{", data;
  bool f16 = true;
  for (const safetensors::TensorInfo& t : f32.tensors()) {
    std::vector<float> values(t.numel);
    (void)f32.read_float(t, values.data());
    const size_t begin = data.size();
    for (float v : values) {
      const uint16_t bits = f16 ? f16_bits_of_integer(static_cast<int>(v))
                                : static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
      data.append(reinterpret_cast<const char*>(&bits), 2);
    }
    header += std::string(header.size() > 1 ? "," : "") + "\"" + t.name + "\":{\"dtype\":\"" +
              (f16 ? "F16" : "BF16") + "\",\"shape\":" + safetensors::shape_to_string(t.shape) +
              ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) +
              "]}";
    f16 = !f16;
  }
  header += "}";
  const uint64_t n = header.size();
  std::ofstream(path, std::ios::binary)
      << std::string(reinterpret_cast<const char*>(&n), 8) << header << data;
}

}  // namespace lattice::testing
