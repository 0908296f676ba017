#!/usr/bin/env bash
# Checkpoint save and load throughput for config B (12 layers, hidden 768, vocab 50304) on
# 2 ranks with the distributed optimizer (each rank writes its shard) and on 1 rank, against
# this disk's sequential write rate measured with dd (same size, fsync included) in the same
# rounds. dd runs twice per round: through the page cache (conv=fsync) and with O_DIRECT
# (oflag=direct conv=fsync, the way the save writes); the reference is the faster of the two
# medians, so a slow page cache cannot flatter the ratio. ROUNDS rounds (default 3), each
# measuring everything once, interleaved; the table gives medians (and the range).
# Usage: [ROUNDS=N] checkpoint_vs_dd.sh [BUILD_DIR] [SCRATCH_DIR]. Figures go to
# docs/benchmarks.md "Checkpoints".
set -euo pipefail
build=${1:-build/release}
scratch=${2:-$(mktemp -d)}
rounds=${ROUNDS:-3}
mkdir -p "$scratch"
lattice="$build/lattice"
source "$(dirname "${BASH_SOURCE[0]}")/machine_line.sh"
machine=$(machine_line "$build/tests/bench")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(--mock-data --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256
       --vocab-size 50303 --micro-batch-size 1 --global-batch-size 2 --train-iters 1
       --eval-iters 0 --db "$scratch/runs.sqlite")
# "(1486.7 MB in 3.89 s, 383 MB/s)" after `what` -> "1486.7 3.89"
mb_s() { sed -nE "s/.*$1[^(]*\(([0-9.]+) MB in ([0-9.]+) s, [0-9]+ MB\/s\).*/\1 \2/p"; }
# dd's last line "... bytes (...) copied, 3.6 s, 426 MB/s" -> "426"; GB/s converted.
dd_rate() {
  tail -1 | sed -nE 's/.*, ([0-9.]+) (M|G)B\/s$/\1 \2/p' |
    awk '{ printf "%.0f\n", $2 == "G" ? $1 * 1000 : $1 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo "–" hi }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f %%", 100 * a / b }'; }

declare -a save2 load2 save1 save2_r0 save2_r1 dd_cached dd_direct
for ((r = 1; r <= rounds; r++)); do
  rm -rf "$scratch/ck2" "$scratch/ck1"
  out=$(mpirun --oversubscribe -n 2 "$lattice" train "${model[@]}" --threads 1 \
        --use-distributed-optimizer --save "$scratch/ck2" --run-name "save2-$$-$r")
  read -r mb s <<<"$(mb_s "saved checkpoint" <<<"$out")"
  save2+=("$(awk -v m="$mb" -v s="$s" 'BEGIN { print m / s }')")
  total_mb=$mb
  for k in 0 1; do
    f="$scratch/ck2/iter_0000001/rank_0000$k.safetensors"
    rank_mb[$k]=$(awk -v b="$(stat -c %s "$f")" 'BEGIN { printf "%.0f", b / 1e6 }')
  done
  save2_r0+=("$(awk -v m="${rank_mb[0]}" -v s="$s" 'BEGIN { print m / s }')")
  save2_r1+=("$(awk -v m="${rank_mb[1]}" -v s="$s" 'BEGIN { print m / s }')")
  mb_mib=$(du -sm "$scratch/ck2" | cut -f1)
  dd_cached+=("$(dd if=/dev/zero of="$scratch/dd.bin" bs=1M count="$mb_mib" conv=fsync 2>&1 |
                 dd_rate)")
  rm -f "$scratch/dd.bin"
  dd_direct+=("$(dd if=/dev/zero of="$scratch/dd.bin" bs=16M count=$(((mb_mib + 15) / 16)) \
                 oflag=direct conv=fsync 2>&1 | dd_rate)")
  rm -f "$scratch/dd.bin"
  out=$(mpirun --oversubscribe -n 2 "$lattice" train "${model[@]}" --threads 1 \
        --use-distributed-optimizer --load "$scratch/ck2" --train-iters 2 --run-name "load2-$$-$r")
  read -r mb s <<<"$(mb_s "loaded" <<<"$out")"
  load2+=("$(awk -v m="$mb" -v s="$s" 'BEGIN { print m / s }')")
  out=$("$lattice" train "${model[@]}" --threads 2 --save "$scratch/ck1" --run-name "save1-$$-$r")
  read -r mb s <<<"$(mb_s "saved checkpoint" <<<"$out")"
  save1+=("$(awk -v m="$mb" -v s="$s" 'BEGIN { print m / s }')")
  echo "round $r: save2 ${save2[-1]} (rank 0 ${save2_r0[-1]}, rank 1 ${save2_r1[-1]})," \
       "load2 ${load2[-1]}, save1 ${save1[-1]}, dd cached ${dd_cached[-1]}," \
       "dd direct ${dd_direct[-1]} MB/s (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
done

m() { printf '%s\n' "$@" | median | awk '{ printf "%.0f", $1 }'; }
rg() { printf '%s\n' "$@" | range | awk -F'–' '{ printf "%.0f–%.0f", $1, $2 }'; }
dd_ref=$(m "${dd_cached[@]}")
[[ $(m "${dd_direct[@]}") -gt $dd_ref ]] && dd_ref=$(m "${dd_direct[@]}")
echo "$machine"
echo "config B, ${total_mb} MB in all; $rounds rounds; medians (range) in MB/s"
echo
echo "| what | MB/s | ratio to dd |"
echo "|---|---|---|"
echo "| save, 2 ranks (distributed optimizer), total | $(m "${save2[@]}") ($(rg "${save2[@]}")) | $(ratio "$(m "${save2[@]}")" "$dd_ref") |"
echo "| save, 2 ranks: rank 0 (${rank_mb[0]} MB) / rank 1 (${rank_mb[1]} MB) | $(m "${save2_r0[@]}") / $(m "${save2_r1[@]}") | |"
echo "| save, 1 rank | $(m "${save1[@]}") ($(rg "${save1[@]}")) | $(ratio "$(m "${save1[@]}")" "$dd_ref") |"
echo "| load, 2 ranks, total | $(m "${load2[@]}") ($(rg "${load2[@]}")) | |"
echo "| dd, ${mb_mib} MiB, page cache + fsync | $(m "${dd_cached[@]}") ($(rg "${dd_cached[@]}")) | |"
echo "| dd, ${mb_mib} MiB, O_DIRECT + fsync | $(m "${dd_direct[@]}") ($(rg "${dd_direct[@]}")) | |"
