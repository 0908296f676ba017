#!/usr/bin/env bash
# Configures and builds the three libFuzzer targets (tests/fuzz/README.md) in their own build
# directory with clang-14: the commands the README documents, in one place for it and for CI
# (installers/setup.sh test runs this when clang's libFuzzer is installed).
# Usage: tests/fuzz/build.sh [build-dir (default build/fuzz)] [jobs (default nproc)]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-build/fuzz}"
jobs="${2:-$(nproc 2>/dev/null || echo 2)}"
cd "$root"
CC=clang-14 CXX=clang++-14 cmake -B "$dir" -DLATTICE_FUZZ=ON -DLATTICE_BUILD_TESTS=OFF \
  -DLATTICE_BUILD_STUDIO=OFF -DLATTICE_WITH_CUDA=OFF -DLATTICE_WITH_MPI=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" --target fuzz_indexed_dataset fuzz_jsonl fuzz_checkpoint -j "$jobs"
