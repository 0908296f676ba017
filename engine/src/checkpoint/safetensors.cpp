// Reading (mmap + a full header check, rules as in the reference Rust implementation) and
// atomic writing of safetensors files. Little-endian hosts only, as the format itself.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "checkpoint/crc32c.h"

namespace lattice::safetensors {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using nlohmann::json;

// The reference implementation's limit; a larger length is a corrupt or foreign file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {Dtype::kBool, "BOOL", 1},      {Dtype::kU8, "U8", 1},          {Dtype::kI8, "I8", 1},
    {Dtype::kF8E5M2, "F8_E5M2", 1}, {Dtype::kF8E4M3, "F8_E4M3", 1}, {Dtype::kI16, "I16", 2},
    {Dtype::kU16, "U16", 2},        {Dtype::kF16, "F16", 2},        {Dtype::kBF16, "BF16", 2},
    {Dtype::kI32, "I32", 4},        {Dtype::kU32, "U32", 4},        {Dtype::kF32, "F32", 4},
    {Dtype::kF64, "F64", 8},        {Dtype::kI64, "I64", 8},        {Dtype::kU64, "U64", 8},
};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string known_dtype_names() {
  std::string s;
  for (const DtypeInfo& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

std::string range_string(size_t begin, size_t end) {
  // Appended piece by piece: `"[" + std::to_string(...)` trips GCC 12's -Wrestrict (bug 105329).
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  return s + "]";
}

// A non-negative integer that fits size_t, or false.
bool as_size(const json& v, size_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<size_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

// Parses one header entry into `t` (t.name already set); an empty string means ok, otherwise
// the sentence that says what is wrong, without the file name.
std::string parse_entry(const json& entry, size_t data_size, TensorInfo* t) {
  const std::string who = "tensor '" + t->name + "'";
  if (!entry.is_object()) return who + " must be a JSON object, got " + entry.dump();
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) return who + " has no \"" + field + "\" field";

  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) return who + " has a non-string dtype " + dtype.dump();
  const DtypeInfo* info = find_dtype(dtype.get<std::string>());
  if (!info)
    return who + " has unknown dtype '" + dtype.get<std::string>() +
           "' (known: " + known_dtype_names() + ")";
  t->dtype = info->dtype;

  const json& shape = entry["shape"];
  if (!shape.is_array()) return who + " has a shape that is not an array: " + shape.dump();
  size_t numel = 1;
  for (const json& d : shape) {
    size_t dim = 0;
    if (!as_size(d, &dim))
      return who + " has shape " + shape.dump() +
             " with a dimension that is not a "
             "non-negative integer";
    if (__builtin_mul_overflow(numel, dim, &numel))
      return who + " has shape " + shape.dump() + " whose element count overflows";
    t->shape.push_back(static_cast<int64_t>(dim));
  }
  t->numel = numel;

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !as_size(offsets[0], &t->begin) ||
      !as_size(offsets[1], &t->end))
    return who + " has data_offsets " + offsets.dump() +
           "; expected two non-negative integers [begin, end]";
  if (t->end < t->begin)
    return who + " has data_offsets " + range_string(t->begin, t->end) +
           " that end before they "
           "begin";
  if (t->end > data_size)
    return who + " has data_offsets " + range_string(t->begin, t->end) +
           " past the end of the data (" + std::to_string(data_size) +
           " bytes; is the file truncated?)";
  size_t bytes = 0;
  if (__builtin_mul_overflow(numel, info->size, &bytes) || bytes != t->end - t->begin)
    return who + " has shape " + shape_to_string(t->shape) + " and dtype " + info->name +
           ", which is " + std::to_string(numel) + " x " + std::to_string(info->size) +
           " bytes, but its data_offsets " + range_string(t->begin, t->end) + " span " +
           std::to_string(t->end - t->begin) + " bytes";
  return "";
}

// Sorted by offset, tensors must tile the data exactly: no overlap, no hole, nothing after.
std::string check_tiling(const std::vector<TensorInfo>& tensors, size_t data_size) {
  size_t at = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < at)
      return "tensors '" + previous->name + "' " + range_string(previous->begin, previous->end) +
             " and '" + t.name + "' " + range_string(t.begin, t.end) + " overlap";
    if (t.begin > at)
      return "data bytes [" + std::to_string(at) + ", " + std::to_string(t.begin) +
             ") before tensor '" + t.name + "' belong to no tensor";
    at = t.end;
    previous = &t;
  }
  if (at != data_size)
    return "the last " + std::to_string(data_size - at) + " data bytes (after offset " +
           std::to_string(at) + ") belong to no tensor";
  return "";
}

