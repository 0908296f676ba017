// The safetensors file format (huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON naming each tensor's dtype, shape and byte range, then the data.
// Reading validates the whole header and maps the file; writing emits F32 or BF16 tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "lattice/status.h"

namespace lattice::safetensors {

// Every dtype the format defines; only F32, F16 and BF16 convert to float.
enum class Dtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64
};

const char* dtype_name(Dtype dtype);  // "F32", "BF16", ...
size_t dtype_size(Dtype dtype);       // bytes per element

// "[768, 3072]"; "[]" for a scalar.
std::string shape_to_string(const std::vector<int64_t>& shape);

// IEEE half and bfloat16 bit patterns to float (exact: every value is representable).
float f16_to_float(uint16_t bits);
float bf16_to_float(uint16_t bits);
// float to bfloat16, rounded to nearest even (as torch's .bfloat16()); NaN stays NaN.
uint16_t float_to_bf16(float x);
// Converts `numel` elements starting at `src` (any alignment) into out (numel). Returns false,
// writing nothing, when `dtype` is not F32, F16 or BF16.
bool to_float(Dtype dtype, const std::byte* src, size_t numel, float* out);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  size_t numel = 0;
  size_t begin = 0;  // byte range [begin, end) relative to the start of the data
  size_t end = 0;
};

// A safetensors file opened for reading: the header is parsed and checked once, the data is
// memory-mapped read-only and stays valid as long as the File lives. Move-only; a File may be
// read from several threads at once.
class File {
 public:
  // Opens and validates `path`. io_error when it cannot be opened or mapped; corrupt, naming
  // the file and the tensor, when the header is malformed, a dtype is unknown, a tensor's
  // byte range does not match its shape or lies outside the data, two tensors overlap, a
  // name repeats, or some data bytes belong to no tensor (the format forbids holes).
  static Result<File> open(const std::string& path);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }
  // In data order (ascending byte offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  // The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's raw little-endian bytes (end - begin of them), inside the mapping.
  std::span<const std::byte> bytes(const TensorInfo& tensor) const;
  // Converts the tensor into out (tensor.numel floats); invalid_argument naming the file, the
  // tensor and its dtype when the dtype is not F32, F16 or BF16.
  Status read_float(const TensorInfo& tensor, float* out) const;

 private:
  File() = default;
  std::string path_;
  MappedFile map_;                   // the whole file, read-only
  const std::byte* data_ = nullptr;  // first byte after the header
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor for write(), given as floats and stored as `dtype` (F32, or BF16 rounded to nearest
// even). The values come from `data` when it is set; otherwise `fill` is called once, just before
// the tensor is written, to produce them into a scratch buffer of numel floats (for tensors that
// need a transpose or reorder, without a full model copy).
struct TensorSource {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;           // (numel) row-major, or null
  std::function<void(float* out)> fill;  // writes (numel) floats; used when data is null
  Dtype dtype = Dtype::kF32;             // kF32 or kBF16
};

// What write() produced: the file's length and the CRC-32C of all its bytes, computed while
// writing (no second pass over the file).
struct Written {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Writes `tensors` (each in its dtype) plus `metadata` to `path`: tensors in name order (so the
// same input gives the same bytes), header padded with spaces to a multiple of 8 bytes. The bytes
// stream through two staging buffers written with O_DIRECT where the filesystem allows it (Note
// [checkpoint writes] in safetensors.cpp), bypassing the page cache. The file goes to
// `path.tmp`, is fsynced and renamed over `path`, so readers see the old file or the complete
// new one; `written`, when set, receives its size and checksum. invalid_argument for an empty,
// reserved or repeated name, a negative dimension or a dtype other than F32 and BF16; io_error
// naming the file otherwise.
Status write(const std::string& path, const std::vector<TensorSource>& tensors,
             const std::map<std::string, std::string>& metadata = {}, Written* written = nullptr);

}  // namespace lattice::safetensors
