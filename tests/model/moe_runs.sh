# Sourced by the MoE layout tests (test_moe_layouts.sh, test_expert_parallel.sh), which set
# $lattice and $mpiexec and run in a scratch folder.
# metrics: the iteration lines' lm loss, moe aux loss and grad norm, one line per iteration.
metrics() {
  grep -oE "iteration +[0-9]+/|lm loss: [^|]*|moe aux loss: [^|]*|grad norm: [^|]*" |
    paste -sd' ' | sed 's/ iteration/\niteration/g'
}
# run NAME RANKS FLAGS...: `lattice FLAGS` on RANKS ranks into NAME.log, its metrics into NAME.txt.
run() {
  local name=$1 ranks=$2
  shift 2
  "$mpiexec" --oversubscribe -n "$ranks" "$lattice" "$@" > "$name.log" 2>&1 ||
    { echo "$name: lattice $1 failed"; cat "$name.log"; exit 1; }
  metrics < "$name.log" > "$name.txt"
}
# same A B WHAT: A.txt and B.txt hold the same metric lines; else WHAT is said to differ.
same() {
  if ! diff "$1.txt" "$2.txt"; then echo "$3 differ (above: $1 < > $2)"; exit 1; fi
}
