// CRC-32C for checkpoint files. x86-64 uses the SSE 4.2 `crc32` instruction whenever the CPU has
// it, chosen at run time, so a portable build (LATTICE_NATIVE=OFF, packages) is as fast as a
// -march=native one; elsewhere slicing-by-8 tables (eight bytes per step instead of one).
#include "checkpoint/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define LATTICE_CRC32C_X86 1
#endif

namespace lattice {

namespace {
constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

// kTables[0] is the byte-at-a-time table; kTables[k][b] is the CRC of byte b followed by k zero
// bytes, so eight table lookups advance the CRC over eight bytes at once.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (size_t k = 1; k < 8; k++) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  return t;
}
constexpr Tables kTables = make_tables();

// Little-endian hosts only, as the checkpoint format (safetensors.cpp asserts it).
uint32_t crc32c_tables(uint32_t c, const unsigned char* p, size_t size) {
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= c;
    c = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^ kTables[5][(word >> 16) & 0xFF] ^
        kTables[4][(word >> 24) & 0xFF] ^ kTables[3][(word >> 32) & 0xFF] ^
        kTables[2][(word >> 40) & 0xFF] ^ kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
  }
  for (; size > 0; size--, p++) c = kTables[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(LATTICE_CRC32C_X86)
// Note [three-stream CRC]: one `crc32` chain is bound by the instruction's 3-cycle latency (about
// 8 bytes per 3 cycles). Three independent chains over three adjacent blocks of kLong (or
// kShort) bytes keep the unit busy; the chains are then joined with the linear "shift"
// operator: the register after block A then B is shift_len(B)(crc(A)) ^ crc_from_zero(B).
// Shift tables: shift(x) for x = byte << 8k, k = 0..3, so shift is four lookups (Mark Adler's
// crc32c.c does the same).
constexpr size_t kLong = 8192, kShort = 256;
using ShiftTable = std::array<std::array<uint32_t, 256>, 4>;

__attribute__((target("sse4.2"))) ShiftTable make_shift_table(size_t zeros) {
  ShiftTable t{};
  for (uint32_t k = 0; k < 4; k++)
    for (uint32_t b = 0; b < 256; b++) {
      uint64_t x = uint64_t{b} << (8 * k);
      for (size_t i = 0; i < zeros; i += 8) x = _mm_crc32_u64(x, 0);
      t[k][b] = static_cast<uint32_t>(x);
    }
  return t;
}

uint32_t shift(const ShiftTable& t, uint32_t c) {
  return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
}

__attribute__((target("sse4.2"))) uint64_t load64(const unsigned char* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

// Three chains over [p, p + block), [p + block, p + 2 block), [p + 2 block, p + 3 block).
template <size_t block>
__attribute__((target("sse4.2"))) uint64_t three_blocks(uint64_t c0, const unsigned char* p,
                                                        const ShiftTable& t) {
  uint64_t c1 = 0, c2 = 0;
  for (size_t i = 0; i < block; i += 8) {
    c0 = _mm_crc32_u64(c0, load64(p + i));
    c1 = _mm_crc32_u64(c1, load64(p + block + i));
    c2 = _mm_crc32_u64(c2, load64(p + 2 * block + i));
  }
  c0 = shift(t, static_cast<uint32_t>(c0)) ^ c1;
  return shift(t, static_cast<uint32_t>(c0)) ^ c2;
}

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t c, const unsigned char* p,
                                                        size_t size) {
  static const ShiftTable long_shift = make_shift_table(kLong);
  static const ShiftTable short_shift = make_shift_table(kShort);
  uint64_t c64 = c;
  for (; size >= 3 * kLong; size -= 3 * kLong, p += 3 * kLong)
    c64 = three_blocks<kLong>(c64, p, long_shift);
  for (; size >= 3 * kShort; size -= 3 * kShort, p += 3 * kShort)
    c64 = three_blocks<kShort>(c64, p, short_shift);
  for (; size >= 8; size -= 8, p += 8) c64 = _mm_crc32_u64(c64, load64(p));
  c = static_cast<uint32_t>(c64);
  for (; size > 0; size--, p++) c = _mm_crc32_u8(c, *p);
  return c;
}

bool have_sse42() {
  static const bool have = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2"));
  return have;
}
#endif

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t size) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
#if defined(LATTICE_CRC32C_X86)
  if (have_sse42()) return ~crc32c_sse42(~crc, p, size);
#endif
  return ~crc32c_tables(~crc, p, size);
}

namespace crc32c_internal {
uint32_t portable(uint32_t crc, const void* data, size_t size) {
  return ~crc32c_tables(~crc, static_cast<const unsigned char*>(data), size);
}
}  // namespace crc32c_internal

}  // namespace lattice
