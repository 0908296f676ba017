// What generation needs besides the model: the tokenizer a checkpoint recorded, and a batch
// of requests handed from rank 0 to the other tensor-parallel ranks (infer.h).
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "lattice/infer.h"

namespace lattice {

namespace {

// Flat little-endian bytes: the requests as every rank must see them.
class Writer {
 public:
  template <typename V>
  void put(const V& v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof v);
    std::memcpy(bytes.data() + at, &v, sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : bytes_(b) {}
  template <typename V>
  V get() {
    V v{};
    if (at_ + sizeof v <= bytes_.size()) std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    if (at_ + n > bytes_.size()) return {};
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return s;
  }

 private:
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

}  // namespace

Result<TokenizerOptions> checkpoint_tokenizer(const std::string& load, int ckpt_step) {
  std::string path = load;
  std::error_code ec;
  if (!std::filesystem::exists(load + "/metadata.json", ec)) {
    Result<CheckpointRef> ref = find_checkpoint(load, ckpt_step);
    if (!ref) return ref.status();
    path = ref->path;
  }
  Result<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::open(path);
  if (!reader) return reader.status();
  const nlohmann::json meta = nlohmann::json::parse((*reader)->metadata_json(), nullptr, false);
  TokenizerOptions o = null_tokenizer((*reader)->model().vocab_size - 1);
  if (meta.is_discarded() || !meta.contains("config") || !meta["config"].is_object()) return o;
  const nlohmann::json& c = meta["config"];
  auto text = [&](const char* key, std::string& out) {
    if (c.contains(key) && c[key].is_string()) out = c[key].get<std::string>();
  };
  text("tokenizer-type", o.type);
  text("vocab-file", o.vocab_file);
  text("merge-file", o.merge_file);
  text("tokenizer-model", o.model_file);
  // NullTokenizer's vocabulary is the model's (one id less: EOD), whatever the recorded
  // --vocab-size says (`lattice ckpt reshard` records its own flags, not the run's).
  if (o.type == "NullTokenizer") o.vocab_size = (*reader)->model().vocab_size - 1;
  return o;
}

Status broadcast_requests(Comm& comm, std::vector<GenerationRequest>& requests, int root) {
  if (comm.size() == 1) return Status::ok();
  Writer w;
  if (comm.rank() == root) {
    w.put<uint64_t>(requests.size());
    for (const GenerationRequest& r : requests) {
      w.put<uint64_t>(r.prompt.size());
      for (int32_t id : r.prompt) w.put(id);
      w.put(r.tokens_to_generate);
      w.put(r.sampling.temperature);
      w.put(r.sampling.top_k);
      w.put(r.sampling.top_p);
      w.put(r.sampling.seed);
      w.put(r.top_logprobs);
      w.put<uint8_t>((r.stop_at_eod ? 1 : 0) | (r.prompt_logprobs ? 2 : 0) | (r.logprobs ? 4 : 0));
      w.put<uint64_t>(r.stop.size());
      for (const std::string& s : r.stop) w.put_string(s);
      w.put<uint64_t>(r.images.size());
      for (float x : r.images) w.put(x);
    }
  }
  uint64_t size = w.bytes.size();
  if (Status s = comm.broadcast(&size, 1, DType::kInt64, root); !s) return s;
  w.bytes.resize(size);
  if (Status s = comm.broadcast(w.bytes.data(), size, DType::kUInt8, root); !s) return s;
  if (comm.rank() == root) return Status::ok();
  Reader r(w.bytes);
  requests.assign(r.get<uint64_t>(), GenerationRequest{});
  for (GenerationRequest& q : requests) {
    q.prompt.resize(r.get<uint64_t>());
    for (int32_t& id : q.prompt) id = r.get<int32_t>();
    q.tokens_to_generate = r.get<int>();
    q.sampling.temperature = r.get<float>();
    q.sampling.top_k = r.get<int>();
    q.sampling.top_p = r.get<float>();
    q.sampling.seed = r.get<uint64_t>();
    q.top_logprobs = r.get<int>();
    const uint8_t flags = r.get<uint8_t>();
    q.stop_at_eod = flags & 1;
    q.prompt_logprobs = flags & 2;
    q.logprobs = flags & 4;
    q.stop.resize(r.get<uint64_t>());
    for (std::string& s : q.stop) s = r.get_string();
    q.images.resize(r.get<uint64_t>());
    for (float& x : q.images) x = r.get<float>();
  }
  return Status::ok();
}

}  // namespace lattice
