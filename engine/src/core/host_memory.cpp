// OutOfMemory's sentence and binary_size (host_memory.h).
#include "core/host_memory.h"

#include <cstdio>

namespace lattice {

std::string binary_size(double bytes) {
  constexpr double kMiB = 1024.0 * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;
  char text[32];
  if (bytes >= kTiB)
    std::snprintf(text, sizeof text, "%.2f TiB", bytes / kTiB);
  else if (bytes >= kGiB)
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / kGiB);
  else
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / kMiB);
  return text;
}

OutOfMemory::OutOfMemory(MemoryCategory category, size_t bytes)
    : category_(category), bytes_(bytes) {
  message_ = "out of memory: " + std::to_string(bytes) + " bytes (" +
             binary_size(static_cast<double>(bytes)) + ") of " + memory_category_name(category) +
             " could not be allocated";
}

}  // namespace lattice
