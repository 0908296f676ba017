// Interrupted saves and who may remove them (docs/design-notes.md#checkpoints, "Interrupted
// saves"). A save writes iter_N.tmp/ while its writer holds an exclusive flock on the file
// iter_N.tmp.lock beside it, from before the directory is created until after it is renamed
// into place. A .tmp is removed only by a process that can take that lock itself, so never while
// a live job (or `lattice ckpt`) is still writing it; a job killed mid-save releases the lock with
// its last file descriptor. Non-goals: file systems without working flock between the machines
// that share them (Lustre mounted without -o flock): there nothing that cannot be locked is
// removed.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lattice/status.h"

namespace lattice {

// The lock of one iteration directory's save, held until destruction or release(). Movable.
class SaveLock {
 public:
  // Takes iter_N.tmp.lock for `tmp_dir` (".../iter_N.tmp") without waiting: fails, naming the
  // lock file, when another process holds it (a save of the same iteration into the same
  // directory is running) or the file cannot be created or locked.
  static Result<SaveLock> acquire(const std::string& tmp_dir);
  SaveLock(SaveLock&& other) noexcept;
  SaveLock& operator=(SaveLock&& other) noexcept;
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;
  ~SaveLock();
  // Removes the lock file and releases the lock (the save is complete or abandoned).
  void release();
  const std::string& tmp_dir() const { return tmp_dir_; }

 private:
  SaveLock(std::string tmp_dir, int fd) : tmp_dir_(std::move(tmp_dir)), fd_(fd) {}
  std::string tmp_dir_;
  int fd_ = -1;
};

// What remove_interrupted_saves did in one checkpoint directory.
struct InterruptedSaves {
  struct Removed {
    std::string name;  // "iter_0000004.tmp"
    int64_t bytes = 0;
  };
  std::vector<Removed> removed;
  std::vector<std::string> left;  // "iter_0000008.tmp (another process is writing it)"
  // One line each for what was removed and what was left; empty when there was nothing.
  std::vector<std::string> messages() const;
};

// Removes every iter_N.tmp/ in `dir` that no process is writing (its lock is free), with its lock
// file. `held`: a lock this process already holds (its own save's); that iteration's .tmp, left
// by an earlier interrupted save of the same iteration, is removed under it. Never throws; a
// missing `dir` has nothing to remove.
InterruptedSaves remove_interrupted_saves(const std::string& dir, const SaveLock* held = nullptr);

// Whether a live process holds the save lock of `tmp_dir` (".../iter_N.tmp"). Creates nothing,
// so readers of a checkpoint directory they may not write (generate, serve) can ask.
bool save_in_progress(const std::string& tmp_dir);

}  // namespace lattice
