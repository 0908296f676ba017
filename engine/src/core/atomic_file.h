// Small files written so that a reader sees the old contents or the new, never a part: a
// temporary beside the target, fsynced, then renamed over it.
#pragma once

#include <string>

#include "lattice/status.h"

namespace lattice {

// fsync of the file or directory at `path`.
Status fsync_path(const std::string& path);

// Writes `text` to `path` through `path`.tmp (written, fsynced, renamed into place).
Status write_file_atomic(const std::string& path, const std::string& text);

}  // namespace lattice
