# Sourced by the benchmark scripts: machine_line DIR prints DIR/lattice-bench-machine's line
# ("machine: AMD EPYC (family 25 model 17), AVX-512, 2 cores"), the same line the benchmark
# programs print first (bench_machine.h), so that every table a script prints names the machine
# it ran on.
machine_line() {
  local program="$1/lattice-bench-machine"
  if [[ ! -x "$program" ]]; then
    echo "error: $program not found; build it with --target lattice-bench-machine" >&2
    return 2
  fi
  "$program"
}