// Note [checkpoint writes]: a file is streamed through two aligned staging buffers. The caller's
// thread copies the next bytes into one buffer and extends the CRC-32C over them while they are
// hot in cache; a writer thread meanwhile writes the other buffer with O_DIRECT, so the disk is
// kept busy, the data never passes through the page cache (no page-cache allocation, which on
// these VMs costs more than the disk itself, and no eviction of the training data), and the
// checksum needs no second pass over the file. The last buffer is written padded to the
// alignment and the file is truncated back to its length. Filesystems without O_DIRECT (tmpfs,
// some network filesystems) get the same stream through ordinary buffered writes.
class StreamingWriter {
  struct Job {
    const std::byte* data;  // (size) inside one staging buffer
    size_t size;
    uint64_t offset;  // in the file
  };

 public:
  static constexpr size_t kAlign = 4096;  // O_DIRECT alignment, any block size <= 4 KiB
  static constexpr size_t kBufferBytes = size_t{16} << 20;  // each staging buffer

  explicit StreamingWriter(std::string path) : path_(std::move(path)) {}
  StreamingWriter(const StreamingWriter&) = delete;
  StreamingWriter& operator=(const StreamingWriter&) = delete;
  ~StreamingWriter() {
    stop_thread();
    if (fd_ >= 0) ::close(fd_);
    for (std::byte* b : buffers_) std::free(b);
  }

  Status open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
    if (fd_ < 0 && errno == EINVAL)
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::io_error("cannot create " + path_ + ": " + std::strerror(errno));
    for (std::byte*& b : buffers_) {
      b = static_cast<std::byte*>(std::aligned_alloc(kAlign, kBufferBytes));
      if (!b) return Status::io_error("cannot write " + path_ + ": out of memory for buffers");
    }
    thread_ = std::thread([this] { write_loop(); });
    return Status::ok();
  }

  // Appends `size` bytes; the CRC-32C runs over them as they are staged.
  Status append(const void* data, size_t size) {
    const std::byte* p = static_cast<const std::byte*>(data);
    while (size > 0) {
      // Copy and checksum in slices small enough to stay in cache between the two.
      const size_t n = std::min({size, kBufferBytes - filled_, size_t{256} << 10});
      std::byte* dst = buffers_[current_] + filled_;
      std::memcpy(dst, p, n);
      crc_ = crc32c(crc_, dst, n);
      filled_ += n, p += n, size -= n, bytes_ += n;
      if (filled_ == kBufferBytes)
        if (Status s = submit(kBufferBytes); !s) return s;
    }
    return Status::ok();
  }

  // Writes what is staged, sets the exact length, fsyncs and closes the file.
  Status finish() {
    const size_t padded = (filled_ + kAlign - 1) / kAlign * kAlign;
    std::memset(buffers_[current_] + filled_, 0, padded - filled_);
    if (Status s = padded > 0 ? submit(padded) : Status::ok(); !s) return s;
    stop_thread();
    if (!error_) return error_;
    if (::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0)
      return Status::io_error("cannot set the length of " + path_ + ": " + std::strerror(errno));
    if (::fsync(fd_) != 0)
      return Status::io_error("cannot flush " + path_ + ": " + std::strerror(errno));
    if (::close(std::exchange(fd_, -1)) != 0)
      return Status::io_error("cannot close " + path_ + ": " + std::strerror(errno));
    return Status::ok();
  }

  uint64_t bytes() const { return bytes_; }
  uint32_t crc32c_value() const { return crc_; }

 private:
  // Hands the current buffer (its first `size` bytes) to the writer thread once it has finished
  // the previous one, and starts filling the other buffer.
  Status submit(size_t size) {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return !pending_; });
    if (!error_) return error_;
    pending_ = Job{buffers_[current_], size, offset_};
    offset_ += size;
    current_ ^= 1;
    filled_ = 0;
    ready_.notify_one();
    return Status::ok();
  }

  void write_loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [&] { return pending_ || stopping_; });
      if (!pending_) return;
      const Job job = *pending_;
      lock.unlock();
      Status s = write_at(job);
      lock.lock();
      if (!s && error_) error_ = s;
      pending_.reset();
      idle_.notify_all();
    }
  }

  Status write_at(const Job& job) {
    size_t done = 0;
    while (done < job.size) {
      const ssize_t n =
          ::pwrite(fd_, job.data + done, job.size - done, static_cast<off_t>(job.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct_) {  // the filesystem refuses this alignment
        const int flags = ::fcntl(fd_, F_GETFL);
        if (flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0) {
          direct_ = false;
          continue;
        }
      }
      if (n < 0) return Status::io_error("cannot write " + path_ + ": " + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    return Status::ok();
  }

  void stop_thread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_one();
    thread_.join();
  }

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;         // O_DIRECT in effect; after open() only the writer thread uses it
  std::byte* buffers_[2] = {};  // (kBufferBytes) each, kAlign-aligned
  int current_ = 0;             // the buffer being filled
  size_t filled_ = 0;           // bytes staged in it
  uint64_t offset_ = 0, bytes_ = 0;  // file offset of the next buffer; bytes appended
  uint32_t crc_ = 0;
  std::thread thread_;
  std::mutex mutex_;  // guards pending_, stopping_, error_
  std::condition_variable ready_, idle_;
  std::optional<Job> pending_;
  bool stopping_ = false;
  Status error_ = Status::ok();
};

}  // namespace

