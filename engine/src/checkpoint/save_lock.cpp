// Save locks and the removal of interrupted saves (save_lock.h).
#include "checkpoint/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

namespace lattice {

namespace fs = std::filesystem;

namespace {

std::string lock_path(const std::string& tmp_dir) {
  return tmp_dir + ".lock";
}

bool is_interrupted_save_name(const std::string& n) {
  return n.size() > 9 && n.rfind("iter_", 0) == 0 && n.compare(n.size() - 4, 4, ".tmp") == 0;
}

enum class Lock { kTaken, kBusy, kFailed };

// Opens `path` (created when missing) and takes its exclusive lock without waiting. kTaken puts
// the descriptor in *fd; kFailed puts the reason in *why.
Lock try_lock(const std::string& path, int* fd, std::string* why) {
  // A holder removes the file before it lets go (SaveLock::release), so a lock taken on a file
  // that is no longer at `path` guards nothing: then the path is opened again.
  for (int attempt = 0; attempt < 16; attempt++) {
    const int f = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) {
      *why = std::strerror(errno);
      return Lock::kFailed;
    }
    if (::flock(f, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(f);
      if (e == EWOULDBLOCK) return Lock::kBusy;
      *why = std::strerror(e);
      return Lock::kFailed;
    }
    struct stat held {
    }, named{};
    if (::fstat(f, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      *fd = f;
      return Lock::kTaken;
    }
    ::close(f);
  }
  *why = "the lock file was replaced 16 times in a row";
  return Lock::kFailed;
}

int64_t tree_bytes(const std::string& path) {
  int64_t bytes = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const uintmax_t n = it->file_size(size_ec);
      if (!size_ec) bytes += static_cast<int64_t>(n);
    }
  }
  return bytes;
}

std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else if (bytes >= 100000)
    std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f kB", bytes / 1e3);
  return buf;
}

}  // namespace

Result<SaveLock> SaveLock::acquire(const std::string& tmp_dir) {
  const std::string path = lock_path(tmp_dir);
  int fd = -1;
  std::string why;
  switch (try_lock(path, &fd, &why)) {
    case Lock::kTaken:
      return SaveLock(tmp_dir, fd);
    case Lock::kBusy:
      return Status::io_error("another process is saving into " + tmp_dir + " (it holds " + path +
                              ")");
    case Lock::kFailed:
      break;
  }
  return Status::io_error("cannot lock " + path + ": " + why);
}

SaveLock::SaveLock(SaveLock&& other) noexcept
    : tmp_dir_(std::move(other.tmp_dir_)), fd_(std::exchange(other.fd_, -1)) {}

SaveLock& SaveLock::operator=(SaveLock&& other) noexcept {
  if (this != &other) {
    release();
    tmp_dir_ = std::move(other.tmp_dir_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

SaveLock::~SaveLock() {
  release();
}

void SaveLock::release() {
  if (fd_ < 0) return;
  ::unlink(lock_path(tmp_dir_).c_str());  // while still held: see try_lock
  ::close(fd_);
  fd_ = -1;
}

std::vector<std::string> InterruptedSaves::messages() const {
  std::vector<std::string> lines;
  if (removed.size() == 1) {
    lines.push_back("removed " + removed[0].name + " (" + size_text(removed[0].bytes) +
                    "), left by an interrupted save");
  } else if (!removed.empty()) {
    int64_t total = 0;
    std::string list;
    for (const Removed& r : removed) {
      total += r.bytes;
      list += (list.empty() ? "" : ", ") + r.name + " (" + size_text(r.bytes) + ")";
    }
    lines.push_back("removed " + std::to_string(removed.size()) + " interrupted saves (" +
                    size_text(total) + "): " + list);
  }
  if (!left.empty()) {
    std::string list;
    for (const std::string& l : left) list += (list.empty() ? "" : "; ") + l;
    lines.push_back("kept " + list);
  }
  return lines;
}

InterruptedSaves remove_interrupted_saves(const std::string& dir, const SaveLock* held) {
  InterruptedSaves out;
  std::vector<std::string> names, orphan_locks;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string n = it->path().filename().string();
    std::error_code type_ec;
    if (is_interrupted_save_name(n) && it->is_directory(type_ec)) names.push_back(n);
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".lock") == 0 &&
        is_interrupted_save_name(n.substr(0, n.size() - 5)))
      orphan_locks.push_back(n.substr(0, n.size() - 5));
  }
  std::sort(names.begin(), names.end());
  const std::string own = held ? fs::path(held->tmp_dir()).filename().string() : std::string();
  for (const std::string& name : names) {
    const std::string tmp = (fs::path(dir) / name).string();
    int fd = -1;
    std::string why;
    if (name != own) {
      const Lock lock = try_lock(lock_path(tmp), &fd, &why);
      if (lock == Lock::kBusy) {
        out.left.push_back(name + ": another process is writing it (it holds " + name + ".lock)");
        continue;
      }
      if (lock == Lock::kFailed) {
        out.left.push_back(name + ": cannot lock " + name + ".lock to tell whether a save is " +
                           "still writing it (" + why + ")");
        continue;
      }
    }
    const int64_t bytes = tree_bytes(tmp);
    std::error_code rm;
    fs::remove_all(tmp, rm);
    if (rm)
      out.left.push_back(name + ": cannot remove it (" + rm.message() + ")");
    else
      out.removed.push_back({name, bytes});
    if (fd >= 0) {
      ::unlink(lock_path(tmp).c_str());
      ::close(fd);
    }
  }
  // Lock files whose save died before creating its directory or after renaming it.
  for (const std::string& name : orphan_locks) {
    if (name == own || std::binary_search(names.begin(), names.end(), name)) continue;
    const std::string path = lock_path((fs::path(dir) / name).string());
    int fd = -1;
    std::string why;
    if (try_lock(path, &fd, &why) == Lock::kTaken) {
      ::unlink(path.c_str());
      ::close(fd);
    }
  }
  return out;
}

bool save_in_progress(const std::string& tmp_dir) {
  const int fd = ::open(lock_path(tmp_dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // no lock file: nobody holds it
  const bool busy = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return busy;
}

}  // namespace lattice
