// OutOfMemory's sentence (host_memory.h).
#include "core/host_memory.h"

#include <cstdio>

namespace lattice {

OutOfMemory::OutOfMemory(MemoryCategory category, size_t bytes)
    : category_(category), bytes_(bytes) {
  char size[64];
  // Binary units, as `lattice plan` prints its estimate.
  if (bytes >= (size_t{1} << 30))
    std::snprintf(size, sizeof size, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  else
    std::snprintf(size, sizeof size, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  message_ = "out of memory: " + std::to_string(bytes) + " bytes (" + size + ") of " +
             memory_category_name(category) + " could not be allocated";
}

}  // namespace lattice
