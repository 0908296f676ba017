#!/usr/bin/env bash
# The README's two commands in one script, for a fresh Debian 12 / Ubuntu machine:
#   installers/setup.sh run    install what is missing, build, train the embedded demo: in the
#                              Studio when there is a display, headless otherwise
#   installers/setup.sh test   install what is missing, build everything, run every test
# Extra arguments after `run` are `lattice train` flags for the demo (e.g. --train-iters 50).
# LATTICE_HEADLESS=1 runs the demo without the Studio even where there is a display.
set -euo pipefail

mode="${1:-run}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="$(nproc 2>/dev/null || echo 2)"

if [[ "$mode" == test ]]; then
  bash installers/install-deps.sh --tests
  bash installers/fetch-gpt2-vocab.sh  # GPT-2's own vocabulary, for the tokenizer tests
  bash installers/fetch-hf-tokenizers.sh  # Llama 3's and Qwen 3's, and Hugging Face's reference
  bash installers/fetch-openai-client.sh  # OpenAI's Node client, for the serving test
else
  bash installers/install-deps.sh
fi
cmake --preset release >/dev/null
case "$mode" in
  run)
    studio=build/release/lattice-studio
    if [[ -z "${LATTICE_HEADLESS:-}" && ( -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ) ]]; then
      cmake --build --preset release --target lattice lattice-studio -j "$jobs"
    else
      cmake --build --preset release --target lattice -j "$jobs"
    fi
    if [[ -x "$studio" && -z "${LATTICE_HEADLESS:-}" &&
          ( -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ) ]]; then
      # The demo plan on this machine, the demo corpus, the default run store; started at once.
      # The Studio exits with status 1 when it cannot open the display: then run headless.
      if "$studio" --demo ${*:+--flags "$*"}; then exit 0; fi
      echo "setup: the Studio could not start; running the demo headless" >&2
    fi
    exec build/release/lattice demo "$@"
    ;;
  test)
    cmake --build --preset release -j "$jobs"
    # The libFuzzer targets are compiled (not run: tests/fuzz/README.md runs them), so that they
    # keep building; --tests installs clang-14 with libFuzzer, a machine without it skips them.
    fuzzer_runtime="$(clang++-14 -print-resource-dir 2>/dev/null || true)/lib/linux/libclang_rt.fuzzer-$(uname -m).a"
    if [[ -f "$fuzzer_runtime" ]]; then
      bash tests/fuzz/build.sh build/fuzz "$jobs"
    else
      echo "setup: no clang-14 with libFuzzer ($fuzzer_runtime): the fuzz targets are not built" >&2
    fi
    # Tests leave OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE as the machine sets them.
    exec ctest --preset release --output-on-failure
    ;;
  *)
    echo "usage: installers/setup.sh run|test" >&2
    exit 2
    ;;
esac