const char* dtype_name(Dtype dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

size_t dtype_size(Dtype dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (d.dtype == dtype) return d.size;
  return 0;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F)  // inf or nan, nan payload kept
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet, sign kept
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);                  // ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

bool to_float(Dtype dtype, const std::byte* src, size_t numel, float* out) {
  switch (dtype) {
    case Dtype::kF32:
      std::memcpy(out, src, numel * sizeof(float));
      return true;
    case Dtype::kF16:
    case Dtype::kBF16: {
      float (*convert)(uint16_t) = dtype == Dtype::kF16 ? f16_to_float : bf16_to_float;
      for (size_t i = 0; i < numel; i++) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);  // src may be unaligned
        out[i] = convert(bits);
      }
      return true;
    }
    default:
      return false;
  }
}

Result<File> File::open(const std::string& path) {
  Result<MappedFile> mapped = MappedFile::open(path);
  if (!mapped) return mapped.status();
  const size_t file_size = mapped->size();
  if (file_size < 8)
    return Status::corrupt(path + " is " + std::to_string(file_size) +
                           " bytes long, too short for a safetensors file (which starts with "
                           "an 8-byte header length)");
  File file;  // owns the mapping from here on
  file.path_ = path;
  file.map_ = std::move(*mapped);
  const std::byte* bytes = file.map_.bytes().data();
  auto corrupt = [&](const std::string& what) { return Status::corrupt(path + ": " + what); };

  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes, 8);
  if (header_size > file_size - 8)
    return corrupt("the header length " + std::to_string(header_size) +
                   " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  if (header_size > kMaxHeaderBytes)
    return corrupt("the header length " + std::to_string(header_size) + " exceeds the " +
                   std::to_string(kMaxHeaderBytes) + "-byte limit");
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  file.data_ = bytes + 8 + header_size;
  const size_t data_size = file_size - 8 - header_size;

  // nlohmann keeps the last of two equal keys silently; the callback sees every top-level key.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json root;
  try {
    root = json::parse(header, header + header_size, on_event);
  } catch (const json::parse_error& e) {
    const std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    return corrupt("the " + std::to_string(header_size) + "-byte header is not valid JSON (" +
                   what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2) +
                   ")");
  }
  if (!root.is_object()) return corrupt("the header must be a JSON object, got " + root.dump());
  if (!duplicate.empty()) return corrupt("tensor '" + duplicate + "' appears twice in the header");

  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return corrupt("__metadata__ must be a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          return corrupt("__metadata__ must map strings to strings, but '" + key + "' holds " +
                         value.dump());
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    TensorInfo t;
    t.name = name;
    const std::string problem = parse_entry(entry, data_size, &t);
    if (!problem.empty()) return corrupt(problem);
    file.tensors_.push_back(std::move(t));
  }
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const std::string tiling = check_tiling(file.tensors_, data_size);
  if (!tiling.empty()) return corrupt(tiling);
  return Result<File>(std::move(file));
}

