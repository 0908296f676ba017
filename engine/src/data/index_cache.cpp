// The GPTDataset index cache: file format, key, atomic writes, validated loads
// (index_cache.h describes the layout).
#include "data/index_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <system_error>
#include <vector>

namespace lattice {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little, "the cache files are little-endian");

namespace {

constexpr char kMagic[8] = {'L', 'A', 'T', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 32;

uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string hex16(uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t element_size;
  uint64_t count;
  uint64_t key_hash;
};
static_assert(sizeof(Header) == kHeaderBytes);

uint64_t key_hash_value(const IndexCacheKey& key) {
  return hash64(key.description.data(), key.description.size());
}

// Writes `bytes` to a unique temporary file beside `path`, then renames it over `path`.
bool write_atomically(const std::string& path, const std::string& bytes, std::string* error) {
  // pid, a per-process counter and a random word: unique across threads, processes and the
  // nodes of a shared file system.
  static std::atomic<uint64_t> counter{0};
  static const uint64_t nonce = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1)) + "." + hex16(nonce);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      *error = "cannot write " + tmp;
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    *error = "cannot rename " + tmp + " to " + path;
    return false;
  }
  return true;
}

template <typename T>
std::string encode_array(const std::vector<T>& values, uint64_t key_hash) {
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kIndexCacheFormatVersion;
  header.element_size = sizeof(T);
  header.count = values.size();
  header.key_hash = key_hash;
  const size_t data_bytes = values.size() * sizeof(T);
  const uint64_t checksum = hash64(values.data(), data_bytes);
  std::string bytes(kHeaderBytes + data_bytes + sizeof checksum, '\0');
  std::memcpy(bytes.data(), &header, kHeaderBytes);
  if (data_bytes > 0) std::memcpy(bytes.data() + kHeaderBytes, values.data(), data_bytes);
  std::memcpy(bytes.data() + kHeaderBytes + data_bytes, &checksum, sizeof checksum);
  return bytes;
}

// The array in `path`, or nullopt with *why set when it is missing, truncated, of another
// format or key, or fails its checksum.
template <typename T>
std::optional<std::vector<T>> read_array(const std::string& path, uint64_t key_hash,
                                         std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = path + " is missing";
    return std::nullopt;
  }
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  Header header{};
  if (bytes.size() < kHeaderBytes + sizeof(uint64_t)) {
    *why = path + " is truncated";
    return std::nullopt;
  }
  std::memcpy(&header, bytes.data(), kHeaderBytes);
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0 ||
      header.version != kIndexCacheFormatVersion || header.element_size != sizeof(T) ||
      header.key_hash != key_hash) {
    *why = path + " has another format, version or key";
    return std::nullopt;
  }
  const uint64_t data_bytes = bytes.size() - kHeaderBytes - sizeof(uint64_t);
  if (header.count > data_bytes / sizeof(T) || header.count * sizeof(T) != data_bytes) {
    *why = path + " holds " + std::to_string(data_bytes) + " data bytes, its header says " +
           std::to_string(header.count) + " elements of " + std::to_string(sizeof(T));
    return std::nullopt;
  }
  uint64_t checksum = 0;
  std::memcpy(&checksum, bytes.data() + kHeaderBytes + data_bytes, sizeof checksum);
  if (checksum != hash64(bytes.data() + kHeaderBytes, data_bytes)) {
    *why = path + " fails its checksum";
    return std::nullopt;
  }
  std::vector<T> values(header.count);
  if (data_bytes > 0) std::memcpy(values.data(), bytes.data() + kHeaderBytes, data_bytes);
  return values;
}

// Checks that loaded arrays have the sizes and value ranges this split's indices must have,
// so that no cache file, however it came about, can make gather_sample read out of bounds.
bool plausible(const gpt_index::GptIndices& ix, std::span<const int32_t> lengths, size_t begin,
               size_t end, int64_t num_samples, int seq_length) {
  const int64_t epoch_tokens = gpt_index::tokens_per_epoch(lengths, begin, end);
  const int epochs = gpt_index::num_epochs(epoch_tokens, num_samples, seq_length);
  const int64_t samples = (epochs * epoch_tokens - gpt_index::kAddExtraToken) / seq_length;
  if (ix.document_index.size() != static_cast<size_t>(epochs) * (end - begin) ||
      ix.sample_index.size() != static_cast<size_t>(2 * (samples + 1)) ||
      ix.shuffle_index.size() != static_cast<size_t>(samples)) {
    return false;
  }
  for (const int32_t doc : ix.document_index) {
    if (doc < static_cast<int64_t>(begin) || doc >= static_cast<int64_t>(end)) return false;
  }
  const auto positions = static_cast<int64_t>(ix.document_index.size());
  int64_t previous = 0;
  for (size_t i = 0; i < ix.sample_index.size(); i += 2) {
    const int64_t position = ix.sample_index[i];
    const int64_t offset = ix.sample_index[i + 1];
    if (position < previous || position >= positions || offset < 0 ||
        offset >= std::max<int64_t>(lengths[ix.document_index[position]], 1)) {
      return false;
    }
    previous = position;
  }
  for (const int64_t s : ix.shuffle_index) {
    if (s < 0 || s >= samples) return false;
  }
  return true;
}

}  // namespace

uint64_t hash64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed ^ (0x9e3779b97f4a7c15ULL + bytes);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t lane = 0;
    std::memcpy(&lane, p + i, 8);
    h = rotl(h ^ (lane * 0x87c37b91114253d5ULL), 31) * 0x4cf5ad432745937fULL;
  }
  uint64_t tail = 0;
  for (size_t k = 0; i + k < bytes; ++k) tail |= static_cast<uint64_t>(p[i + k]) << (8 * k);
  h = rotl(h ^ (tail * 0x87c37b91114253d5ULL), 31) * 0x4cf5ad432745937fULL;
  return mix64(h);
}

