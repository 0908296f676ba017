// The HF GPT-2 <-> Megatron-core name and layout mapping. One table (hf_tensors) lists every
// HF tensor with its shape, our tensor and how the elements correspond; import and export
// both walk it, so the two directions cannot disagree.
#include "checkpoint/hf_gpt2.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <vector>

#include "checkpoint/hf_gpt2_config.h"
#include "checkpoint/safetensors.h"
#include "core/host_memory.h"

namespace lattice {

int hf_gpt2_layer_of(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return -1;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2 || dot > 8) return -1;
  int layer = 0;
  for (size_t i = 2; i < dot; i++) {
    if (name[i] < '0' || name[i] > '9') return -1;
    layer = layer * 10 + (name[i] - '0');
  }
  return layer;
}

namespace {

// How an HF tensor's elements sit relative to ours.
enum class Mapping {
  kCopy,       // same row-major order (wte: HF holds the first --vocab-size of our padded rows)
  kTranspose,  // HF Conv1D weight (in, out) vs our linear weight (out, in)
  kQkvWeight,  // Conv1D (C, 3C), columns [Q all heads | K all heads | V all heads], vs our
               // (3C, C) with per-head rows: head h's q, k, v rows at [h*3*HS, (h+1)*3*HS)
  kQkvBias,    // (3C) in [Q | K | V] order vs per-head order
};

struct HfTensor {
  std::string name;            // without the "transformer." prefix
  std::vector<int64_t> shape;  // as HF stores it
  const ParamTensor* param;    // where it lives in our arena
  Mapping mapping;
  std::string flags;  // the flags that fix `shape`, for messages
};

// Every tensor of HF's GPT2Model in the order of our arena.
std::vector<HfTensor> hf_tensors(const ModelConfig& c, const ParamLayout& layout) {
  const int64_t C = c.hidden_size, F = c.ffn(), V = c.vocab_size, P = c.max_positions();
  const std::string hidden = "--hidden-size " + std::to_string(C);
  const std::string ffn = hidden + " --ffn-hidden-size " + std::to_string(F);
  const std::string positions =
      c.max_position_embeddings > 0
          ? "--max-position-embeddings " + std::to_string(c.max_position_embeddings)
          : "--seq-length " + std::to_string(c.seq_length) + "; no --max-position-embeddings";
  std::vector<HfTensor> out;
  auto add = [&](std::string hf_name, std::vector<int64_t> shape, const std::string& our_name,
                 Mapping mapping, std::string flags) {
    const ParamTensor* param = layout.find(our_name);
    assert(param && "layout must be ParamLayout(config)");
    out.push_back({std::move(hf_name), std::move(shape), param, mapping, std::move(flags)});
  };
  add("wte.weight", {V, C}, "embedding.word_embeddings.weight", Mapping::kCopy,
      "--vocab-size " + std::to_string(V) + " " + hidden);
  add("wpe.weight", {P, C}, "embedding.position_embeddings.weight", Mapping::kCopy,
      hidden + " " + positions);
  for (int l = 0; l < c.num_layers; l++) {
    const std::string h = "h." + std::to_string(l) + ".";
    const std::string d = "decoder.layers." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, d + "input_layernorm.weight", Mapping::kCopy, hidden);
    add(h + "ln_1.bias", {C}, d + "input_layernorm.bias", Mapping::kCopy, hidden);
    add(h + "attn.c_attn.weight", {C, 3 * C}, d + "self_attention.linear_qkv.weight",
        Mapping::kQkvWeight, hidden);
    add(h + "attn.c_attn.bias", {3 * C}, d + "self_attention.linear_qkv.bias", Mapping::kQkvBias,
        hidden);
    add(h + "attn.c_proj.weight", {C, C}, d + "self_attention.linear_proj.weight",
        Mapping::kTranspose, hidden);
    add(h + "attn.c_proj.bias", {C}, d + "self_attention.linear_proj.bias", Mapping::kCopy, hidden);
    add(h + "ln_2.weight", {C}, d + "pre_mlp_layernorm.weight", Mapping::kCopy, hidden);
    add(h + "ln_2.bias", {C}, d + "pre_mlp_layernorm.bias", Mapping::kCopy, hidden);
    add(h + "mlp.c_fc.weight", {C, F}, d + "mlp.linear_fc1.weight", Mapping::kTranspose, ffn);
    add(h + "mlp.c_fc.bias", {F}, d + "mlp.linear_fc1.bias", Mapping::kCopy, ffn);
    add(h + "mlp.c_proj.weight", {F, C}, d + "mlp.linear_fc2.weight", Mapping::kTranspose, ffn);
    add(h + "mlp.c_proj.bias", {C}, d + "mlp.linear_fc2.bias", Mapping::kCopy, hidden);
  }
  add("ln_f.weight", {C}, "decoder.final_layernorm.weight", Mapping::kCopy, hidden);
  add("ln_f.bias", {C}, "decoder.final_layernorm.bias", Mapping::kCopy, hidden);
  return out;
}

