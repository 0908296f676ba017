#!/usr/bin/env bash
# HuggingFaceTokenizer throughput against Hugging Face's own tokenizers (Rust, npm
# @anush008/tokenizers, through hf_tokenizers_peer.js), with Llama 3's and Qwen 3's
# tokenizer.json, same files, same documents, 1 and 2 threads each, one after the other, on
#   (a) fortunes: every plain fortune file under /usr/share/games/fortunes, one document per
#       non-empty line (English prose)
#   (b) varied:   test_hf_tokenizer's 10 MB of varied text (hf_tokenizer_reference.js, seed 1:
#       many scripts, emoji, code, whitespace runs, digits, special-token strings)
# Both inputs are written once to build/bench-data/. Prints one side-by-side table, with the
# ratios, the CPU, and whether both sides produced the same number of tokens.
#
# Usage: tests/bench/hf_tokenizer_vs_rust.sh [--repeat 3] [--lattice-bench PATH]
#   --repeat         passes per measurement, the fastest is kept (default 3)
#   --lattice-bench  the Lattice program (default build/release/tests/bench/lattice-bench-tokenizer)
# Needs installers/fetch-hf-tokenizers.sh (the files and the reference), node, python3, fortunes.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../.." && pwd)"
repeat=3
lattice_bench="${repo_root}/build/release/tests/bench/lattice-bench-tokenizer"
data_dir="${repo_root}/build/bench-data"
hf_dir="${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}/hf-tokenizers"

usage() { sed -n '12,15s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "error: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeat) need_value "$@"; repeat="$2"; shift 2 ;;
    --lattice-bench) need_value "$@"; lattice_bench="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "error: --repeat must be a positive integer" >&2; exit 2; }

if [[ ! -x "$lattice_bench" ]]; then
  echo "error: Lattice benchmark not found: $lattice_bench" >&2
  echo "build it from ${repo_root} with:" >&2
  echo "  cmake --preset release && cmake --build build/release --target lattice-bench-tokenizer lattice-bench-machine" >&2
  exit 2
fi
modules="${hf_dir}/reference/node_modules"
for f in "${hf_dir}/llama3/tokenizer.json" "${hf_dir}/qwen3/tokenizer.json" "${modules}/@anush008/tokenizers"; do
  if [[ ! -e "$f" ]]; then
    echo "error: $f not found; run installers/fetch-hf-tokenizers.sh" >&2
    exit 2
  fi
done
source "${script_dir}/machine_line.sh"
source "${script_dir}/fortunes_corpus.sh"
machine=$(machine_line "$(dirname "$lattice_bench")")
mkdir -p "$data_dir"
fortunes="${data_dir}/fortunes.txt"
varied="${data_dir}/hf-varied-10MB.bin"
fortunes_corpus "$fortunes" || exit 2
if [[ ! -s "$varied" ]]; then
  tmp="$(mktemp -d)"
  node "${repo_root}/tests/data/hf_tokenizer_reference.js" --text-only --out "$tmp" \
    --node-modules "$modules" --bytes 10000000 --seed 1 \
    "llama3=${hf_dir}/llama3/tokenizer.json" "qwen3=${hf_dir}/qwen3/tokenizer.json" >/dev/null
  mv "$tmp/docs.bin" "$varied"
  rm -rf "$tmp"
fi

result() { grep "^RESULT " | sed 's/^RESULT //'; }
rows=()
for model in llama3 qwen3; do
  for corpus in "$fortunes" "$varied"; do
    echo "== ${model}, $(basename "$corpus")" >&2
    peer=()
    for threads in 1 2; do
      out="$(node "${script_dir}/hf_tokenizers_peer.js" "$corpus" --tokenizer "${hf_dir}/${model}/tokenizer.json" \
             --threads "$threads" --repeat "$repeat" --node-modules "$modules")"
      echo "$out" | grep -v '^RESULT' >&2
      peer+=("$(echo "$out" | result)")
    done
    lattice_out="$("$lattice_bench" "$corpus" --hf "${hf_dir}/${model}" --threads 1,2 --repeat "$repeat")"
    echo "$lattice_out" | grep -v '^RESULT' >&2
    rows+=("$(python3 - "$model" "$(basename "$corpus")" "${peer[0]}" "${peer[1]}" \
               "$(echo "$lattice_out" | result | sed -n 1p)" "$(echo "$lattice_out" | result | sed -n 2p)" <<'PY'
import json, sys
model, corpus, p1, p2, l1, l2 = sys.argv[1], sys.argv[2], *map(json.loads, sys.argv[3:])
same = "yes" if p1["tokens"] == p2["tokens"] == l1["tokens"] == l2["tokens"] else "NO"
print(f'{model:<7} {corpus:<20} {l1["bytes"] / 1e6:6.1f} {p1["mb_per_s"]:8.2f} {l1["mb_per_s"]:10.2f} '
      f'{l1["mb_per_s"] / p1["mb_per_s"]:6.2f}x {p2["mb_per_s"]:8.2f} {l2["mb_per_s"]:10.2f} '
      f'{l2["mb_per_s"] / p2["mb_per_s"]:6.2f}x {same:>5}')
PY
)")
  done
done

echo
echo "$machine"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "Hugging Face byte-level BPE encode, MB/s of UTF-8 input (best of ${repeat}); hf = npm" \
     "@anush008/tokenizers $(node -p "require('${modules}/@anush008/tokenizers/package.json').version")" \
     "(Rust tokenizers, encodeBatch), $(node --version)"
printf '%-7s %-20s %6s %8s %10s %7s %8s %10s %7s %5s\n' model corpus MB hf-1T lattice-1T ratio \
  hf-2T lattice-2T ratio same
for row in "${rows[@]}"; do echo "$row"; done
