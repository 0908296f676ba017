// Megatron's indexed dataset (`{prefix}.bin` + `{prefix}.idx`, ARCHITECTURE.md "Data"),
// written byte-for-byte as Megatron's tools/preprocess_data.py does and read memory-mapped
// with every field validated, so a corrupt or mismatched pair is refused, never misread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lattice/status.h"

namespace lattice {

// The .idx dtype codes (numpy types in Megatron's DType enum).
enum class TokenDtype : uint8_t {
  kU8 = 1,
  kI8 = 2,
  kI16 = 3,
  kI32 = 4,
  kI64 = 5,
  kF64 = 6,
  kF32 = 7,
  kU16 = 8
};
size_t token_dtype_size(TokenDtype dtype);
const char* token_dtype_name(TokenDtype dtype);  // "uint16", "int32", ...
// Token ids are int32, so Lattice writes and reads only the integer dtypes that hold them
// exactly (uint8, int8, int16, uint16, int32); int64, float32 and float64 are refused.
bool is_token_dtype(TokenDtype dtype);
// Megatron's choice: uint16 when the vocabulary has fewer than 65500 entries, else int32.
TokenDtype token_dtype_for_vocab(int vocab_size);

// Writes `{prefix}.bin` and `{prefix}.idx`. Each add_sequence appends one sequence (a
// document, or one sentence of it with --split-sentences); end_document closes a document.
// Files appear complete or not at all (written as .tmp, renamed in finish(); a builder
// destroyed unfinished removes its .tmp files). Not thread-safe.
class IndexedDatasetBuilder {
 public:
  // invalid_argument for a dtype that is not is_token_dtype; io_error naming the file.
  static Result<std::unique_ptr<IndexedDatasetBuilder>> create(const std::string& prefix,
                                                               TokenDtype dtype);
  virtual ~IndexedDatasetBuilder() = default;
  // invalid_argument when a token does not fit the dtype (names the value and the dtype).
  virtual Status add_sequence(std::span<const int32_t> tokens) = 0;
  virtual void end_document() = 0;
  // invalid_argument when sequences were added after the last end_document() (Megatron would
  // write an index whose document index does not end at N, which its reader refuses).
  virtual Status finish() = 0;
};

// A read-only, memory-mapped dataset. open() checks the magic, version, dtype code, counts,
// that the sequence lengths and byte offsets agree and lie inside .bin, and that the document
// index is monotone from 0 to N; any failure is `corrupt` naming the file and the field
// (`io_error` when a file is missing or unreadable). The byte offsets must be exactly the
// cumulative lengths, as every Megatron writer produces them. Safe to read from many threads.
class IndexedDataset {
 public:
  static Result<std::unique_ptr<IndexedDataset>> open(const std::string& prefix);
  virtual ~IndexedDataset() = default;

  virtual TokenDtype dtype() const = 0;
  virtual size_t num_sequences() const = 0;
  virtual size_t num_documents() const = 0;  // document_index().size() - 1
  virtual size_t num_tokens() const = 0;
  virtual std::span<const int32_t> sequence_lengths() const = 0;  // (N)
  virtual std::span<const int64_t> document_index() const = 0;    // (D + 1), starts at 0
  // Copies tokens [offset, offset + count) of sequence `seq` into out (count), converting
  // the stored dtype to int32. Preconditions (asserted): seq < N, offset + count <= length.
  virtual void read(size_t seq, size_t offset, size_t count, int32_t* out) const = 0;
  virtual const std::string& prefix() const = 0;
};

// IndexedDataset::open's checks and reader over an .idx and a .bin already in memory, which
// the caller keeps alive and unchanged while the dataset lives (the fuzzer's entry point);
// `prefix` only names the two parts in messages.
Result<std::unique_ptr<IndexedDataset>> open_indexed_dataset_in_memory(
    const std::string& prefix, std::span<const std::byte> idx, std::span<const std::byte> bin);

}  // namespace lattice