// Calls visit(hf_index, our_index) for every element of a non-copy tensor.
template <typename Visit>
void for_each_element(const HfTensor& t, int64_t head_size, Visit&& visit) {
  // Our row for HF's q/k/v column j = s*C + h*HS + d (s = 0, 1, 2 for q, k, v).
  auto qkv_row = [head_size](int64_t j, int64_t C) {
    const int64_t s = j / C, h = (j % C) / head_size, d = j % head_size;
    return h * 3 * head_size + s * head_size + d;
  };
  switch (t.mapping) {
    case Mapping::kTranspose: {
      const int64_t in = t.shape[0], out = t.shape[1];  // HF (in, out), ours (out, in)
      for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) visit(i * out + o, o * in + i);
      break;
    }
    case Mapping::kQkvWeight: {
      const int64_t C = t.shape[0];  // HF (C, 3C), ours (3C, C)
      for (int64_t j = 0; j < 3 * C; j++) {
        const int64_t row = qkv_row(j, C);
        for (int64_t c = 0; c < C; c++) visit(c * 3 * C + j, row * C + c);
      }
      break;
    }
    case Mapping::kQkvBias: {
      const int64_t C = t.shape[0] / 3;
      for (int64_t j = 0; j < 3 * C; j++) visit(j, qkv_row(j, C));
      break;
    }
    case Mapping::kCopy:
      assert(false && "copies need no element walk");
      break;
  }
}

// h.N.attn.bias and h.N.attn.masked_bias are HF's causal-mask buffers, not parameters.
bool is_mask_buffer(const std::string& name) {
  if (hf_gpt2_layer_of(name) < 0) return false;
  const std::string rest = name.substr(name.find('.', 2));
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

bool is_float_dtype(safetensors::Dtype d) {
  using safetensors::Dtype;
  return d == Dtype::kF32 || d == Dtype::kF16 || d == Dtype::kBF16;
}

// Every way the file fails to fit `expected`, one sentence each. Appends to `found` the file's
// tensor for each expected one, in the same order, null where the file has none.
std::vector<std::string> match_tensors(const safetensors::File& file,
                                       const std::vector<HfTensor>& expected,
                                       const ModelConfig& config,
                                       std::vector<const safetensors::TensorInfo*>* found) {
  std::vector<std::string> problems;
  std::map<std::string, const safetensors::TensorInfo*> by_name;  // prefix stripped
  const safetensors::TensorInfo* lm_head = nullptr;
  int file_layers = 0;
  for (const safetensors::TensorInfo& t : file.tensors()) {
    const std::string prefix = "transformer.";
    const std::string name = t.name.rfind(prefix, 0) == 0 ? t.name.substr(prefix.size()) : t.name;
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    file_layers = std::max(file_layers, hf_gpt2_layer_of(name) + 1);
    const auto [it, inserted] = by_name.emplace(name, &t);
    if (!inserted) problems.push_back("the file holds both " + it->second->name + " and " + t.name);
  }
  if (file_layers != config.num_layers)
    problems.insert(problems.begin(),
                    "the file holds " +
                        (file_layers == 0 ? std::string("no layers (h.N.*)")
                                          : std::to_string(file_layers) + " layers (h.0 to h." +
                                                std::to_string(file_layers - 1) + ")") +
                        " but the model has --num-layers " + std::to_string(config.num_layers));

  for (const HfTensor& e : expected) {
    const auto it = by_name.find(e.name);
    const safetensors::TensorInfo* t = it == by_name.end() ? nullptr : it->second;
    found->push_back(t);
    if (!t) {
      problems.push_back(e.name + " is missing (the model (" + e.flags + ") expects " +
                         safetensors::shape_to_string(e.shape) + ")");
      continue;
    }
    by_name.erase(it);
    if (t->shape != e.shape)
      problems.push_back(
          t->name + " has shape " + safetensors::shape_to_string(t->shape) +
          " in the file but the model (" + e.flags + ") expects " +
          safetensors::shape_to_string(e.shape) +
          (e.name == "wpe.weight" ? " (the position table must match exactly)" : ""));
    else if (!is_float_dtype(t->dtype))
      problems.push_back(t->name + " has dtype " + safetensors::dtype_name(t->dtype) +
                         "; only F32, F16 and BF16 can be imported");
  }
  for (const auto& [name, t] : by_name)
    problems.push_back("the file holds " + t->name + " " + safetensors::shape_to_string(t->shape) +
                       ", which GPT-2 has no place for");

  // The output layer is tied to wte; a file whose lm_head differs would lose it silently.
  // Compared byte for byte, so an lm_head stored in another dtype than wte counts as different.
  const safetensors::TensorInfo* wte = found->front();
  if (lm_head && wte) {
    const auto a = file.bytes(*lm_head), b = file.bytes(*wte);
    if (lm_head->dtype != wte->dtype || lm_head->shape != wte->shape ||
        !std::equal(a.begin(), a.end(), b.begin(), b.end()))
      problems.push_back(lm_head->name + " differs from " + wte->name +
                         "; Lattice ties the output layer to the word embeddings and cannot "
                         "load a separate one");
  }
  return problems;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string s;
  for (size_t i = 0; i < parts.size(); i++) s += (i ? separator : "") + parts[i];
  return s;
}

}  // namespace

