#!/usr/bin/env bash
# Config A trained on 2 ranks (TP 2, PP 2, DP 2; 1 thread each) against 1 rank x 2 threads on
# this machine (PP 2 also with 3 layers on the first stage and 1 + the LM head on the last),
# interleaved over rounds (the machine is shared and noisy; the best round of
# each counts). Prints tokens/s and the ratio to 1 rank, then each layout's per-rank phase
# times and bytes per step (measured / analytical). Usage: parallel_vs_single.sh [BUILD_DIR]
# [ROUNDS]. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every side (docs/benchmarks.md).
set -euo pipefail
build=${1:-build/release}
rounds=${2:-2}
bench="$build/tests/bench/lattice-bench-parallel"
source "$(dirname "${BASH_SOURCE[0]}")/machine_line.sh"
machine=$(machine_line "$build/tests/bench")
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun --oversubscribe --bind-to none -n 2)
declare -A best line
run() {  # label, command...
  local label=$1; shift
  local out tps
  out=$("$@" --label "$label" 2>/dev/null | grep '^RESULT') || { echo "$label failed" >&2; exit 1; }
  tps=$(sed -E 's/.*tokens\/s ([0-9]+).*/\1/' <<<"$out")
  if [[ -z ${best[$label]:-} || $tps -gt ${best[$label]} ]]; then best[$label]=$tps; line[$label]=$out; fi
}
for ((r = 1; r <= rounds; r++)); do
  run "1 rank x 2 threads" "$bench" --threads 2
  run "DP 2" "${mpi[@]}" "$bench" --threads 1
  run "PP 2" "${mpi[@]}" "$bench" --threads 1 --pp 2
  run "PP 2, 3+1 layers" "${mpi[@]}" "$bench" --threads 1 --pp 2 --first-stage-layers 3
  run "TP 2" "${mpi[@]}" "$bench" --threads 1 --tp 2
done
base=${best["1 rank x 2 threads"]}
echo "$machine"
printf '| layout | tokens/s (best of %d) | vs 1 rank |\n|---|---:|---:|\n' "$rounds"
for label in "1 rank x 2 threads" "DP 2" "PP 2" "PP 2, 3+1 layers" "TP 2"; do
  awk -v l="$label" -v t="${best[$label]}" -v b="$base" \
    'BEGIN { printf "| %s | %d | %.2f |\n", l, t, t / b }'
done
echo
for label in "1 rank x 2 threads" "DP 2" "PP 2" "PP 2, 3+1 layers" "TP 2"; do
  echo "${line[$label]}" | sed -E 's/^RESULT //; s/ \| /\n    /g'
done
