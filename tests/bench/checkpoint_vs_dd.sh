#!/usr/bin/env bash
# Checkpoint save and load throughput for config B (12 layers, hidden 768, vocab 50304) on
# 2 ranks with the distributed optimizer (each rank writes its shard), against this disk's
# sequential write rate measured with dd (same size, fsync) in the same run, and a 1-rank save.
# Usage: checkpoint_vs_dd.sh [BUILD_DIR] [SCRATCH_DIR]. Figures go to docs/benchmarks.md.
set -euo pipefail
build=${1:-build/release}
scratch=${2:-$(mktemp -d)}
mkdir -p "$scratch"
lattice="$build/lattice"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(--mock-data --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256
       --vocab-size 50303 --micro-batch-size 1 --global-batch-size 2 --train-iters 1
       --eval-iters 0 --db "$scratch/runs.sqlite")
rate() { sed -nE "s/.*$1[^(]*\(([0-9.]+) MB in ([0-9.]+) s, ([0-9]+) MB\/s\).*/\1 MB in \2 s = \3 MB\/s/p"; }
save2=$(mpirun --oversubscribe -n 2 "$lattice" train "${model[@]}" --threads 1 \
        --use-distributed-optimizer --save "$scratch/ck2" --run-name "save2-$$" | rate "saved checkpoint")
load2=$(mpirun --oversubscribe -n 2 "$lattice" train "${model[@]}" --threads 1 \
        --use-distributed-optimizer --load "$scratch/ck2" --train-iters 2 --run-name "load2-$$" | rate "loaded")
save1=$("$lattice" train "${model[@]}" --threads 2 --save "$scratch/ck1" --run-name "save1-$$" | rate "saved checkpoint")
mb=$(du -sm "$scratch/ck2" | cut -f1)
dd_line=$(dd if=/dev/zero of="$scratch/dd.bin" bs=1M count="$mb" conv=fsync 2>&1 | tail -1)
rm -f "$scratch/dd.bin"
echo "| what | figure |"
echo "|---|---|"
echo "| save, 2 ranks (distributed optimizer) | $save2 |"
echo "| load, 2 ranks | $load2 |"
echo "| save, 1 rank | $save1 |"
echo "| dd, ${mb} MB with fsync | ${dd_line##*, } |"
