#!/usr/bin/env bash
# Lattice vs PyTorch (CPU, fp32) training throughput on the same GPT-2-style model, same
# optimizer, same machine and thread count. For each config it runs, one after the other,
#   (a) lattice-bench-train --config C --threads N --steps S --profile, with its default OpenMP
#       waiting (a spin of 1000 PAUSEs, Note [OpenMP waiting] in kernels/cpu/README.md)
#   (b) /usr/bin/python3 tests/bench/gpt_torch.py --config C --threads N --steps S, twice:
#       with OMP_WAIT_POLICY=PASSIVE, and with Lattice's GOMP_SPINCOUNT=1000
# reads the last line of each ("RESULT {json}") and prints a side-by-side table; the ratio is
# taken against the faster of the two PyTorch runs.
#
# Usage: tests/bench/train_vs_pytorch.sh [--configs "A B"] [--threads 2] [--steps N]
#                                        [--lattice-bench PATH]
#   --configs        configs to run, space separated: A, B, L (default "A B")
#   --threads        OMP_NUM_THREADS / --threads for both sides (default 2)
#   --steps          timed steps for every config (default: 10 for A and L, 4 for B)
#   --lattice-bench  the Lattice program (default build/release/tests/bench/lattice-bench-train
#                    under the repository root)
#
# Config A (4 layers, hidden 256) takes well under a minute; config B (12 layers, hidden 768,
# vocab 50304) takes about ten seconds per PyTorch step on a 2-core machine; config L is A's
# model on sequences of 2048 tokens (one a step), where the attention weighs most.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../.." && pwd)"
python=/usr/bin/python3  # Debian's python3-torch lives here, not in a pyenv python on PATH
torch_script="${script_dir}/gpt_torch.py"

configs="A B"
threads=2
steps=""
lattice_bench="${repo_root}/build/release/tests/bench/lattice-bench-train"

usage() { sed -n '11,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "error: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --configs) need_value "$@"; configs="$2"; shift 2 ;;
    --threads) need_value "$@"; threads="$2"; shift 2 ;;
    --steps) need_value "$@"; steps="$2"; shift 2 ;;
    --lattice-bench) need_value "$@"; lattice_bench="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "error: --threads must be a positive integer" >&2; exit 2; }
