#!/usr/bin/env bash
# GPT-2 tokenizer throughput: Lattice's GPT2BPETokenizer (lattice-bench-tokenizer, 1 and 2
# threads) against the npm package gpt-tokenizer (gpt_tokenizer_peer.js, Node, one thread),
# same files, same split (one document per non-empty line), one after the other, on
#   (a) fortunes:  every plain fortune file under /usr/share/games/fortunes, concatenated
#   (b) synthetic: 100 MB of those lines, shuffled again for every copy (seeded, so every
#       run writes the same bytes)
# Both inputs are written once to build/bench-data/. Prints a side-by-side table with ratios
# and whether both sides produced the same number of tokens. gpt-tokenizer runs GPT-2's
# pattern on JavaScript's regex engine, whose \s differs from Megatron's (Python regex) on
# U+0085 and U+FEFF, so the counts can differ on text holding those; the fortunes hold neither.
#
# Usage: tests/bench/tokenizer_vs_npm.sh [--repeat 3] [--lattice-bench PATH]
#                                        [--node-modules DIR]
#   --repeat         passes per measurement, the fastest is kept (default 3)
#   --lattice-bench  the Lattice program (default build/release/tests/bench/lattice-bench-tokenizer)
#   --node-modules   where gpt-tokenizer is installed (default build/bench-node/node_modules;
#                    install: npm install --prefix build/bench-node gpt-tokenizer@4.0.0)
# Needs GPT-2's vocabulary (installers/fetch-gpt2-vocab.sh), node, python3 and fortunes.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../.." && pwd)"
repeat=3
lattice_bench="${repo_root}/build/release/tests/bench/lattice-bench-tokenizer"
node_modules="${repo_root}/build/bench-node/node_modules"
data_dir="${repo_root}/build/bench-data"

usage() { sed -n '13,18s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "error: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeat) need_value "$@"; repeat="$2"; shift 2 ;;
    --lattice-bench) need_value "$@"; lattice_bench="$2"; shift 2 ;;
    --node-modules) need_value "$@"; node_modules="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "error: --repeat must be a positive integer" >&2; exit 2; }

if [[ ! -x "$lattice_bench" ]]; then
  echo "error: Lattice benchmark not found: $lattice_bench" >&2
  echo "build it from ${repo_root} with:" >&2
  echo "  cmake --preset release && cmake --build build/release --target lattice-bench-tokenizer" >&2
  exit 2
fi
if [[ ! -d "${node_modules}/gpt-tokenizer" ]]; then
  echo "error: gpt-tokenizer not found in ${node_modules}; install it with" >&2
  echo "  npm install --prefix build/bench-node gpt-tokenizer@4.0.0" >&2
  exit 2
fi
source "${script_dir}/machine_line.sh"
source "${script_dir}/fortunes_corpus.sh"
machine=$(machine_line "$(dirname "$lattice_bench")")
mkdir -p "$data_dir"
fortunes="${data_dir}/fortunes.txt"
synthetic="${data_dir}/fortunes-100MB.txt"
fortunes_corpus "$fortunes" || exit 2
if [[ ! -s "$synthetic" ]]; then
  python3 - "$fortunes" "${synthetic}.part" <<'PY'
import random, sys
lines = [l for l in open(sys.argv[1], 'rb').read().split(b'\n') if l]
target, written, copy = 100_000_000, 0, 0
with open(sys.argv[2], 'wb') as out:
    while written < target:
        order = lines[:]
        random.Random(copy).shuffle(order)
        for line in order:
            if written + len(line) + 1 > target:
                break
            out.write(line + b'\n')
            written += len(line) + 1
        else:
            copy += 1
            continue
        break
PY
  mv "${synthetic}.part" "$synthetic"
fi

result() { grep "^RESULT " | sed 's/^RESULT //'; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

rows=()
for corpus in "$fortunes" "$synthetic"; do
  echo "== $(basename "$corpus")" >&2
  peer_out="$(node "${script_dir}/gpt_tokenizer_peer.js" "$corpus" --repeat "$repeat" \
              --node-modules "$node_modules")"
  echo "$peer_out" | grep -v '^RESULT' >&2
  lattice_out="$("$lattice_bench" "$corpus" --threads 1,2 --repeat "$repeat")"
  echo "$lattice_out" | grep -v '^RESULT' >&2
  peer="$(echo "$peer_out" | result)"
  one="$(echo "$lattice_out" | result | sed -n 1p)"
  two="$(echo "$lattice_out" | result | sed -n 2p)"
  rows+=("$(python3 - "$(basename "$corpus")" "$peer" "$one" "$two" <<'PY'
import json, sys
name, peer, one, two = sys.argv[1], *map(json.loads, sys.argv[2:])
same = "yes" if peer["tokens"] == one["tokens"] == two["tokens"] else "NO"
print(f'{name:<20} {one["bytes"] / 1e6:8.1f} {peer["mb_per_s"]:10.2f} {one["mb_per_s"]:10.2f} '
      f'{one["mb_per_s"] / peer["mb_per_s"]:7.2f}x {two["mb_per_s"]:10.2f} '
      f'{two["mb_per_s"] / peer["mb_per_s"]:7.2f}x {two["mb_per_s"] / one["mb_per_s"]:7.2f}x '
      f'{one["tokens_per_s"] / 1e6:9.2f} {two["tokens_per_s"] / 1e6:9.2f} {same:>6}')
PY
)")
done

echo
echo "$machine"
echo "GPT-2 BPE encode, MB/s of UTF-8 input (best of ${repeat}); $(node --version)"
printf '%-20s %8s %10s %10s %8s %10s %8s %8s %9s %9s %6s\n' corpus MB gpt-tok lattice-1T \
  ratio lattice-2T ratio 2T/1T Mtok/s-1T Mtok/s-2T same
for row in "${rows[@]}"; do echo "$row"; done

# End to end: `lattice data preprocess` (read, encode, write .bin/.idx) on the same files.
lattice_cli="$(dirname "$(dirname "$(dirname "$lattice_bench")")")/lattice"
vocab_dir="${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}/gpt2"
if [[ -x "$lattice_cli" ]]; then
  echo
  echo "$machine"
  echo "lattice data preprocess --tokenizer-type GPT2BPETokenizer --input-format lines, MB/s"
  printf '%-20s %10s %10s %8s\n' corpus 1-worker 2-workers 2w/1w
  for corpus in "$fortunes" "$synthetic"; do
    rates=()
    for workers in 1 2; do
      out="$("$lattice_cli" data preprocess --input "$corpus" --input-format lines \
             --output-prefix "${data_dir}/preprocess-w${workers}" --tokenizer-type GPT2BPETokenizer \
             --vocab-file "${vocab_dir}/vocab.json" --merge-file "${vocab_dir}/merges.txt" \
             --append-eod --workers "$workers" --log-interval 100000000 2>/dev/null)"
      rates+=("$(echo "$out" | sed -n 's/.*, \([0-9.]*\) MB\/s).*/\1/p')")
    done
    python3 -c 'import sys; n, a, b = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]); print(f"{n:<20} {a:10.2f} {b:10.2f} {b / a:7.2f}x")' \
      "$(basename "$corpus")" "${rates[0]}" "${rates[1]}"
  done
fi