Status import_hf_gpt2(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      float* params) {
  Result<safetensors::File> opened = safetensors::File::open(path);
  if (!opened) return opened.status();
  const safetensors::File& file = opened.value();
  const std::vector<HfTensor> expected = hf_tensors(config, layout);
  std::vector<const safetensors::TensorInfo*> found;
  const std::vector<std::string> problems = match_tensors(file, expected, config, &found);
  if (!problems.empty()) {
    // One problem per line; a wholly different model would list hundreds, so the first
    // kMaxListed say what is wrong and a count says how much more there is.
    // Wrong dtypes and shapes say more than the missing tensors that follow from them.
    constexpr size_t kMaxListed = 12;
    std::vector<std::string> ordered = problems;
    std::stable_partition(ordered.begin(), ordered.end(), [](const std::string& p) {
      return p.find(" is missing (") == std::string::npos;
    });
    std::vector<std::string> listed(ordered.begin(),
                                    ordered.begin() + std::min(ordered.size(), kMaxListed));
    if (problems.size() > kMaxListed)
      listed.push_back("... and " + std::to_string(problems.size() - kMaxListed) + " more");
    return Status::invalid_argument(
        "cannot import " + path + " as GPT-2: " + std::to_string(problems.size()) +
        (problems.size() == 1 ? " problem: " : " problems:\n  ") + join(listed, "\n  "));
  }

  std::vector<float> scratch;  // one HF tensor at a time, for the reordered ones
  for (size_t i = 0; i < expected.size(); i++) {
    const HfTensor& e = expected[i];
    float* ours = params + e.param->offset;
    Status s;
    if (e.mapping == Mapping::kCopy) {
      s = file.read_float(*found[i], ours);
    } else {
      scratch.resize(e.param->numel);  // reordered tensors have the same size on both sides
      s = file.read_float(*found[i], scratch.data());
      for_each_element(e, config.head_size(),
                       [&](int64_t hf, int64_t our) { ours[our] = scratch[hf]; });
    }
    if (!s) return s;  // unreachable: dtypes were checked above
  }
  // wte.weight holds --vocab-size rows; the padding rows up to the padded vocabulary are zero.
  const ParamTensor& wte = *expected.front().param;
  std::fill(params + wte.offset + expected.front().shape[0] * config.hidden_size,
            params + wte.offset + wte.numel, 0.0f);
  return Status::ok();
}

Status export_hf_gpt2(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      const float* params) {
  const std::vector<HfTensor> expected = hf_tensors(config, layout);
  const int64_t head_size = config.head_size();
  std::vector<safetensors::TensorSource> sources;
  for (const HfTensor& e : expected) {
    const float* ours = params + e.param->offset;
    safetensors::TensorSource source{e.name, e.shape, nullptr, nullptr};
    if (e.mapping == Mapping::kCopy)
      source.data = ours;  // wte: the first --vocab-size rows are contiguous
    else
      source.fill = [&e, ours, head_size](float* hf) {
        for_each_element(e, head_size, [&](int64_t h, int64_t our) { hf[h] = ours[our]; });
      };
    sources.push_back(std::move(source));
  }
  if (Status s = safetensors::write(path, sources, {{"format", "pt"}}); !s) return s;
  return write_hf_gpt2_config(path, config, expected.front().shape[0]);
}

Status import_hf_gpt2_chunk(const std::string& path, const ModelConfig& config,
                            const ParamLayout& chunk, float* params) {
  const ParamLayout whole(config);
  std::vector<float> full;
  host_assign(full, whole.total_numel(), MemoryCategory::kWeights);
  if (Status s = import_hf_gpt2(path, config, whole, full.data()); !s) return s;
  for (const ParamTensor& t : chunk.tensors())
    slice_from_global(t, full.data() + whole.find(t.name)->offset, params + t.offset);
  return Status::ok();
}

}  // namespace lattice