[[ -z "$steps" || "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "error: --steps must be a positive integer" >&2; exit 2; }
read -r -a config_list <<< "$configs"
[[ ${#config_list[@]} -gt 0 ]] || { echo "error: --configs is empty" >&2; exit 2; }
for c in "${config_list[@]}"; do
  [[ "$c" == A || "$c" == B || "$c" == L ]] ||
    { echo "error: unknown config '$c' (A, B or L)" >&2; exit 2; }
done

if [[ ! -x "$lattice_bench" ]]; then
  echo "error: Lattice benchmark not found: $lattice_bench" >&2
  echo "build it from ${repo_root} with:" >&2
  echo "  cmake --preset release && cmake --build build/release --target lattice-bench-train" >&2
  exit 2
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "error: $python cannot import torch (run installers/install-deps.sh --bench)" >&2
  exit 2
fi

source "${script_dir}/machine_line.sh"

# Both sides get the same environment. This machine sets OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE,
# which pin OpenBLAS to older kernels and halve its SGEMM rate: drop them here, for this run only.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS="$threads"
export OPENBLAS_NUM_THREADS="$threads"  # OpenBLAS's own pool would otherwise read OMP_NUM_THREADS
# How idle OpenMP threads wait. Lattice sets its own (GOMP_SPINCOUNT=1000 unless the user chose).
# PyTorch's libgomp would spin for 300,000 PAUSEs, which on a shared 2-core machine costs it more
# than it saves, so it runs both tuned ways and is credited with the faster.
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
lattice_spin=1000  # kOpenMpSpinCount, kernels/include/lattice/kernels.h

work="$(mktemp -d "${TMPDIR:-/tmp}/train_vs_pytorch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
results="$work/results.tsv"
: > "$results"

# run_one IMPL CONFIG COMMAND...: streams the program's stdout (and keeps it), then records
# its last line, which must be "RESULT {json}".
run_one() {
  local impl="$1" config="$2"
  shift 2
  local log="$work/${impl}_${config}.log"
  echo
  echo "=== ${impl}, config ${config}: $*"
  if ! "$@" | tee "$log"; then
    echo "error: ${impl} failed on config ${config}" >&2
    exit 1
  fi
  local last
  last="$(tail -n 1 "$log")"
  if [[ "$last" != "RESULT "* ]]; then
    echo "error: ${impl}'s last line is not 'RESULT {json}': ${last}" >&2
    exit 1
  fi
  printf '%s\t%s\t%s\n' "$impl" "$config" "${last#RESULT }" >> "$results"
  # PyTorch's OpenBLAS core name, from gpt_torch.py's first line, for the footer.
  if [[ "$impl" == pytorch ]]; then
    sed -n 's/.*OpenBLAS core \([^,]*\).*/pytorch\t\1/p' "$log" | head -n 1 > "$work/torch_core"
  fi
}

machine=$(machine_line "$(dirname "$lattice_bench")")
echo "$machine"
echo "Lattice vs PyTorch: configs ${configs}, ${threads} threads, $(nproc) CPUs online"
echo "lattice: $lattice_bench"
echo "pytorch: $python $torch_script ($("$python" -c 'import torch; print(torch.__version__)'))"
echo "env: OMP_NUM_THREADS=$OMP_NUM_THREADS; lattice: its default waiting (GOMP_SPINCOUNT=$lattice_spin); pytorch: OMP_WAIT_POLICY=PASSIVE, then GOMP_SPINCOUNT=$lattice_spin; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset"

for c in "${config_list[@]}"; do
  if [[ -n "$steps" ]]; then n="$steps"; elif [[ "$c" == B ]]; then n=4; else n=10; fi
  run_one lattice "$c" "$lattice_bench" --config "$c" --threads "$threads" --steps "$n" --profile
  run_one pytorch "$c" env OMP_WAIT_POLICY=PASSIVE \
    "$python" "$torch_script" --config "$c" --threads "$threads" --steps "$n"
  run_one pytorch_spin "$c" env GOMP_SPINCOUNT="$lattice_spin" \
    "$python" "$torch_script" --config "$c" --threads "$threads" --steps "$n"
done

echo
echo "$machine"
"$python" - "$results" "$work/torch_core" "${config_list[@]}" <<'EOF'
import json
import sys

results_path, torch_core_path, *configs = sys.argv[1:]
res = {}
with open(results_path) as f:
    for line in f:
        impl, config, payload = line.rstrip("\n").split("\t", 2)
        try:
            res[(impl, config)] = json.loads(payload)
        except json.JSONDecodeError as e:
            sys.exit(f"error: {impl} config {config}: RESULT is not JSON ({e}): {payload}")

def num(d, key):
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) else None

def fmt(v, spec, suffix=""):
    return "n/a" if v is None else format(v, spec) + suffix

header = ["config", "lattice tok/s", "pytorch tok/s (passive)", "pytorch tok/s (spin 1000)",
          "ratio", "lattice GFLOP/s", "% of SGEMM", "lattice peak RSS", "pytorch peak RSS"]
rows, notes, cores = [], [], set()
for c in configs:
    lat, pt, ps = res[("lattice", c)], res[("pytorch", c)], res[("pytorch_spin", c)]
    for impl, d in (("lattice", lat), ("pytorch", pt), ("pytorch", ps)):
        if d.get("impl") != impl or str(d.get("config")) != c:
            notes.append(f"warning: {impl} config {c} reported impl={d.get('impl')!r} "
                         f"config={d.get('config')!r}")
    lt, tt, st = num(lat, "tokens_per_s"), num(pt, "tokens_per_s"), num(ps, "tokens_per_s")
    best = max((v for v in (tt, st) if v), default=None)
    ratio = lt / best if lt and best else None
    frac = num(lat, "sgemm_fraction")
    if frac is None and num(lat, "gflops") and num(lat, "sgemm_gflops"):
        frac = num(lat, "gflops") / num(lat, "sgemm_gflops")
    rows.append([c, fmt(lt, ".1f"), fmt(tt, ".1f"), fmt(st, ".1f"), fmt(ratio, ".2f", "x"),
                 fmt(num(lat, "gflops"), ".1f"),
                 fmt(None if frac is None else 100 * frac, ".1f", "%"),
                 fmt(num(lat, "peak_rss_mib"), ".0f", " MiB"),
                 fmt(num(pt, "peak_rss_mib"), ".0f", " MiB")])
    notes.append(f"config {c}: Lattice SGEMM reference {fmt(num(lat, 'sgemm_gflops'), '.1f')} "
                 f"GFLOP/s; threads lattice={lat.get('threads', 'n/a')} "
                 f"pytorch={pt.get('threads', 'n/a')}; "
                 f"PyTorch median step {fmt(num(pt, 'step_ms_median'), '.1f')} ms passive, "
                 f"{fmt(num(ps, 'step_ms_median'), '.1f')} ms spinning")
    cores.add(str(lat.get("blas_core", "n/a")))

widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
line = lambda cells: " | ".join(s.rjust(w) if i else s.ljust(w)
                                for i, (s, w) in enumerate(zip(cells, widths)))
print(line(header))
print("-+-".join("-" * w for w in widths))
for r in rows:
    print(line(r))
print()
print("ratio = lattice tok/s / the faster pytorch tok/s; % of SGEMM = lattice GFLOP/s as a share of its "
      "measured SGEMM rate (sgemm_fraction)")
for n in notes:
    print(n)
torch_core = "n/a"
try:
    with open(torch_core_path) as f:
        torch_core = f.read().strip().split("\t")[-1] or "n/a"
except OSError:
    pass
print(f"BLAS core: lattice {', '.join(sorted(cores))}; pytorch (OpenBLAS) {torch_core}")
EOF
