// Megatron's indexed dataset: a buffered writer that converts tokens to the file's dtype with a
// range check, and a memory-mapped reader that checks every field of the .idx against the .bin
// before anything is read. Layout: ARCHITECTURE.md "Data"; little-endian hosts only.
#include "data/indexed_dataset.h"

#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

namespace lattice {

static_assert(std::endian::native == std::endian::little, "the indexed dataset is little-endian");

namespace {

// .idx header: magic (9) · u64 version · u8 dtype code · u64 N · u64 D + 1.
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderSize = sizeof(kMagic) + 8 + 1 + 8 + 8;  // 34
constexpr size_t kWriteBuffer = size_t{1} << 20;

std::string str(auto value) {
  return std::to_string(value);
}

// ---- writing ---------------------------------------------------------------------------------

// A file written through a buffer; every error names the file.
class BufferedFile {
 public:
  BufferedFile() = default;
  BufferedFile(const BufferedFile&) = delete;
  BufferedFile& operator=(const BufferedFile&) = delete;
  ~BufferedFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  Status open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::io_error("cannot create " + path + ": " + std::strerror(errno));
    buffer_.resize(kWriteBuffer);
    return Status::ok();
  }

  Status append(const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
      if (used_ == buffer_.size()) {
        Status s = flush();
        if (!s) return s;
      }
      const size_t n = std::min(size, buffer_.size() - used_);
      std::memcpy(buffer_.data() + used_, bytes, n);
      used_ += n;
      bytes += n;
      size -= n;
    }
    return Status::ok();
  }

  // Flushes, fsyncs and closes: the file is complete on disk when this returns ok.
  Status close() {
    Status s = flush();
    if (s && ::fsync(fd_) != 0)
      s = Status::io_error("cannot flush " + path_ + ": " + std::strerror(errno));
    if (::close(fd_) != 0 && s)
      s = Status::io_error("cannot close " + path_ + ": " + std::strerror(errno));
    fd_ = -1;
    return s;
  }

 private:
  Status flush() {
    size_t done = 0;
    while (done < used_) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, used_ - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::io_error("cannot write " + path_ + ": " + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    used_ = 0;
    return Status::ok();
  }

  int fd_ = -1;
  std::string path_;
  std::vector<char> buffer_;
  size_t used_ = 0;
};

template <typename T>
bool token_fits(int32_t token) {
  return token >= std::numeric_limits<T>::min() && token <= std::numeric_limits<T>::max();
}

template <typename T>
std::string dtype_range() {
  return str(+std::numeric_limits<T>::min()) + ".." + str(+std::numeric_limits<T>::max());
}

class Builder final : public IndexedDatasetBuilder {
 public:
  Builder(const std::string& prefix, TokenDtype dtype)
      : bin_path_(prefix + ".bin"), idx_path_(prefix + ".idx"), dtype_(dtype) {}

  ~Builder() override {
    if (finished_) return;
    bin_.reset();  // closes the descriptor before the name goes
    ::unlink((bin_path_ + ".tmp").c_str());
    ::unlink((idx_path_ + ".tmp").c_str());
  }

  Status open() {
    bin_ = std::make_unique<BufferedFile>();
    return bin_->open(bin_path_ + ".tmp");
  }

  Status add_sequence(std::span<const int32_t> tokens) override {
    assert(!finished_ && "add_sequence after finish");
    if (!broken_) return broken_;
    if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      return Status::invalid_argument(
          bin_path_ + ": sequence " + str(lengths_.size()) + " has " + str(tokens.size()) +
          " tokens, more than the index's int32 sequence length can hold");
    // Check the whole sequence before writing any of it, so a refused sequence leaves no trace.
    Status s;
    switch (dtype_) {
      case TokenDtype::kU8:
        s = append<uint8_t>(tokens);
        break;
      case TokenDtype::kI8:
        s = append<int8_t>(tokens);
        break;
      case TokenDtype::kI16:
        s = append<int16_t>(tokens);
        break;
      case TokenDtype::kU16:
        s = append<uint16_t>(tokens);
        break;
      case TokenDtype::kI32:
        s = write(tokens.data(), tokens.size_bytes());
        break;
      default:
        assert(false && "create() admits token dtypes only");
    }
    if (s) lengths_.push_back(static_cast<int32_t>(tokens.size()));
    return s;
  }

