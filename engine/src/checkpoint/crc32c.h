// CRC-32C (Castagnoli), the checksum stored for every checkpoint file: the SSE 4.2 instruction
// where the CPU has it (checked at run time), slicing-by-8 tables otherwise; both give the same
// value. Thread-safe; no state besides the running value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattice {

// Extends `crc` (0 to start) over `size` bytes: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

namespace crc32c_internal {
// The table-driven path alone, whatever the CPU (for tests that compare the two).
uint32_t portable(uint32_t crc, const void* data, size_t size);
}  // namespace crc32c_internal

}  // namespace lattice
