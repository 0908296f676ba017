// Matching, import and export over an HF tensor table (hf_tensors.h).
#include "checkpoint/hf_tensors.h"

#include <algorithm>
#include <cassert>
#include <map>

#include "core/host_memory.h"

namespace lattice {

int hf_layer_of(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return -1;
  const size_t begin = prefix.size(), dot = name.find('.', begin);
  if (dot == std::string::npos || dot == begin || dot > begin + 6) return -1;
  int layer = 0;
  for (size_t i = begin; i < dot; i++) {
    if (name[i] < '0' || name[i] > '9') return -1;
    layer = layer * 10 + (name[i] - '0');
  }
  return layer;
}

HfTensor hf_tensor(const ParamLayout& layout, std::string name, std::vector<int64_t> shape,
                   const std::string& our_name, std::string flags,
                   std::function<int64_t(int64_t)> row_of) {
  HfTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.param = layout.find(our_name);
  assert(t.param && "the layout lacks a tensor of the architecture's table");
  t.flags = std::move(flags);
  t.row_of = std::move(row_of);
  return t;
}

namespace {

// Calls copy(hf offset, our offset within the tensor, count) for every run of elements.
template <typename Copy>
void for_each_run(const HfTensor& t, Copy&& copy) {
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  if (!t.transposed && !t.row_of) {
    copy(0, 0, numel);
    return;
  }
  const int64_t rows = t.transposed ? t.shape.back() : t.shape.front();
  const int64_t width = numel / std::max<int64_t>(rows, 1);
  for (int64_t r = 0; r < rows; r++) {
    const int64_t ours = (t.row_of ? t.row_of(r) : r) * width;
    if (!t.transposed)
      copy(r * width, ours, width);
    else  // HF (width, rows): element (c, r) at c * rows + r
      for (int64_t c = 0; c < width; c++) copy(c * rows + r, ours + c, 1);
  }
}

// Note [vocabulary padding rows]: the word embedding and output layer hold the padded
// vocabulary Vp (--make-vocab-size-divisible-by x TP) while a Hugging Face file holds its V real
// rows. Lattice's cross-entropy spans all Vp columns, as Megatron's, so a padding row's logit
// counts in every token's softmax. Zero rows would give logit 0, which can outweigh every real
// logit of a model whose logits sit far below 0, so a reloaded model's loss would have no bound.
// Each padding row is instead the mean of the real rows: its logit is then the mean of the real
// logits, z_bar = h . mean(w_i) = mean(h . w_i), and by Jensen e^z_bar <= mean_i e^z_i, so the
// loss exceeds the HF model's by log(1 + (Vp - V) e^z_bar / sum_i e^z_i) <= log(1 + (Vp - V) / V):
// at most 9.4e-4 for GPT-2 (50257 ids padded to 50304). Megatron's converters copy the last row
// instead, which bounds nothing (GPT-2's last id is its frequent <|endoftext|>).

// Rows [real, rows) of the (rows, cols) table = the mean of rows [0, real), summed in double.
void fill_padding_rows(float* table, int64_t real, int64_t rows, int64_t cols) {
  if (real <= 0 || real >= rows) return;
  std::vector<double> mean(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < real; r++)
    for (int64_t c = 0; c < cols; c++) mean[c] += table[r * cols + c];
  for (int64_t r = real; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) table[r * cols + c] = static_cast<float>(mean[c] / real);
}

bool is_float_dtype(safetensors::Dtype d) {
  using safetensors::Dtype;
  return d == Dtype::kF32 || d == Dtype::kF16 || d == Dtype::kBF16;
}

std::string layers_phrase(int layers, const std::string& prefix) {
  if (layers == 0) return "no layers (" + prefix + "N.*)";
  return std::to_string(layers) + " layers (" + prefix + "0 to " + prefix +
         std::to_string(layers - 1) + ")";
}

// Every way the file fails to fit `table`, one sentence each; `found` gets the file's tensor
// for each table entry (null where missing).
std::vector<std::string> match(const HfWeights& weights, const std::vector<HfTensor>& table,
                               const HfNaming& naming, std::vector<const HfEntry*>* found) {
  std::vector<std::string> problems;
  std::map<std::string, const HfEntry*> by_name;  // canonical names
  const HfEntry* tied_copy = nullptr;
  int file_layers = 0;
  for (const HfEntry& e : weights.tensors()) {
    const std::string name = naming.canonical(e.name());
    if (name.empty()) continue;
    if (!naming.tied_copy.empty() && name == naming.tied_copy) {
      tied_copy = &e;
      continue;
    }
    file_layers = std::max(file_layers, naming.layer_of(name) + 1);
    const auto [it, inserted] = by_name.emplace(name, &e);
    if (!inserted)
      problems.push_back("the file holds both " + it->second->name() + " and " + e.name());
  }
  if (file_layers != naming.num_layers)
    problems.insert(problems.begin(),
                    "the file holds " + layers_phrase(file_layers, naming.layer_prefix) +
                        " but the model has --num-layers " + std::to_string(naming.num_layers));
  for (const HfTensor& t : table) {
    const auto it = by_name.find(t.name);
    const HfEntry* e = it == by_name.end() ? nullptr : it->second;
    found->push_back(e);
    if (!e) {
      problems.push_back(t.name + " is missing (the model (" + t.flags + ") expects " +
                         safetensors::shape_to_string(t.shape) + ")");
      continue;
    }
    by_name.erase(it);
    if (e->info->shape != t.shape)
      problems.push_back(e->name() + " has shape " + safetensors::shape_to_string(e->info->shape) +
                         " in the file but the model (" + t.flags + ") expects " +
                         safetensors::shape_to_string(t.shape) + t.shape_note);
    else if (!is_float_dtype(e->info->dtype))
      problems.push_back(e->name() + " has dtype " + safetensors::dtype_name(e->info->dtype) +
                         "; only F32, F16 and BF16 can be imported");
  }
  for (const auto& [name, e] : by_name)
    problems.push_back("the file holds " + e->name() + " " +
                       safetensors::shape_to_string(e->info->shape) + ", which " +
                       naming.architecture + " has no place for");

  // The output layer is tied to the embedding; a copy that differs would be lost silently.
  // Compared byte for byte, so a copy stored in another dtype counts as different.
  const HfEntry* embedding = found->empty() ? nullptr : found->front();
  if (tied_copy && embedding) {
    const auto a = tied_copy->file->bytes(*tied_copy->info);
    const auto b = embedding->file->bytes(*embedding->info);
    if (tied_copy->info->dtype != embedding->info->dtype ||
        tied_copy->info->shape != embedding->info->shape ||
        !std::equal(a.begin(), a.end(), b.begin(), b.end()))
      problems.push_back(tied_copy->name() + " differs from " + embedding->name() +
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

Status import_hf_tensors(const std::string& path, const std::vector<HfTensor>& table,
                         const HfNaming& naming, const ParamLayout& into, float* params) {
  Result<HfWeights> opened = HfWeights::open(path);
  if (!opened) return opened.status();
  const HfWeights& weights = *opened;
  std::vector<const HfEntry*> found;
  const std::vector<std::string> problems = match(weights, table, naming, &found);
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
    return Status::invalid_argument("cannot import " + weights.describe() + " as " +
                                    naming.architecture + ": " + std::to_string(problems.size()) +
                                    (problems.size() == 1 ? " problem: " : " problems:\n  ") +
                                    join(listed, "\n  "));
  }

  // One of our global tensors at a time, from the HF tensors that live in it, then its slice
  // into `into`: the memory beyond the mapped files is the largest tensor (the embedding), not
  // the model. The vocabulary tables' padding rows, which no HF tensor covers, get the mean of
  // the real rows (Note [vocabulary padding rows]).
  std::vector<float> scratch, global;
  for (const ParamTensor& target : into.tensors()) {
    bool assembled = false;
    int64_t vocabulary_rows = 0;  // the HF rows of a vocabulary table, else 0
    for (size_t i = 0; i < table.size(); i++) {
      const HfTensor& t = table[i];
      if (t.param->name != target.name) continue;
      if (!assembled) host_assign(global, t.param->numel, MemoryCategory::kWeights, 0.0f);
      assembled = true;
      if (is_vocabulary_table(target.name) && !t.transposed && !t.row_of && t.shape.size() == 2)
        vocabulary_rows = t.shape[0];
      const safetensors::TensorInfo& info = *found[i]->info;
      host_grow(scratch, info.numel, MemoryCategory::kWeights);
      if (Status s = found[i]->file->read_float(info, scratch.data()); !s)
        return s;  // unreachable: dtypes were checked above
      for_each_run(t, [&](int64_t hf, int64_t our, int64_t n) {
        std::copy_n(scratch.data() + hf, n, global.data() + our);
      });
    }
    assert(assembled && "`into` holds a tensor the table does not fill");
    if (vocabulary_rows > 0)
      fill_padding_rows(global.data(), vocabulary_rows, target.global_shape[0],
                        target.global_shape[1]);
    slice_from_global(target, global.data(), params + target.offset);
  }
  return Status::ok();
}

std::vector<safetensors::TensorSource> hf_tensor_sources(const std::vector<HfTensor>& table,
                                                         const float* params) {
  std::vector<safetensors::TensorSource> sources;
  for (const HfTensor& t : table) {
    const float* ours = params + t.param->offset;
    safetensors::TensorSource source{t.name, t.shape, nullptr, nullptr};
    if (!t.transposed && !t.row_of)
      source.data = ours;  // the first rows are contiguous (a vocabulary without its padding)
    else
      source.fill = [&t, ours](float* hf) {
        for_each_run(
            t, [&](int64_t h, int64_t our, int64_t n) { std::copy_n(ours + our, n, hf + h); });
      };
    sources.push_back(std::move(source));
  }
  return sources;
}

}  // namespace lattice
