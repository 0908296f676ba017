// Host memory taken by category for the CPU engine (docs/design-notes.md#out-of-memory): an
// allocation that fails throws OutOfMemory naming its category and size, which train() turns
// into a failed run with that sentence instead of std::terminate. Exceptions stay inside the
// engine. Non-goals: the kernels' small per-call temporaries; allocations inside OpenMP regions
// (an exception must not leave one: catch it there, as GptModel::init_weights does).
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/memory_category.h"

namespace lattice {

class OutOfMemory : public std::exception {
 public:
  OutOfMemory(MemoryCategory category, size_t bytes);
  MemoryCategory category() const { return category_; }
  size_t bytes() const { return bytes_; }
  // "out of memory: 4033134592 bytes (3.76 GiB) of weights could not be allocated"
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  MemoryCategory category_;
  size_t bytes_;
  std::string message_;
};

// "512.0 MiB", "3.76 GiB", "48.07 TiB": binary units, as `lattice plan` prints its estimate.
std::string binary_size(double bytes);

// n elements of T in bytes, saturated at SIZE_MAX (a request that large fails anyway).
template <typename T>
size_t bytes_of(size_t n) {
  size_t bytes = 0;
  return __builtin_mul_overflow(n, sizeof(T), &bytes) ? static_cast<size_t>(-1) : bytes;
}

// v = n copies of `value`, or OutOfMemory naming `category` and n * sizeof(T) bytes.
template <typename T>
void host_assign(std::vector<T>& v, size_t n, MemoryCategory category, const T& value = T()) {
  try {
    v.assign(n, value);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(category, bytes_of<T>(n));
  } catch (const std::length_error&) {  // more than the vector can index
    throw OutOfMemory(category, bytes_of<T>(n));
  }
}

// v grown to at least n elements (resize), or OutOfMemory as host_assign.
template <typename T>
void host_grow(std::vector<T>& v, size_t n, MemoryCategory category) {
  if (v.size() >= n) return;
  try {
    v.resize(n);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(category, bytes_of<T>(n));
  } catch (const std::length_error&) {
    throw OutOfMemory(category, bytes_of<T>(n));
  }
}

}  // namespace lattice
