// libFuzzer target for the indexed-dataset reader: any bytes split into an .idx and a .bin must
// be refused with a message or opened and read in full, never crash or read out of bounds.
// Input: u32 little-endian length L of the .idx part (taken modulo the bytes left + 1), the
// .idx (L bytes), the .bin (the rest). Build and run: tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t idx_size = 0;
  std::memcpy(&idx_size, data, 4);
  data += 4;
  size -= 4;
  idx_size = static_cast<uint32_t>(idx_size % (size + 1));
  // Separate heap buffers, so that AddressSanitizer catches a read past the end of either.
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  const std::vector<std::byte> idx(bytes, bytes + idx_size), bin(bytes + idx_size, bytes + size);

  auto opened = lattice::open_indexed_dataset_in_memory("fuzz", idx, bin);
  if (!opened.is_ok()) {
    if (opened.status().message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  const lattice::IndexedDataset& dataset = *opened.value();
  // What open() promises: lengths that add up to the .bin, a document index from 0 to N.
  const auto lengths = dataset.sequence_lengths();
  const auto documents = dataset.document_index();
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  if (lengths.size() != dataset.num_sequences() || documents.empty() || documents.front() != 0 ||
      documents.back() != static_cast<int64_t>(lengths.size()) ||
      dataset.num_documents() != documents.size() - 1 ||
      static_cast<size_t>(total) != dataset.num_tokens() ||
      dataset.num_tokens() * lattice::token_dtype_size(dataset.dtype()) != bin.size())
    __builtin_trap();

  std::vector<int32_t> tokens;
  for (size_t seq = 0; seq < lengths.size(); seq++) {
    tokens.resize(lengths[seq]);
    dataset.read(seq, 0, tokens.size(), tokens.data());
    if (!tokens.empty())
      dataset.read(seq, tokens.size() / 2, tokens.size() - tokens.size() / 2, tokens.data());
  }
  return 0;
}
