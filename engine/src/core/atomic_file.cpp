// Atomic small-file writes (atomic_file.h).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace lattice {

Status fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::io_error(path + ": cannot open to sync");
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::ok() : Status::io_error(path + ": fsync failed");
}

Status write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.write(text.data(), static_cast<std::streamsize>(text.size())) || !out.flush())
      return Status::io_error(tmp + ": cannot write");
  }
  if (Status s = fsync_path(tmp); !s) return s;
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::io_error(path + ": cannot rename into place: " + ec.message());
  return Status::ok();
}

}  // namespace lattice