  void end_document() override {
    assert(!finished_ && "end_document after finish");
    document_index_.push_back(static_cast<int64_t>(lengths_.size()));
  }

  Status finish() override {
    assert(!finished_ && "finish called twice");
    if (!broken_) return broken_;
    const size_t n = lengths_.size();
    if (document_index_.back() != static_cast<int64_t>(n))
      return Status::invalid_argument(
          idx_path_ + ": sequences " + str(document_index_.back()) + ".." + str(n - 1) +
          " were added after the last end_document(); every sequence must belong to a document");
    Status s = bin_->close();
    if (s) s = write_index();
    if (s && std::rename((bin_path_ + ".tmp").c_str(), bin_path_.c_str()) != 0)
      s = Status::io_error("cannot rename " + bin_path_ + ".tmp: " + std::strerror(errno));
    if (s && std::rename((idx_path_ + ".tmp").c_str(), idx_path_.c_str()) != 0)
      s = Status::io_error("cannot rename " + idx_path_ + ".tmp: " + std::strerror(errno));
    if (!s) return broken_ = s;
    finished_ = true;
    return s;
  }

 private:
  template <typename T>
  Status append(std::span<const int32_t> tokens) {
    for (size_t i = 0; i < tokens.size(); i++) {
      if (!token_fits<T>(tokens[i]))
        return Status::invalid_argument(bin_path_ + ": token " + str(tokens[i]) + " at position " +
                                        str(i) + " of sequence " + str(lengths_.size()) +
                                        " does not fit the dataset's dtype " +
                                        token_dtype_name(dtype_) + " (" + dtype_range<T>() + ")");
    }
    T chunk[4096];
    for (size_t begin = 0; begin < tokens.size(); begin += std::size(chunk)) {
      const size_t count = std::min(std::size(chunk), tokens.size() - begin);
      for (size_t i = 0; i < count; i++) chunk[i] = static_cast<T>(tokens[begin + i]);
      Status s = write(chunk, count * sizeof(T));
      if (!s) return s;
    }
    return Status::ok();
  }

  Status write(const void* data, size_t size) {
    Status s = bin_->append(data, size);
    if (!s) broken_ = s;
    return s;
  }

  // As Megatron's _IndexWriter: header, lengths (int32), byte offsets (int64, the cumulative
  // lengths times the item size, starting at 0), document index (int64, starting at 0).
  Status write_index() {
    BufferedFile idx;
    Status s = idx.open(idx_path_ + ".tmp");
    const uint8_t code = static_cast<uint8_t>(dtype_);
    const uint64_t n = lengths_.size(), docs = document_index_.size();
    if (s) s = idx.append(kMagic, sizeof(kMagic));
    if (s) s = idx.append(&kVersion, 8);
    if (s) s = idx.append(&code, 1);
    if (s) s = idx.append(&n, 8);
    if (s) s = idx.append(&docs, 8);
    if (s) s = idx.append(lengths_.data(), lengths_.size() * sizeof(int32_t));
    const int64_t itemsize = static_cast<int64_t>(token_dtype_size(dtype_));
    int64_t pointer = 0;
    for (size_t i = 0; i < lengths_.size() && s; i++) {
      s = idx.append(&pointer, 8);
      pointer += lengths_[i] * itemsize;
    }
    if (s) s = idx.append(document_index_.data(), document_index_.size() * sizeof(int64_t));
    if (s) s = idx.close();
    return s;
  }

