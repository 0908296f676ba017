// Whole-file byte helpers for tests that write, corrupt and compare files.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace lattice::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::ssize(bytes));
}

}  // namespace lattice::testing
