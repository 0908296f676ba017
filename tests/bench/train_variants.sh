#!/usr/bin/env bash
# Several builds or settings of lattice-bench-train side by side on a shared, noisy machine:
# the variants run interleaved (round 1: every variant once, round 2: again, ...), so that a
# burst of load from other processes falls on all of them, and the table gives each variant's
# median with its min and max over the rounds, and the load average seen during its runs.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every variant (ARCHITECTURE.md).
#
# Usage: tests/bench/train_variants.sh [--config A|B|L] [--threads N] [--steps N] [--rounds N]
#                                      LABEL=COMMAND...
#   LABEL=COMMAND  a variant: COMMAND (split on spaces; may start with env VAR=VALUE) is a
#                  lattice-bench-train program, run with --config/--threads/--steps appended
# Example (docs/benchmarks.md, "CPU kernels per instruction set"):
#   tests/bench/train_variants.sh --config A --rounds 5 \
#     native=build/release/tests/bench/lattice-bench-train \
#     generic="env LATTICE_CPU_ISA=generic build/release/tests/bench/lattice-bench-train"
set -euo pipefail

config=A
threads=2
steps=""
rounds=3
usage() { sed -n '8,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "error: $1 needs a value" >&2; exit 2; }; }
variants=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) need_value "$@"; config="$2"; shift 2 ;;
    --threads) need_value "$@"; threads="$2"; shift 2 ;;
    --steps) need_value "$@"; steps="$2"; shift 2 ;;
    --rounds) need_value "$@"; rounds="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *=*) variants+=("$1"); shift ;;
    *) echo "error: '$1' is neither a flag nor LABEL=COMMAND" >&2; usage >&2; exit 2 ;;
  esac
done
[[ ${#variants[@]} -gt 0 ]] || { echo "error: no LABEL=COMMAND given" >&2; usage >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "error: --rounds must be a positive integer" >&2; exit 2; }
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE

extra=(--config "$config" --threads "$threads")
[[ -n "$steps" ]] && extra+=(--steps "$steps")
results=$(mktemp)
trap 'rm -f "$results"' EXIT
machine=""
for ((r = 1; r <= rounds; r++)); do
  for v in "${variants[@]}"; do
    label="${v%%=*}"
    read -r -a command <<< "${v#*=}"
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    if ! out=$("${command[@]}" "${extra[@]}" 2>/dev/null); then
      echo "error: variant $label failed: ${command[*]} ${extra[*]}" >&2
      exit 1
    fi
    load_after=$(cut -d' ' -f1 /proc/loadavg)
    [[ -n "$machine" ]] || machine=$(grep -m1 '^machine:' <<< "$out" || true)
    result=$(grep '^RESULT ' <<< "$out" | tail -1)
    echo "round $r $label: ${result#RESULT } load $load_before -> $load_after" >&2
    printf '%s\t%s\t%s\t%s\n' "$label" "${result#RESULT }" "$load_before" "$load_after" >> "$results"
  done
done

echo "$machine; config $config, $threads threads, $rounds interleaved rounds"
/usr/bin/python3 - "$results" "${variants[@]%%=*}" <<'EOF'
import json, statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
print("| variant | kernels | tokens/s median (min–max) | step ms median | % of SGEMM median (min–max) | SGEMM GFLOP/s median | load avg |")
print("|---|---|---|---|---|---|---|")
for label in sys.argv[2:]:
    mine = [(json.loads(r[1]), float(r[2]), float(r[3])) for r in rows if r[0] == label]
    tok = [m["tokens_per_s"] for m, _, _ in mine]
    frac = [100 * m["sgemm_fraction"] for m, _, _ in mine]
    step = [m["step_ms_median"] for m, _, _ in mine]
    peak = [m["sgemm_gflops"] for m, _, _ in mine]
    loads = [l for _, a, b in mine for l in (a, b)]
    isas = sorted({m.get("cpu_isa", "not reported") for m, _, _ in mine})
    print(f"| {label} | {', '.join(isas)} | {statistics.median(tok):.0f} ({min(tok):.0f}–{max(tok):.0f}) "
          f"| {statistics.median(step):.1f} | {statistics.median(frac):.1f} ({min(frac):.1f}–{max(frac):.1f}) "
          f"| {statistics.median(peak):.1f} | {min(loads):.1f}–{max(loads):.1f} |")
EOF