  std::string bin_path_, idx_path_;
  TokenDtype dtype_;
  std::unique_ptr<BufferedFile> bin_;
  std::vector<int32_t> lengths_;            // (N)
  std::vector<int64_t> document_index_{0};  // (D + 1)
  Status broken_;                           // the first I/O error; every later call returns it
  bool finished_ = false;
};

// ---- reading ---------------------------------------------------------------------------------

template <typename T>
T load(const std::byte* at) {  // unaligned little-endian load
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
void convert(const std::byte* src, size_t count, int32_t* out) {
  for (size_t i = 0; i < count; i++) out[i] = static_cast<int32_t>(load<T>(src + i * sizeof(T)));
}

std::string hex(std::span<const std::byte> bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (std::byte b : bytes) {
    text += kDigits[std::to_integer<int>(b) >> 4];
    text += kDigits[std::to_integer<int>(b) & 15];
  }
  return text;
}

// a * b + c, or nothing when it overflows 64 bits.
bool checked_mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t* out) {
  uint64_t product;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(product, c, out);
}

class Dataset final : public IndexedDataset {
 public:
  Dataset(std::string prefix, MappedFile idx_map, MappedFile bin_map)
      : prefix_(std::move(prefix)), idx_map_(std::move(idx_map)), bin_map_(std::move(bin_map)) {}

  // Checks every field (the rules are in indexed_dataset.h) and copies the lengths and the
  // document index out of the mapping: at offset 34 they are not aligned for int32 / int64.
  Status parse(std::span<const std::byte> idx, std::span<const std::byte> bin);

  TokenDtype dtype() const override { return dtype_; }
  size_t num_sequences() const override { return lengths_.size(); }
  size_t num_documents() const override { return document_index_.size() - 1; }
  size_t num_tokens() const override { return num_tokens_; }
  std::span<const int32_t> sequence_lengths() const override { return lengths_; }
  std::span<const int64_t> document_index() const override { return document_index_; }
  const std::string& prefix() const override { return prefix_; }

  void read(size_t seq, size_t offset, size_t count, int32_t* out) const override {
    assert(seq < lengths_.size());
    assert(offset <= static_cast<size_t>(lengths_[seq]) &&
           count <= static_cast<size_t>(lengths_[seq]) - offset);
    if (count == 0) return;
    const size_t itemsize = token_dtype_size(dtype_);
    const std::byte* src =
        bin_.data() + load<int64_t>(pointers_ + seq * sizeof(int64_t)) + offset * itemsize;
    switch (dtype_) {
      case TokenDtype::kU8:
        convert<uint8_t>(src, count, out);
        break;
      case TokenDtype::kI8:
        convert<int8_t>(src, count, out);
        break;
      case TokenDtype::kI16:
        convert<int16_t>(src, count, out);
        break;
      case TokenDtype::kU16:
        convert<uint16_t>(src, count, out);
        break;
      case TokenDtype::kI32:
        std::memcpy(out, src, count * sizeof(int32_t));
        break;
      default:
        assert(false && "parse() admits token dtypes only");
    }
  }

