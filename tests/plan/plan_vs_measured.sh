#!/usr/bin/env bash
# The planner's step estimate against training on this CPU: config A (docs/benchmarks.md) on
# 1 rank x 2 threads and on DP 2, PP 2, TP 2 (2 ranks x 1 thread) with lattice-bench-parallel,
# best of ROUNDS, next to `lattice plan --json`'s tokens/s with the best SGEMM rate measured
# between the runs, at efficiency 0.5 and at the efficiency the 1-rank run achieved. A benchmark
# (docs/benchmarks.md "Planner"), not a test. Usage: plan_vs_measured.sh [BUILD_DIR] [ROUNDS].
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every side (docs/benchmarks.md).
set -euo pipefail
build=${1:-build/release}
rounds=${2:-3}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1  # Open MPI's single-copy path stays on
bench="$build/tests/bench/lattice-bench-parallel"
model=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --vocab-size 8191 --seq-length 128
       --micro-batch-size 8 --global-batch-size 64)
mpi=(mpirun --oversubscribe --bind-to none -n 2)
labels=("1 rank x 2 threads" "DP 2" "PP 2" "TP 2")
worlds=(1 2 2 2)
bench_flags=("--threads 2" "--threads 1" "--threads 1 --pp 2" "--threads 1 --tp 2")
plan_flags=("" "" "--pipeline-model-parallel-size 2" "--tensor-model-parallel-size 2")
declare -A best
sgemm=0
for ((r = 1; r <= rounds; r++)); do
  for i in 0 1 2 3; do
    g=$("$build/lattice" plan "${model[@]}" --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["device"]["peak_flops"]/1e9)')
    sgemm=$(python3 -c "print(max($sgemm, $g))")
    if [[ ${worlds[$i]} == 1 ]]; then cmd=("$bench"); else cmd=("${mpi[@]}" "$bench"); fi
    t=$("${cmd[@]}" ${bench_flags[$i]} --label x 2>/dev/null |
        sed -nE 's/^RESULT.*tokens\/s ([0-9]+).*/\1/p')
    if [[ -z ${best[$i]:-} || $t -gt ${best[$i]} ]]; then best[$i]=$t; fi
  done
done
# Megatron's FLOPs of one config A iteration (global batch 64, padded vocabulary 8192).
flops=$(python3 -c "print(72*64*128*4*256**2*(1+128/(12*256)+8192/(12*4*256)))")
eff=$(python3 -c "print(round(${best[0]}/(64*128) * $flops / ($sgemm*1e9), 3))")
printf 'SGEMM on 2 threads (best): %.0f GFLOP/s; the 1-rank run achieves %.0f %% of it\n\n' \
  "$sgemm" "$(python3 -c "print(100*$eff)")"
printf '| layout | measured tok/s | vs 1 rank | estimate (eff 0.5) | measured / estimate | estimate (eff %s) | measured / estimate | estimate vs 1 rank |\n' "$eff"
printf '|---|---:|---:|---:|---:|---:|---:|---:|\n'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo 0 >"$tmp/base"
for i in 0 1 2 3; do
  e1=$("$build/lattice" plan --world-size "${worlds[$i]}" "${model[@]}" ${plan_flags[$i]} \
       --peak-gflops "$sgemm" --json)
  e2=$("$build/lattice" plan --world-size "${worlds[$i]}" "${model[@]}" ${plan_flags[$i]} \
       --peak-gflops "$sgemm" --efficiency "$eff" --json)
  python3 - "${labels[$i]}" "${best[$i]}" "${best[0]}" "$tmp" "$e1" "$e2" <<'PY'
import json, sys
label, measured, base, tmp = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
a, b = json.loads(sys.argv[5])["step"], json.loads(sys.argv[6])["step"]
base_est = float(open(f"{tmp}/base").read()) or b["tokens_per_second"]
open(f"{tmp}/base", "w").write(str(base_est))
terms = ", ".join(f"{k[:-2]} {1e3 * b[k]:.0f}" for k in
                  ["compute_s", "tp_comm_s", "pp_comm_s", "pp_bubble_s", "dp_comm_s", "optimizer_s"])
print(f"| {label} | {measured:,.0f} | {measured / base:.2f} | {a['tokens_per_second']:,.0f} | "
      f"{measured / a['tokens_per_second']:.2f} | {b['tokens_per_second']:,.0f} | "
      f"{measured / b['tokens_per_second']:.2f} | {b['tokens_per_second'] / base_est:.2f} |")
open(f"{tmp}/terms", "a").write(f"  {label}: {terms}\n")
PY
done
printf '\nestimate terms at the measured efficiency, ms per step:\n'
cat "$tmp/terms"
