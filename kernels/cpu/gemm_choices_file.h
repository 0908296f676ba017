// The automatic fp32 GEMM mode's choices kept on disk, one file per kind of machine, so that
// every process on a machine runs a shape on the library the first one measured (Note [GEMM
// choices file], README.md). Used by fp32_gemm.cpp only.
#pragma once

#include <string>
#include <vector>

#include "lattice/cpu_gemm.h"

namespace lattice::kernels::cpu {

// What identifies a machine's GEMM rates: the CPU's model name, the kernels' ISA, OpenBLAS's
// kernel and build, oneDNN's version and effective ISA. One line, written at the top of the file.
std::string gemm_machine_signature();

// <dir>/gemm-choices/<16 hex digits of the signature's hash>.tsv
std::string gemm_choices_path(const std::string& dir);

// The file locked against the other processes that use it (an flock on "<path>.lock"), for one
// read and at most one append. A file that cannot be opened or locked, or whose first line is
// another machine's signature, gives ok() false and `problem` says why in one sentence; the
// caller then keeps its timings in the process.
class LockedChoicesFile {
 public:
  explicit LockedChoicesFile(const std::string& path);
  ~LockedChoicesFile();
  LockedChoicesFile(const LockedChoicesFile&) = delete;
  LockedChoicesFile& operator=(const LockedChoicesFile&) = delete;

  bool ok() const { return lock_fd_ >= 0 && problem_.empty(); }
  const std::string& problem() const { return problem_; }
  // The rows read (remembered = true); a malformed line is skipped and named in `skipped`.
  const std::vector<GemmChoice>& rows() const { return rows_; }
  const std::vector<std::string>& skipped() const { return skipped_; }
  // Appends one row (the header first when the file is new). False with `problem` set when the
  // write fails.
  bool append(const GemmChoice& choice);

 private:
  std::string path_;
  int lock_fd_ = -1;
  bool has_header_ = false;
  bool ends_mid_line_ = false;
  std::string problem_;
  std::vector<GemmChoice> rows_;
  std::vector<std::string> skipped_;
};

}  // namespace lattice::kernels::cpu
