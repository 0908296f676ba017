#!/usr/bin/env bash
# The README's two commands in one script, for a fresh Debian 12 / Ubuntu machine:
#   installers/setup.sh run    install what is missing, build, train the embedded demo
#   installers/setup.sh test   install what is missing, build everything, run every test
# Extra arguments after `run` go to `lattice demo` (e.g. --train-iters 50).
set -euo pipefail

mode="${1:-run}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="$(nproc 2>/dev/null || echo 2)"

if [[ "$mode" == test ]]; then
  bash installers/install-deps.sh --tests
  bash installers/fetch-gpt2-vocab.sh  # GPT-2's own vocabulary, for the tokenizer tests
else
  bash installers/install-deps.sh
fi
cmake --preset release >/dev/null
case "$mode" in
  run)
    cmake --build --preset release --target lattice -j "$jobs"
    exec build/release/lattice demo "$@"
    ;;
  test)
    cmake --build --preset release -j "$jobs"
    # Tests leave OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE as the machine sets them.
    exec ctest --preset release --output-on-failure
    ;;
  *)
    echo "usage: installers/setup.sh run|test" >&2
    exit 2
    ;;
esac
