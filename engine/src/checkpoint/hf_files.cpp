// Hugging Face model files on disk (hf_files.h): a lone safetensors file, a directory, shards.
#include "checkpoint/hf_files.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/atomic_file.h"

namespace lattice {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The shard files an index names, in order of first appearance, and what each must hold.
struct Index {
  std::vector<std::string> files;
  std::map<std::string, std::vector<std::string>> tensors_of;  // file -> tensor names
};

Result<Index> read_index(const std::string& path) {
  Result<nlohmann::json> json = read_hf_config(path);
  if (!json) return json.status();
  const nlohmann::json& j = *json;
  if (!j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    return Status::corrupt(path + " has no weight_map object naming the shard of each tensor");
  Index index;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      return Status::corrupt(path + ": weight_map gives tensor " + tensor + " the file " +
                             file.dump() + ", not a file name beside the index");
    const std::string name = file.get<std::string>();
    if (!index.tensors_of.count(name)) index.files.push_back(name);
    index.tensors_of[name].push_back(tensor);
  }
  return index;
}

std::string shard_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

// "model-NNNNN-of-MMMMM.safetensors", as shard_name writes them.
bool is_shard_name(const std::string& name) {
  const std::string pattern = "model-#####-of-#####.safetensors";
  if (name.size() != pattern.size()) return false;
  for (size_t i = 0; i < name.size(); i++)
    if (pattern[i] == '#' ? (name[i] < '0' || name[i] > '9') : name[i] != pattern[i]) return false;
  return true;
}

}  // namespace

Result<nlohmann::json> read_hf_config(const std::string& path) {
  Result<std::string> text = read_text(path);
  if (!text) return text.status();
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, false);
  if (!json.is_object()) return Status::invalid_argument(path + " is not a JSON object");
  return json;
}

Result<HfWeights> HfWeights::open(const std::string& path) {
  HfWeights w;
  w.path_ = path;
  std::error_code ec;
  std::string index_path, dir;
  std::vector<std::string> file_paths;
  Index index;
  if (fs::is_directory(path, ec)) {
    dir = path;
    if (fs::is_regular_file(dir + "/" + kSingle, ec))
      file_paths.push_back(dir + "/" + kSingle);
    else if (fs::is_regular_file(dir + "/" + kIndex, ec))
      index_path = dir + "/" + kIndex;
    else
      return Status::io_error(path + " holds neither " + kSingle + " nor " + kIndex +
                              " (a Hugging Face model directory has one of them)");
  } else {
    dir = fs::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    const std::string suffix = ".index.json";
    if (path.size() > suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
      index_path = path;
    else
      file_paths.push_back(path);
  }
  if (!index_path.empty()) {
    Result<Index> read = read_index(index_path);
    if (!read) return read.status();
    index = std::move(*read);
    for (const std::string& f : index.files) file_paths.push_back(dir + "/" + f);
  }
  if (fs::is_regular_file(dir + "/config.json", ec)) w.config_path_ = dir + "/config.json";

  std::map<std::string, std::string> holder;  // tensor -> file, to find duplicates
  for (size_t i = 0; i < file_paths.size(); i++) {
    Result<safetensors::File> file = safetensors::File::open(file_paths[i]);
    if (!file) return file.status();  // it names the shard's path
    w.files_.push_back(std::make_unique<safetensors::File>(std::move(*file)));
    const safetensors::File& f = *w.files_.back();
    for (const safetensors::TensorInfo& t : f.tensors()) {
      const auto [it, inserted] = holder.emplace(t.name, f.path());
      if (!inserted)
        return Status::corrupt("tensor " + t.name + " is in both " + it->second + " and " +
                               f.path());
      w.tensors_.push_back({&f, &t});
    }
    if (!index_path.empty())
      for (const std::string& name : index.tensors_of[index.files[i]])
        if (!f.find(name))
          return Status::corrupt(index_path + " puts tensor " + name + " in " + f.path() +
                                 ", which does not hold it");
  }
  return w;
}

const HfEntry* HfWeights::find(const std::string& name) const {
  for (const HfEntry& e : tensors_)
    if (e.name() == name) return &e;
  return nullptr;
}

std::string HfWeights::describe() const {
  if (files_.size() == 1) return files_.front()->path();
  return path_ + " (" + std::to_string(files_.size()) + " shards)";
}

HfTarget hf_target(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  HfTarget t;
  if (fs::is_directory(p, ec) || !p.has_extension()) {
    t.weights_dir = path;
  } else {
    t.single_file = path;
    t.weights_dir = p.has_parent_path() ? p.parent_path().string() : ".";
  }
  return t;
}

Status write_hf_weights(const HfTarget& target, std::vector<safetensors::TensorSource> tensors,
                        const HfWriteOptions& options) {
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  uint64_t total = 0;
  for (safetensors::TensorSource& t : tensors) {
    t.dtype = options.dtype;
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    total += numel * safetensors::dtype_size(t.dtype);
  }
  std::error_code ec;
  fs::create_directories(target.weights_dir, ec);
  if (ec) return Status::io_error("cannot create " + target.weights_dir + ": " + ec.message());
  if (!target.single_file.empty()) return safetensors::write(target.single_file, tensors, metadata);

  // Shards in name order (what safetensors::write orders each file by), filled up to the limit.
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::vector<safetensors::TensorSource>> shards(1);
  uint64_t in_shard = 0;
  for (safetensors::TensorSource& t : tensors) {
    uint64_t bytes = safetensors::dtype_size(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    if (!shards.back().empty() && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(std::move(t));
    in_shard += bytes;
  }
  std::set<std::string> written;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); i++) {
    const std::string name = shards.size() == 1 ? kSingle : shard_name(i, shards.size());
    if (Status s = safetensors::write(target.weights_dir + "/" + name, shards[i], metadata); !s)
      return s;
    written.insert(name);
    for (const safetensors::TensorSource& t : shards[i]) weight_map[t.name] = name;
  }
  if (shards.size() > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                          {"weight_map", weight_map}};
    if (Status s = write_file_atomic(target.weights_dir + "/" + kIndex, index.dump(2) + "\n"); !s)
      return s;
    written.insert(kIndex);
  }
  // An earlier export's files that this one did not rewrite would describe another model.
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(target.weights_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if ((name == kSingle || name == kIndex || is_shard_name(name)) && !written.count(name))
      stale.push_back(entry.path());
  }
  for (const fs::path& p : stale)
    if (!fs::remove(p, ec) && ec)
      return Status::io_error("cannot remove " + p.string() +
                              " of an earlier export: " + ec.message());
  return Status::ok();
}

double hf_decimal(float x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.7g", x);
  return std::strtod(text, nullptr);
}

const char* hf_torch_dtype(safetensors::Dtype dtype) {
  return dtype == safetensors::Dtype::kBF16 ? "bfloat16" : "float32";
}

}  // namespace lattice