IndexCacheKey gpt_index_cache_key(const IndexedDataset& data, size_t doc_begin, size_t doc_end,
                                  int64_t num_samples, const std::string& split_name,
                                  int seq_length, uint64_t seed) {
  const auto lengths = data.sequence_lengths().subspan(doc_begin, doc_end - doc_begin);
  std::error_code ec;
  const fs::path prefix =
      data.prefix().empty() ? fs::path() : fs::absolute(data.prefix(), ec).lexically_normal();
  std::ostringstream d;
  d << "Lattice GPTDataset indices, cache format " << kIndexCacheFormatVersion << "\n"
    << "algorithm: Megatron-core GPTDataset (build_sample_idx, drop_last_partial_sequence, "
       "add_extra_token_to_sequence "
    << gpt_index::kAddExtraToken << ")\n"
    << "prefix: " << prefix.string() << "\n"
    << "split: " << split_name << "\n"
    << "sequences: [" << doc_begin << ", " << doc_end << ") of " << data.num_sequences() << "\n"
    << "sequence_lengths_hash: " << hex16(hash64(lengths.data(), lengths.size_bytes())) << "\n"
    << "num_samples: " << num_samples << "\n"
    << "seq_length: " << seq_length << "\n"
    << "seed: " << seed << "\n";
  IndexCacheKey key;
  key.description = d.str();
  key.hash = hex16(key_hash_value(key));
  return key;
}

std::string gpt_index_cache_path(const std::string& cache_dir, const IndexCacheKey& key,
                                 const std::string& split_name, const std::string& affix) {
  return (fs::path(cache_dir) / (key.hash + "-GPTDataset-" + split_name + "-" + affix)).string();
}

std::string gpt_index_cache_dir(const IndexedDataset& data, const GptDatasetOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (data.prefix().empty()) return {};
  return (fs::path(data.prefix()).parent_path() / "cache").string();
}

LoadedGptIndices load_or_build_gpt_indices(const IndexedDataset& data, size_t doc_begin,
                                           size_t doc_end, int64_t num_samples,
                                           const std::string& split_name,
                                           const GptDatasetOptions& options) {
  const auto lengths = data.sequence_lengths();
  const std::string dir = gpt_index_cache_dir(data, options);
  const IndexCacheKey key = gpt_index_cache_key(data, doc_begin, doc_end, num_samples, split_name,
                                                options.seq_length, options.seed);
  const uint64_t key_hash = key_hash_value(key);
  const auto path = [&](const std::string& affix) {
    return gpt_index_cache_path(dir, key, split_name, affix);
  };
  LoadedGptIndices out;

  std::string why;
  if (!dir.empty()) {
    std::ifstream description_file(path("description.txt"), std::ios::binary);
    const std::string description{std::istreambuf_iterator<char>(description_file),
                                  std::istreambuf_iterator<char>()};
    if (!description_file) {
      why = path("description.txt") + " is missing";
    } else if (description != key.description) {
      why = path("description.txt") + " describes other indices";
    } else {
      auto document = read_array<int32_t>(path("document_index.bin"), key_hash, &why);
      auto sample =
          document ? read_array<int64_t>(path("sample_index.bin"), key_hash, &why) : std::nullopt;
      auto shuffle =
          sample ? read_array<int64_t>(path("shuffle_index.bin"), key_hash, &why) : std::nullopt;
      if (shuffle) {
        out.indices.document_index = std::move(*document);
        out.indices.sample_index = std::move(*sample);
        out.indices.shuffle_index = std::move(*shuffle);
        if (plausible(out.indices, lengths, doc_begin, doc_end, num_samples, options.seq_length)) {
          const int64_t epoch_tokens = gpt_index::tokens_per_epoch(lengths, doc_begin, doc_end);
          out.indices.num_epochs =
              gpt_index::num_epochs(epoch_tokens, num_samples, options.seq_length);
          out.source = IndexSource::kLoaded;
          out.note = "loaded the GPTDataset " + split_name + " indices from " +
                     path("{document,sample,shuffle}_index.bin");
          return out;
        }
        why = "the cached " + split_name + " indices in " + dir + " do not fit the dataset";
      }
    }
  }

  out.indices =
      gpt_index::build_gpt_indices(lengths, doc_begin, doc_end, num_samples, options.seq_length,
                                   static_cast<uint32_t>(options.seed));
  if (dir.empty()) {
    out.note = "built the GPTDataset " + split_name +
               " indices in memory (no cache directory: the dataset has no prefix path)";
    return out;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string error;
  const bool saved = !ec &&
                     write_atomically(path("document_index.bin"),
                                      encode_array(out.indices.document_index, key_hash), &error) &&
                     write_atomically(path("sample_index.bin"),
                                      encode_array(out.indices.sample_index, key_hash), &error) &&
                     write_atomically(path("shuffle_index.bin"),
                                      encode_array(out.indices.shuffle_index, key_hash), &error) &&
                     write_atomically(path("description.txt"), key.description, &error);
  if (ec) error = "cannot create " + dir + " (" + ec.message() + ")";
  if (saved) {
    out.source = IndexSource::kBuiltAndSaved;
    out.note = "built the GPTDataset " + split_name + " indices (" + why + ") and saved them to " +
               path("{document,sample,shuffle}_index.bin");
  } else {
    out.source = IndexSource::kBuiltInMemory;
    out.note = "built the GPTDataset " + split_name +
               " indices in memory: the cache is not writable: " + error +
               " (set --data-cache-path to a writable directory)";
  }
  return out;
}

}  // namespace lattice
