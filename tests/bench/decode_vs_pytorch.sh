#!/usr/bin/env bash
# Decoding rate, Lattice vs PyTorch (CPU, fp32, greedy, key/value cache) on config B
# (12 layers, hidden 768, 12 heads, vocab 50257 padded to 50304, 124 M parameters) with the
# same random weights (exported by lattice-bench-decode --save-hf), the same prompts and the
# same thread count. Runs the two alternately, --rounds times per batch size, checks that both
# decode the same first tokens, and prints the medians and their ratio with the load average.
#
# Usage: tests/bench/decode_vs_pytorch.sh [--batches "1 16"] [--threads 2] [--tokens 32]
#                                         [--rounds 3] [--bench PATH]
# The environment passes through to both sides (e.g. OMP_WAIT_POLICY=passive, see
# docs/inference.md "Threads on a busy machine"); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are
# unset for both (ARCHITECTURE.md "Backends").
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../.." && pwd)"
batches="1 16"
threads=2
tokens=32
rounds=3
bench="${repo_root}/build/release/tests/bench/lattice-bench-decode"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --batches) batches="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    -h|--help) sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$bench" ]] || { echo "error: $bench not built (cmake --build ... --target lattice-bench-decode)" >&2; exit 2; }
source "${script_dir}/machine_line.sh"
machine_line "$(dirname "$bench")"
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS="$threads"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
weights="$work/config_b.safetensors"

field() { sed -n 's/^RESULT //p' | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); threads $threads; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
"$bench" --config B --batch 1 --tokens 2 --threads "$threads" --save-hf "$weights" > /dev/null
printf '%-6s %-12s %-12s %-10s %s\n' batch "lattice t/s" "pytorch t/s" ratio "first tokens agree"
for b in $batches; do
  ours=(); theirs=(); agree=yes
  for ((r = 0; r < rounds; r++)); do
    out=$("$bench" --config B --batch "$b" --tokens "$tokens" --threads "$threads")
    ours+=("$(echo "$out" | field tokens_per_s)")
    first_ours="$(echo "$out" | field first)"
    out=$(/usr/bin/python3 "$script_dir/decode_torch.py" "$weights" --batch "$b" --tokens "$tokens" --threads "$threads")
    theirs+=("$(echo "$out" | field tokens_per_s)")
    [[ "$first_ours" == "$(echo "$out" | field first)" ]] || agree="NO ($first_ours vs $(echo "$out" | field first))"
  done
  mo=$(median "${ours[@]}"); mt=$(median "${theirs[@]}")
  printf '%-6s %-12s %-12s %-10s %s   (lattice: %s; pytorch: %s)\n' "$b" "$mo" "$mt" \
    "$(python3 -c "print(f'{$mo/$mt:.2f}x')")" "$agree" "${ours[*]}" "${theirs[*]}"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