 private:
  std::string prefix_;
  MappedFile idx_map_, bin_map_;         // empty when the bytes live in the caller's memory
  std::span<const std::byte> bin_;       // the token data, .bin
  const std::byte* pointers_ = nullptr;  // (N) int64 byte offsets inside the .idx, unaligned
  TokenDtype dtype_ = TokenDtype::kI32;
  std::vector<int32_t> lengths_;         // (N)
  std::vector<int64_t> document_index_;  // (D + 1)
  size_t num_tokens_ = 0;
};

Status Dataset::parse(std::span<const std::byte> idx, std::span<const std::byte> bin) {
  const std::string idx_name = prefix_ + ".idx", bin_name = prefix_ + ".bin";
  auto corrupt = [&](const std::string& what) { return Status::corrupt(idx_name + ": " + what); };

  const auto magic = std::as_bytes(std::span(kMagic));
  const auto head = idx.first(std::min(idx.size(), magic.size()));
  if (!std::equal(head.begin(), head.end(), magic.begin()))
    return corrupt("the file starts with bytes " + hex(head) +
                   ", not Megatron's index magic \"MMIDIDX\\0\\0\" (" + hex(magic) +
                   "); it is not a Megatron indexed dataset");
  if (idx.size() < kHeaderSize)
    return corrupt("the file is " + str(idx.size()) + " bytes long, shorter than the " +
                   str(kHeaderSize) + "-byte header (magic, version, dtype code, counts)");
  const uint64_t version = load<uint64_t>(idx.data() + 9);
  if (version != kVersion)
    return corrupt("the version is " + str(version) + " but Megatron's format has only version 1");
  const uint8_t code = load<uint8_t>(idx.data() + 17);
  if (code < 1 || code > 8)
    return corrupt("the dtype code is " + str(+code) + ", not one of Megatron's codes 1..8");
  dtype_ = static_cast<TokenDtype>(code);
  if (!is_token_dtype(dtype_))
    return corrupt("the dtype code is " + str(+code) + " (" + token_dtype_name(dtype_) +
                   "), which does not hold int32 token ids exactly; Lattice reads uint8, int8, "
                   "int16, uint16 and int32 datasets");
  const uint64_t n = load<uint64_t>(idx.data() + 18);
  const uint64_t docs = load<uint64_t>(idx.data() + 26);

  // 34 + 12 N + 8 (D + 1) bytes exactly, computed without overflow.
  uint64_t arrays_end = 0;
  const bool fits = checked_mul_add(n, 12, kHeaderSize, &arrays_end) &&
                    checked_mul_add(docs, 8, arrays_end, &arrays_end);
  const std::string declared = "the header declares " + str(n) + " sequences and " + str(docs) +
                               " document-index entries, which take ";
  if (!fits)
    return corrupt(declared + "more than 2^64 bytes; the file is " + str(idx.size()) + " bytes");
  if (idx.size() < arrays_end)
    return corrupt("the file is truncated: " + declared + str(arrays_end) +
                   " bytes but the file is " + str(idx.size()) + " bytes");
  if (idx.size() > arrays_end) {
    const uint64_t extra = idx.size() - arrays_end;
    return corrupt("the file has " + str(extra) +
                   " trailing bytes after the document index: " + declared + str(arrays_end) +
                   " bytes but the file is " + str(idx.size()) + " bytes" +
                   (extra == n ? " (as many as sequences: a multimodal index with sequence modes, "
                                 "which Lattice does not read)"
                               : ""));
  }
  if (docs == 0) return corrupt("the document index is empty; it must hold at least its leading 0");

  const std::byte* lengths_at = idx.data() + kHeaderSize;
  pointers_ = lengths_at + n * sizeof(int32_t);
  const std::byte* documents_at = pointers_ + n * sizeof(int64_t);
  lengths_.resize(n);
  if (n > 0) std::memcpy(lengths_.data(), lengths_at, n * sizeof(int32_t));
  document_index_.resize(docs);
  std::memcpy(document_index_.data(), documents_at, docs * sizeof(int64_t));

  // Every sequence starts where the one before it ends and the last ends at .bin's end.
  const uint64_t itemsize = token_dtype_size(dtype_);
  uint64_t end = 0;  // bytes of .bin taken by the sequences so far; never past bin.size() + 2^34
  for (uint64_t i = 0; i < n; i++) {
    if (lengths_[i] < 0)
      return corrupt("sequence " + str(i) + " has a negative length, " + str(lengths_[i]));
    const int64_t pointer = load<int64_t>(pointers_ + i * sizeof(int64_t));
    if (pointer < 0 || static_cast<uint64_t>(pointer) != end)
      return corrupt("sequence " + str(i) + " points to byte " + str(pointer) +
                     " but the sequences before it end at byte " + str(end));
    end += static_cast<uint64_t>(lengths_[i]) * itemsize;
    if (end > bin.size())
      return Status::corrupt(bin_name + " is truncated: it is " + str(bin.size()) + " bytes but " +
                             idx_name + " says sequence " + str(i) + " (" + str(lengths_[i]) + " " +
                             token_dtype_name(dtype_) + " tokens from byte " + str(pointer) +
                             ") ends at byte " + str(end));
  }
  if (end != bin.size())
    return Status::corrupt(bin_name + " is " + str(bin.size()) + " bytes but the " + str(n) +
                           " sequences in " + idx_name + " end at byte " + str(end) +
                           "; the two files do not belong together");
  num_tokens_ = end / itemsize;

  if (document_index_[0] != 0)
    return corrupt("the document index starts at " + str(document_index_[0]) + ", not at 0");
  for (uint64_t d = 1; d < docs; d++) {
    if (document_index_[d] < document_index_[d - 1])
      return corrupt("document index entry " + str(d) + " is " + str(document_index_[d]) +
                     ", less than entry " + str(d - 1) + " (" + str(document_index_[d - 1]) +
                     "); the entries must not decrease");
  }
  if (document_index_.back() != static_cast<int64_t>(n))
    return corrupt("the document index ends at " + str(document_index_.back()) + " but there are " +
                   str(n) + " sequences; its last entry must be the sequence count");
  bin_ = bin;
  return Status::ok();
}

}  // namespace

