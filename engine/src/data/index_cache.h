// The on-disk cache of a GPTDataset split's index arrays, so that a restart (or another rank)
// loads in milliseconds what took a shuffle of every epoch to build. Files:
//   {cache_dir}/{hash}-GPTDataset-{split}-{document,sample,shuffle}_index.bin
//   {cache_dir}/{hash}-GPTDataset-{split}-description.txt   (written last: the commit mark)
// where hash is 16 hex digits of hash64(description), and the description names everything
// the arrays depend on: the format version, the prefix, the split's sequence range and a
// checksum of its sequence lengths, num_samples, seq_length and the seed. (Token contents and
// file times do not enter: the arrays do not depend on them, and a copied dataset keeps its
// cache.) Each .bin is a 32-byte header (magic "LATIDX\0\0", u32 format version, u32 element
// size, u64 element count, u64 key hash), the little-endian elements, and a u64 hash64 of
// the elements. Files are written to a unique temporary name and renamed into place, so
// ranks building at the same time never see each other's half-written files.
#pragma once

#include <cstdint>
#include <string>

#include "data/gpt_dataset.h"
#include "data/gpt_indices.h"

namespace lattice {

// Bumped whenever the file layout or the index arithmetic changes; old files then miss.
constexpr uint32_t kIndexCacheFormatVersion = 1;

// A fast 64-bit non-cryptographic hash (8-byte lanes, multiply-rotate, splitmix64 finish);
// detects stale keys and corrupt files, not adversaries.
uint64_t hash64(const void* data, size_t bytes, uint64_t seed = 0);

struct IndexCacheKey {
  std::string description;  // human-readable, also written as description.txt
  std::string hash;         // 16 lowercase hex digits of hash64(description)
};
IndexCacheKey gpt_index_cache_key(const IndexedDataset& data, size_t doc_begin, size_t doc_end,
                                  int64_t num_samples, const std::string& split_name,
                                  int seq_length, uint64_t seed);

// "{cache_dir}/{hash}-GPTDataset-{split}-{affix}", affix e.g. "sample_index.bin".
std::string gpt_index_cache_path(const std::string& cache_dir, const IndexCacheKey& key,
                                 const std::string& split_name, const std::string& affix);

// options.cache_dir, or `{dirname(prefix)}/cache` when it is empty (empty when the prefix is).
std::string gpt_index_cache_dir(const IndexedDataset& data, const GptDatasetOptions& options);

enum class IndexSource {
  kLoaded,         // every file present and valid
  kBuiltAndSaved,  // missing, stale or corrupt: built and written
  kBuiltInMemory,  // built; the cache directory could not be written (see note)
};

struct LoadedGptIndices {
  gpt_index::GptIndices indices;
  IndexSource source = IndexSource::kBuiltInMemory;
  std::string note;  // one line on what happened, naming the files or the directory
};

// Loads the split's indices from the cache, or builds them (gpt_index::build_gpt_indices)
// and tries to save them. Preconditions, checked by build_gpt_dataset: a valid document
// range with more than one token, seq_length > 1, seed < 2**32. A cache that cannot be read
// or written is never an error: the indices are then built in memory and `note` says why.
LoadedGptIndices load_or_build_gpt_indices(const IndexedDataset& data, size_t doc_begin,
                                           size_t doc_end, int64_t num_samples,
                                           const std::string& split_name,
                                           const GptDatasetOptions& options);

}  // namespace lattice
