// libFuzzer target for the checkpoint readers: safetensors::File (a shard) and
// CheckpointReader (metadata.json plus its shards). Input: u32 little-endian length of
// metadata.json, metadata.json, then the bytes of rank_00000.safetensors. Any input gives a
// reader or a status with a message; every piece the metadata lists is then read, and the
// shard is also opened as a plain safetensors file and every tensor converted.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"

namespace {
const std::string& scratch() {
  static const std::string dir = [] {
    char templ[] = "/tmp/lattice-fuzz-ckpt-XXXXXX";
    return std::string(mkdtemp(templ));
  }();
  return dir;
}
void write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t meta = 0;
  std::memcpy(&meta, data, 4);
  if (meta > size - 4) return 0;
  const std::string dir = scratch();
  write(dir + "/metadata.json", data + 4, meta);
  write(dir + "/rank_00000.safetensors", data + 4 + meta, size - 4 - meta);

  lattice::Result<lattice::safetensors::File> shard =
      lattice::safetensors::File::open(dir + "/rank_00000.safetensors");
  if (shard) {
    for (const auto& t : shard->tensors()) {
      if (t.numel > (1u << 24)) continue;
      std::vector<float> out(t.numel);
      (void)shard->read_float(t, out.data());
    }
  } else if (shard.status().message().empty()) {
    __builtin_trap();  // every refusal says why
  }

  auto reader = lattice::CheckpointReader::open(dir);
  if (!reader) {
    if (reader.status().message().empty()) __builtin_trap();
    return 0;
  }
  (void)(*reader)->verify_all();
  std::vector<int64_t> shape;
  std::vector<float> global;
  for (const lattice::CheckpointPiece& p : (*reader)->pieces()) {
    int64_t numel = 1;
    bool sane = true;
    for (int64_t d : p.global_shape) {
      if (d < 0 || d > (1 << 20) || numel * std::max<int64_t>(d, 1) > (1 << 24)) sane = false;
      numel *= std::max<int64_t>(d, 1);
    }
    if (!sane) continue;  // a huge claimed shape would only test the allocator
    (void)(*reader)->read_global(p.kind, p.name, shape, global);
  }
  return 0;
}
