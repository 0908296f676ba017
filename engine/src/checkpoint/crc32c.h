// CRC-32C (Castagnoli), the checksum stored for every checkpoint file: hardware-accelerated
// with SSE 4.2 where the build allows it, table-driven otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattice {

// Extends `crc` (0 to start) over `size` bytes.
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

}  // namespace lattice
