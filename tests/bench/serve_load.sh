#!/usr/bin/env bash
# Load test of `lattice serve` (docs/inference.md "Load test"): starts the server on loopback
# with the demo model, warms it up, runs serve_load.py (64 clients for 30 s by default) twice
# (the second run shows whether memory keeps growing), with --slowloris N a third time beside N
# clients that send their heads a byte a second (p99 side by side with the runs before), and
# stops the server with SIGTERM (it must exit 0).
#
# Usage: tests/bench/serve_load.sh [--load DIR] [--lattice PATH] [--clients 64] [--seconds 30]
#                                  [--slowloris N]
#   --load DIR   a demo checkpoint (default: train one with `lattice demo --train-iters 30`)
set -euo pipefail
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/../.." && pwd)"
lattice="${repo_root}/build/release/lattice"
load=""
clients=64
seconds=30
slow=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --load) load="$2"; shift 2 ;;
    --lattice) lattice="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --slowloris) slow="$2"; shift 2 ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
source "${script_dir}/machine_line.sh"
machine_line "$(dirname "$lattice")/tests/bench" > /dev/null  # built, before anything runs
work="$(mktemp -d)"
server_pid=""
cleanup() { [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
if [[ -z "$load" ]]; then
  load="$work/demo"
  "$lattice" demo --train-iters 30 --eval-iters 0 --save "$load" --db "$work/runs.sqlite" > "$work/demo.log"
fi
"$lattice" serve --load "$load" --port 0 > "$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do grep -q "http://" "$work/serve.log" && break; sleep 0.2; done
port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
[[ -n "$port" ]] || { cat "$work/serve.log" >&2; exit 1; }
machine_line "$(dirname "$lattice")/tests/bench"
echo "server pid $server_pid on port $port; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Warm-up: the caches and thread pools reach their working size.
/usr/bin/python3 "$script_dir/serve_load.py" --port "$port" --pid "$server_pid" --clients "$clients" --seconds 5 > /dev/null
for run in 1 2; do
  echo "run $run:"
  /usr/bin/python3 "$script_dir/serve_load.py" --port "$port" --pid "$server_pid" --clients "$clients" --seconds "$seconds"
done
if [[ "$slow" -gt 0 ]]; then
  echo "run 3, with $slow slow clients:"
  /usr/bin/python3 "$script_dir/serve_load.py" --port "$port" --pid "$server_pid" --clients "$clients" --seconds "$seconds" --slowloris "$slow"
fi
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=""
echo "SIGTERM: the server exited with status $status; its last lines:"
tail -n 2 "$work/serve.log"