size_t token_dtype_size(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kU8:
    case TokenDtype::kI8:
      return 1;
    case TokenDtype::kI16:
    case TokenDtype::kU16:
      return 2;
    case TokenDtype::kI32:
    case TokenDtype::kF32:
      return 4;
    case TokenDtype::kI64:
    case TokenDtype::kF64:
      return 8;
  }
  assert(false && "not a TokenDtype");
  return 0;
}

const char* token_dtype_name(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kU8:
      return "uint8";
    case TokenDtype::kI8:
      return "int8";
    case TokenDtype::kI16:
      return "int16";
    case TokenDtype::kI32:
      return "int32";
    case TokenDtype::kI64:
      return "int64";
    case TokenDtype::kF64:
      return "float64";
    case TokenDtype::kF32:
      return "float32";
    case TokenDtype::kU16:
      return "uint16";
  }
  return "unknown";
}

bool is_token_dtype(TokenDtype dtype) {
  return dtype == TokenDtype::kU8 || dtype == TokenDtype::kI8 || dtype == TokenDtype::kI16 ||
         dtype == TokenDtype::kU16 || dtype == TokenDtype::kI32;
}

// DType.optimal_dtype in megatron/core/datasets/indexed_dataset.py.
TokenDtype token_dtype_for_vocab(int vocab_size) {
  return vocab_size < 65500 ? TokenDtype::kU16 : TokenDtype::kI32;
}

Result<std::unique_ptr<IndexedDatasetBuilder>> IndexedDatasetBuilder::create(
    const std::string& prefix, TokenDtype dtype) {
  if (!is_token_dtype(dtype))
    return Status::invalid_argument(prefix + ".bin: cannot write tokens as " +
                                    token_dtype_name(dtype) +
                                    "; token datasets are uint8, int8, int16, uint16 or int32");
  auto builder = std::make_unique<Builder>(prefix, dtype);
  Status s = builder->open();
  if (!s) return s;
  return std::unique_ptr<IndexedDatasetBuilder>(std::move(builder));
}

Result<std::unique_ptr<IndexedDataset>> IndexedDataset::open(const std::string& prefix) {
  Result<MappedFile> idx = MappedFile::open(prefix + ".idx");
  if (!idx) return idx.status();
  Result<MappedFile> bin = MappedFile::open(prefix + ".bin");
  if (!bin) return bin.status();
  const auto idx_bytes = idx->bytes(), bin_bytes = bin->bytes();
  auto dataset = std::make_unique<Dataset>(prefix, std::move(*idx), std::move(*bin));
  Status s = dataset->parse(idx_bytes, bin_bytes);
  if (!s) return s;
  return std::unique_ptr<IndexedDataset>(std::move(dataset));
}

Result<std::unique_ptr<IndexedDataset>> open_indexed_dataset_in_memory(
    const std::string& prefix, std::span<const std::byte> idx, std::span<const std::byte> bin) {
  auto dataset = std::make_unique<Dataset>(prefix, MappedFile(), MappedFile());
  Status s = dataset->parse(idx, bin);
  if (!s) return s;
  return std::unique_ptr<IndexedDataset>(std::move(dataset));
}

}  // namespace lattice
