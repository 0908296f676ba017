// read_file_header: the database header through SQLite's default VFS (Note "header through the
// VFS" in file_header.h).
#include "file_header.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

namespace lattice::storage {
namespace {

std::int32_t big_endian_32(const unsigned char* p) {
  return static_cast<std::int32_t>((std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                                   (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]});
}

// A file opened through a VFS, closed (through the same VFS) on destruction.
class VfsFile {
 public:
  explicit VfsFile(sqlite3_vfs* vfs)
      : storage_((static_cast<std::size_t>(vfs->szOsFile) + sizeof(std::max_align_t) - 1) /
                 sizeof(std::max_align_t)) {}
  ~VfsFile() {
    if (file()->pMethods) file()->pMethods->xClose(file());
  }
  VfsFile(const VfsFile&) = delete;
  VfsFile& operator=(const VfsFile&) = delete;
  // The sqlite3_file the VFS fills; pMethods stays null when xOpen fails.
  sqlite3_file* file() { return reinterpret_cast<sqlite3_file*>(storage_.data()); }

 private:
  std::vector<std::max_align_t> storage_;  // (szOsFile bytes), zeroed
};

// sqlite3_create_filename's name, freed on destruction: the form xOpen expects (the database
// name followed by its journal, WAL and URI parameters), which lives until the file is closed.
struct FileName {
  explicit FileName(const std::string& path)
      : name(sqlite3_create_filename(path.c_str(), (path + "-journal").c_str(),
                                     (path + "-wal").c_str(), 0, nullptr)) {}
  ~FileName() { sqlite3_free_filename(name); }
  FileName(const FileName&) = delete;
  FileName& operator=(const FileName&) = delete;
  decltype(sqlite3_create_filename(nullptr, nullptr, nullptr, 0, nullptr)) name;
};

}  // namespace

bool FileHeader::is_sqlite() const {
  return size == bytes.size() && std::memcmp(bytes.data(), "SQLite format 3", 16) == 0;
}

std::int32_t FileHeader::user_version() const {
  return big_endian_32(&bytes[60]);
}

std::int32_t FileHeader::application_id() const {
  return big_endian_32(&bytes[68]);
}

std::optional<FileHeader> read_file_header(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;  // stat only: no descriptor
  sqlite3_vfs* vfs = sqlite3_vfs_find(nullptr);
  if (!vfs) return std::nullopt;
  std::vector<char> full(static_cast<std::size_t>(vfs->mxPathname) + 1);
  const int named = vfs->xFullPathname(vfs, path.c_str(), vfs->mxPathname + 1, full.data());
  if (named != SQLITE_OK && named != SQLITE_OK_SYMLINK) return std::nullopt;
  const FileName name{std::string(full.data())};
  if (!name.name) return std::nullopt;
  VfsFile opened(vfs);
  int flags_out = 0;
  if (vfs->xOpen(vfs, name.name, opened.file(), SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_READONLY,
                 &flags_out) != SQLITE_OK)
    return std::nullopt;
  sqlite3_file* file = opened.file();
  sqlite3_int64 file_size = 0;
  if (file->pMethods->xFileSize(file, &file_size) != SQLITE_OK || file_size <= 0)
    return std::nullopt;
  FileHeader header;
  header.size = static_cast<std::size_t>(
      std::min<sqlite3_int64>(file_size, static_cast<sqlite3_int64>(header.bytes.size())));
  const int rc = file->pMethods->xRead(file, header.bytes.data(), static_cast<int>(header.size), 0);
  if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) return std::nullopt;
  return header;
}

}  // namespace lattice::storage
