#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and the CUDA toolkit (nvcc, cuBLASLt, NCCL),
# configure build/gpu with CUDA on, build only the CUDA tests (op parity, the training step
# against the CPU engine and the fp16 loss-scaler path) and the benchmarks, run
# `ctest -L cuda`, the op benchmark, the training benchmark (GPT-2 124M / 355M / 1.3B in bf16)
# beside PyTorch bf16 training of the same models (tests/bench/train_torch_gpu.py, where a
# CUDA-enabled PyTorch is installed), and print short tables. Works from a fresh copy of
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
build="${LATTICE_GPU_CHECK_BUILD_DIR:-$root/build/gpu}"  # override: reuse another build tree
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
# LATTICE_GPU_CHECK_BUILD_DIR build/gpu, LATTICE_GPU_CHECK_TIMEOUT (470 s) and
# LATTICE_GPU_CHECK_BUILD_TIMEOUT (300 s) the limits,
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

targets=(test_cuda_ops test_cuda_attention test_cuda_op_list test_gpu_training
         lattice-bench-cuda-ops lattice-bench-train-gpu)
# NcclComm's test exists where MPI and NCCL were found (it builds the engine too); the
# tensor-parallel training test where MPI was found (it skips itself below 2 GPUs).
# (grep without -q reads all of its input: with pipefail, -q's early exit would fail the pipe)
if cmake --build "$build" --target help 2>/dev/null | grep test_nccl_comm_worker >/dev/null; then
  targets+=(test_nccl_comm_worker)
fi
if cmake --build "$build" --target help 2>/dev/null | grep test_gpu_tensor_parallel >/dev/null; then
  targets+=(test_gpu_tensor_parallel)
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
grep -E "^([0-9]+: )?(PASS|FAIL!|SKIP|QWARN|QINFO|   Loc:|Totals:|rank [0-9]+: |no CUDA|fewer than)" \
  "$build/gpu-check-ctest.log" \
  | grep -vE "::(initTestCase|cleanupTestCase)\(\)$" || true
if [[ -z "${LATTICE_GPU_CHECK_DRY_RUN:-}" ]] && grep -q "no CUDA device" "$build/gpu-check-ctest.log"; then
  say "the tests saw no CUDA device although nvidia-smi did: check the driver / CUDA_VISIBLE_DEVICES"
  ctest_rc=1
fi

say "benchmark"
timeout 100 "$build/tests/bench/lattice-bench-cuda-ops" $quick
bench_rc=$?
bench_result=$([[ $bench_rc == 0 ]] && echo ran || echo "FAILED ($bench_rc)")
if [[ -n "${LATTICE_GPU_CHECK_DRY_RUN:-}" && $bench_rc == 77 ]]; then
  bench_rc=0 bench_result="no GPU"
fi

# Training throughput: Lattice's GPU trainer, then PyTorch on the same models. Few steps each
# (2 warm-up + 2 or 4 timed); the 1.3B model at micro-batch 4 x seq 2048.
steps=6
[[ -n "$quick" ]] && steps=4
say "training benchmark (lattice-bench-train-gpu --steps $steps)"
timeout 150 "$build/tests/bench/lattice-bench-train-gpu" --steps $steps \
  >"$build/gpu-check-train.log" 2>"$build/gpu-check-train.err"
train_rc=$?
cat "$build/gpu-check-train.log" | grep -v '^RESULT' || true
train_result=$([[ $train_rc == 0 ]] && echo ran || echo "FAILED ($train_rc)")
if [[ $train_rc != 0 ]]; then
  tail -5 "$build/gpu-check-train.err"
fi
if [[ -n "${LATTICE_GPU_CHECK_DRY_RUN:-}" && $train_rc == 77 ]]; then
  train_rc=0 train_result="no GPU"
fi
# PyTorch: the first python3 (PATH, then Debian's) whose torch sees a GPU; none is not a
# failure of this check, only an empty column.
torch_result="no CUDA PyTorch"
for py in python3 /usr/bin/python3; do
  if timeout 60 "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
      >/dev/null 2>&1; then
    say "PyTorch bf16 peer ($py tests/bench/train_torch_gpu.py --steps $steps)"
    timeout 150 "$py" "$root/tests/bench/train_torch_gpu.py" --steps $steps \
      >"$build/gpu-check-torch.log" 2>"$build/gpu-check-torch.err"
    torch_rc=$?
    torch_result=$([[ $torch_rc == 0 ]] && echo ran || echo "FAILED ($torch_rc)")
    [[ $torch_rc != 0 ]] && tail -5 "$build/gpu-check-torch.err"
    break
  fi
done
[[ "$torch_result" == "no CUDA PyTorch" ]] && say "no python3 with a CUDA-enabled torch: PyTorch column left empty"
# Side by side: tokens/s, TFLOP/s and MFU of both, and Lattice / PyTorch.
python3 "$root/tests/gpu/side_by_side.py" "$build/gpu-check-train.log" "$build/gpu-check-torch.log"

echo
echo "| check                                    | result  |"
echo "|------------------------------------------|---------|"
for test in test_cuda_ops test_cuda_attention test_cuda_op_list test_gpu_training \
    test_gpu_tensor_parallel test_nccl_comm; do
  line=$(grep -E "Test +#[0-9]+: $test " "$build/gpu-check-ctest.log" | head -1)
  result="not run"
  [[ "$line" == *Passed* ]] && result="passed"
  [[ "$line" == *Failed* || "$line" == *Timeout* || "$line" == *Exception* ]] && result="FAILED"
  [[ "$line" == *Skipped* || "$line" == *"Not Run"* ]] && result="SKIPPED"
  printf '| %-40s | %-7s |\n' "$test (ctest -L cuda)" "$result"
done
printf '| %-40s | %-7s |\n' "lattice-bench-cuda-ops" "$bench_result"
printf '| %-40s | %-7s |\n' "lattice-bench-train-gpu" "$train_result"
printf '| %-40s | %-7s |\n' "train_torch_gpu.py (PyTorch bf16)" "$torch_result"
say "done"
[[ $ctest_rc == 0 && $bench_rc == 0 && $train_rc == 0 ]] || exit 1
