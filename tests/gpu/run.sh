#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and the CUDA toolkit (nvcc, cuBLASLt, NCCL),
# configure build/gpu with CUDA on, build only the CUDA parity tests and the CUDA benchmark,
# run `ctest -L cuda`, run the benchmark, and print a short table. Works from a fresh copy of
# the tree (no build outputs needed) and stays under 8 minutes on one H200 with 16 cores: the
# device code is built for this machine's GPU only (CUDA_ARCHITECTURES native), the Qt
# applications are not built (the engine only for NcclComm's test, where MPI and NCCL are
# found), and every step runs under its own timeout.
# Usage: tests/gpu/run.sh [--quick]     (exit status: 0 all passed, 1 a failure, 77 no GPU)
set -uo pipefail

if [[ -z "${LATTICE_GPU_RUN_INNER:-}" ]]; then  # guard the whole run
  LATTICE_GPU_RUN_INNER=1 exec timeout --kill-after=10 "${LATTICE_GPU_CHECK_TIMEOUT:-470}" "$0" "$@"
fi

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
build="$root/build/gpu"
jobs=$(nproc)
quick=""
[[ "${1:-}" == "--quick" ]] && quick="--quick"
start=$(date +%s)
say() { printf '[gpu-check %4ds] %s\n' $(($(date +%s) - start)) "$*"; }

export PATH="/usr/local/cuda/bin:$PATH"
if ! command -v nvcc >/dev/null; then
  say "nvcc not found (looked in PATH and /usr/local/cuda/bin): install the CUDA toolkit"
  exit 1
fi
# LATTICE_GPU_CHECK_DRY_RUN=1 runs every step on a machine without a GPU (the tests then
# report SKIPPED): a check of this script itself. LATTICE_GPU_CHECK_ARCH overrides "native";
# LATTICE_GPU_CHECK_TIMEOUT (470 s) and LATTICE_GPU_CHECK_BUILD_TIMEOUT (300 s) the limits,
# for slow machines (a 2-core CI machine needs ~10 min for the build).
arch=${LATTICE_GPU_CHECK_ARCH:-native}
if [[ -n "${LATTICE_GPU_CHECK_DRY_RUN:-}" ]]; then
  say "dry run: no GPU needed, device code for $arch"
elif ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no NVIDIA GPU visible (nvidia-smi -L failed): nothing to check here"
  exit 77
else
  nvidia-smi -L
fi
nvcc --version | tail -1

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
say "configure $build (CUDA on, architecture $arch)"
if ! timeout 150 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLATTICE_WITH_CUDA=ON -DLATTICE_BUILD_STUDIO=OFF -DLATTICE_CUDA_ARCHITECTURES="$arch" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" "${launcher[@]}" >"$build/gpu-check-configure.log" 2>&1; then
  tail -30 "$build/gpu-check-configure.log"
  say "configure failed (log: $build/gpu-check-configure.log)"
  exit 1
fi

targets=(test_cuda_ops test_cuda_attention lattice-bench-cuda-ops)
# NcclComm's test exists where MPI and NCCL were found (it builds the engine too).
# (grep without -q reads all of its input: with pipefail, -q's early exit would fail the pipe)
if cmake --build "$build" --target help 2>/dev/null | grep test_nccl_comm_worker >/dev/null; then
  targets+=(test_nccl_comm_worker)
fi
say "build ${targets[*]} with -j$jobs"
if ! timeout "${LATTICE_GPU_CHECK_BUILD_TIMEOUT:-300}" cmake --build "$build" -j "$jobs" \
    --target "${targets[@]}" >"$build/gpu-check-build.log" 2>&1; then
  grep -E "error|Error" "$build/gpu-check-build.log" | head -30
  say "build failed (log: $build/gpu-check-build.log)"
  exit 1
fi

say "ctest -L cuda"
timeout 240 ctest --test-dir "$build" -L cuda -V --timeout 200 \
  >"$build/gpu-check-ctest.log" 2>&1
ctest_rc=$?
grep -E "^([0-9]+: )?(PASS|FAIL!|SKIP|QWARN|QINFO|   Loc:|Totals:|rank [0-9]+: |no CUDA)" \
  "$build/gpu-check-ctest.log" \
  | grep -vE "::(initTestCase|cleanupTestCase)\(\)$" || true
if [[ -z "${LATTICE_GPU_CHECK_DRY_RUN:-}" ]] && grep -q "no CUDA device" "$build/gpu-check-ctest.log"; then
  say "the tests saw no CUDA device although nvidia-smi did: check the driver / CUDA_VISIBLE_DEVICES"
  ctest_rc=1
fi

say "benchmark"
timeout 120 "$build/tests/bench/lattice-bench-cuda-ops" $quick
bench_rc=$?
bench_result=$([[ $bench_rc == 0 ]] && echo ran || echo "FAILED ($bench_rc)")
if [[ -n "${LATTICE_GPU_CHECK_DRY_RUN:-}" && $bench_rc == 77 ]]; then
  bench_rc=0 bench_result="no GPU"
fi

echo
echo "| check                                 | result  |"
echo "|---------------------------------------|---------|"
for test in test_cuda_ops test_cuda_attention test_nccl_comm; do
  line=$(grep -E "Test +#[0-9]+: $test " "$build/gpu-check-ctest.log" | head -1)
  result="not run"
  [[ "$line" == *Passed* ]] && result="passed"
  [[ "$line" == *Failed* || "$line" == *Timeout* || "$line" == *Exception* ]] && result="FAILED"
  [[ "$line" == *Skipped* || "$line" == *"Not Run"* ]] && result="SKIPPED"
  printf '| %-37s | %-7s |\n' "$test (ctest -L cuda)" "$result"
done
printf '| %-37s | %-7s |\n' "lattice-bench-cuda-ops" "$bench_result"
say "done"
[[ $ctest_rc == 0 && $bench_rc == 0 ]] || exit 1