File::File(File&& other) noexcept {
  *this = std::move(other);
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    map_ = std::move(other.map_);
    data_ = std::exchange(other.data_, nullptr);
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

File::~File() = default;

const TensorInfo* File::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::span<const std::byte> File::bytes(const TensorInfo& tensor) const {
  return {data_ + tensor.begin, tensor.end - tensor.begin};
}

Status File::read_float(const TensorInfo& tensor, float* out) const {
  if (!to_float(tensor.dtype, data_ + tensor.begin, tensor.numel, out))
    return Status::invalid_argument(path_ + ": tensor '" + tensor.name + "' has dtype " +
                                    dtype_name(tensor.dtype) +
                                    "; only F32, F16 and BF16 convert to float");
  return Status::ok();
}

Status write(const std::string& path, const std::vector<TensorSource>& tensors,
             const std::map<std::string, std::string>& metadata, Written* written) {
  std::vector<const TensorSource*> order;
  for (const TensorSource& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorSource* a, const TensorSource* b) { return a->name < b->name; });

  // Header: metadata first, then the tensors in data order, fields as the Rust writer orders them.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<size_t> numels;
  size_t offset = 0, largest_fill = 0;
  for (size_t i = 0; i < order.size(); i++) {
    const TensorSource& t = *order[i];
    if (t.name.empty() || t.name == "__metadata__")
      return Status::invalid_argument("cannot write " + path + ": tensor name '" + t.name +
                                      "' is empty or reserved");
    if (i > 0 && order[i - 1]->name == t.name)
      return Status::invalid_argument("cannot write " + path + ": tensor '" + t.name +
                                      "' is given twice");
    size_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        return Status::invalid_argument("cannot write " + path + ": tensor '" + t.name +
                                        "' has negative dimension in shape " +
                                        shape_to_string(t.shape));
      numel *= static_cast<size_t>(d);
    }
    if (!t.data && !t.fill)
      return Status::invalid_argument("cannot write " + path + ": tensor '" + t.name +
                                      "' has neither data nor a fill function");
    if (t.dtype != Dtype::kF32 && t.dtype != Dtype::kBF16)
      return Status::invalid_argument("cannot write " + path + ": tensor '" + t.name +
                                      "' asks for dtype " + dtype_name(t.dtype) +
                                      "; only F32 and BF16 are written");
    if (!t.data) largest_fill = std::max(largest_fill, numel);
    numels.push_back(numel);
    const size_t end = offset + numel * dtype_size(t.dtype);
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string header_text = header.dump();
  header_text.resize((header_text.size() + 7) / 8 * 8, ' ');
  const uint64_t header_size = header_text.size();

  const std::string tmp = path + ".tmp";
  StreamingWriter out(tmp);
  Status s = out.open();
  if (s) s = out.append(&header_size, 8);
  if (s) s = out.append(header_text.data(), header_text.size());
  std::vector<float> scratch;  // only as large as the largest tensor produced by `fill`
  scratch.reserve(largest_fill);
  std::vector<uint16_t> narrow;  // BF16 values, a slice at a time
  for (size_t i = 0; i < order.size() && s; i++) {
    const float* data = order[i]->data;
    if (!data) {
      scratch.resize(numels[i]);
      order[i]->fill(scratch.data());
      data = scratch.data();
    }
    if (order[i]->dtype == Dtype::kF32) {
      s = out.append(data, numels[i] * sizeof(float));
      continue;
    }
    constexpr size_t kSlice = size_t{1} << 18;
    for (size_t at = 0; at < numels[i] && s; at += kSlice) {
      const size_t n = std::min(kSlice, numels[i] - at);
      narrow.resize(n);
      for (size_t j = 0; j < n; j++) narrow[j] = float_to_bf16(data[at + j]);
      s = out.append(narrow.data(), n * sizeof(uint16_t));
    }
  }
  if (s) s = out.finish();
  if (s && std::rename(tmp.c_str(), path.c_str()) != 0)
    s = Status::io_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  if (!s) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (written) *written = {out.bytes(), out.crc32c_value()};
  return Status::ok();
}

}  // namespace lattice::safetensors
