#!/usr/bin/env bash
# The GPU check from tests/gpu/pack.sh's archive, on a machine with an NVIDIA GPU and its driver
# and CUDA 13's cuBLASLt (nothing else installed): the op parity tests, the attention and
# op-list tests and test_gpu_training; `lattice train --device cuda` of a tiny model in fp32,
# bf16, fp16, with full recomputation and with MoE layers (fp32, bf16) beside the CPU engine's
# runs; 2 ranks sharing the GPU in TP 2, CP 2, EP 2 and DP 2 beside the CPU's (the archive's
# Open MPI, device collectives through host memory); and of GPT-2 355M with
# --profile; the op benchmark; lattice-bench-train-gpu beside PyTorch bf16 training of the
# same models (where a python3 with a CUDA-enabled torch is found). Each step under its own
# timeout; about 90 s on one H200. Logs and the run store go to $LATTICE_GPU_OUT (default
# ./gpu-check-out). Exit status: 0 every test passed, 1 a failure, 77 no GPU.
# Usage: tests/gpu/run_packed.sh archive [--no-torch]
set -uo pipefail
archive=$(realpath "${1:?usage: tests/gpu/run_packed.sh archive [--no-torch]}")
out=$(realpath -m "${LATTICE_GPU_OUT:-gpu-check-out}")
mkdir -p "$out"
start=$(date +%s)
say() { printf '[gpu-check %4ds] %s\n' $(($(date +%s) - start)) "$*"; }
nvidia-smi -L >/dev/null 2>&1 || { say "no NVIDIA GPU visible (nvidia-smi -L failed)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
tar -xJf "$archive" -C "$dir" || exit 1
B=$dir/bin
cublas=$(ldconfig -p | grep -o '/.*libcublasLt.so.13$' | head -1)
[[ -z "$cublas" ]] && cublas=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$dir/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for b in "$B"/*; do ldd "$b" 2>/dev/null | grep "not found" | sed "s|^|$(basename "$b"): |"; done
export QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=8
failed=0
for t in test_cuda_ops test_cuda_attention test_cuda_op_list test_gpu_training; do
  timeout 120 "$B/$t" >"$out/$t.log" 2>&1
  rc=$?
  [[ $rc != 0 ]] && failed=1
  say "$t: $(grep -E '^Totals' "$out/$t.log" || echo "exit $rc") "
  grep -E "^FAIL|   Loc:" "$out/$t.log" | head -10
done
tiny=(--mock-data --vocab-size 1000 --num-layers 2 --hidden-size 256 --num-attention-heads 4
      --seq-length 128 --micro-batch-size 4 --global-batch-size 8 --train-iters 8
      --log-interval 1 --lr 1e-3 --eval-iters 0 --db "$out/runs.sqlite")
recompute=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
moe=(--num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 0.01)
for run in "cpu-fp32" "cuda-fp32 --device cuda" "cuda-bf16 --device cuda --bf16 --profile" \
           "cuda-fp16 --device cuda --fp16" "cuda-recompute --device cuda ${recompute[*]}" \
           "cpu-moe ${moe[*]}" "cuda-moe --device cuda ${moe[*]}" \
           "cuda-moe-bf16 --device cuda --bf16 ${moe[*]}"; do
  read -r name flags <<<"$run"
  # shellcheck disable=SC2086
  timeout 60 "$B/lattice" train "${tiny[@]}" $flags --run-name "$name" >"$out/$name.log" 2>&1
  rc=$?
  [[ $rc != 0 ]] && failed=1
  say "lattice train $name: exit $rc, $(grep -oE 'iteration +8/ +8 .*lm loss: [0-9.E+-]+' "$out/$name.log" | grep -oE 'lm loss: [0-9.E+-]+')"
done
# Two ranks on the one GPU (docs/gpu.md "Ranks that share a GPU"): TP 2 with sequence
# parallelism, CP 2, EP 2 and DP 2 with the distributed optimizer, device collectives through
# host memory (LATTICE_DEVICE_COMM=host), each beside the CPU engine's run of the same layout;
# the last losses must agree within 1 %.
if [[ -x "$dir/ompi/bin/mpirun" ]]; then
  export OPAL_PREFIX="$dir/ompi" PATH="$dir/ompi/bin:$PATH" LATTICE_DEVICE_COMM=host
  export OMPI_MCA_mca_base_param_files="$dir/ompi/etc/openmpi-mca-params.conf"
  export OMPI_MCA_orte_default_hostfile="$dir/ompi/etc/openmpi-default-hostfile"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  two=(mpirun --oversubscribe --bind-to none -n 2 -x LD_LIBRARY_PATH -x OPAL_PREFIX
       -x LATTICE_DEVICE_COMM -x QT_QPA_PLATFORM -x OMP_NUM_THREADS=4)
  last_loss() { grep -oE 'iteration +8/ +8 .*lm loss: [0-9.E+-]+' "$1" | grep -oE '[0-9.E+-]+$'; }
  for run in "tp2 --tensor-model-parallel-size 2 --sequence-parallel" \
             "cp2 --context-parallel-size 2 --attention-dropout 0" \
             "ep2 --num-experts 4 --moe-router-topk 2 --expert-model-parallel-size 2" \
             "dp2 --use-distributed-optimizer"; do
    read -r name flags <<<"$run"
    for device in cpu cuda; do
      # shellcheck disable=SC2086
      timeout 120 "${two[@]}" "$B/lattice" train "${tiny[@]}" --device $device $flags \
        --run-name "$device-$name" >"$out/$device-$name.log" 2>&1 || failed=1
    done
    cpu=$(last_loss "$out/cpu-$name.log") cuda=$(last_loss "$out/cuda-$name.log")
    verdict=$(awk -v a="${cpu:-nan}" -v b="${cuda:-nan}" 'BEGIN {
      d = a - b; if (d < 0) d = -d; print (a > 0 && d <= 0.01 * a) ? "agree" : "DIFFER" }')
    [[ $verdict == agree ]] || failed=1
    say "2 ranks on one GPU, $name: lm loss cpu ${cpu:-none}, cuda ${cuda:-none}: $verdict"
  done
  unset LATTICE_DEVICE_COMM
else
  say "no Open MPI in the archive: the runs of 2 ranks on one GPU are skipped"
fi
m355=(--mock-data --vocab-size 50256 --num-layers 24 --hidden-size 1024 --num-attention-heads 16
      --seq-length 1024 --micro-batch-size 8 --global-batch-size 8 --train-iters 6
      --log-interval 1 --eval-iters 0 --attention-dropout 0 --hidden-dropout 0)
timeout 90 "$B/lattice" train "${m355[@]}" --device cuda --bf16 --profile --db "$out/runs.sqlite" \
  --run-name cuda-355m-bf16 >"$out/profile-355m.log" 2>&1 || failed=1
grep -vE "^ \[" "$out/profile-355m.log" | tail -20
timeout 90 "$B/lattice-bench-cuda-ops" --quick >"$out/bench-ops.log" 2>&1 || failed=1
grep -E "^\|" "$out/bench-ops.log"
timeout 150 "$B/lattice-bench-train-gpu" --steps 4 >"$out/bench-train.log" 2>&1 || failed=1
grep -E "^\|" "$out/bench-train.log"
if [[ "${2:-}" != "--no-torch" ]] && timeout 60 python3 -c \
    "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  timeout 150 python3 "$B/train_torch_gpu.py" --steps 4 >"$out/torch.log" 2>&1
  python3 "$B/side_by_side.py" "$out/bench-train.log" "$out/torch.log"
fi
say "done; logs in $out"
exit $failed
