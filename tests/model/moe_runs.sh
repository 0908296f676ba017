# Sourced by the MoE layout tests (test_moe_layouts.sh, test_expert_parallel.sh,
# test_expert_tensor_parallel.sh) and the VLM ones (tests/train/test_vlm_*.sh), which set $lattice
# and $mpiexec and run in a scratch folder.
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
# close A B WHAT: A.txt and B.txt hold the same iterations, lm loss and moe aux loss within 1e-5
# of their magnitude and grad norm within 1.0001e-3 (fp32 runs whose sums differ in order).
close() {
  paste -d'\n' "$1.txt" "$2.txt" | awk '
    { for (i = 1; i <= NF; i++) if ($i ~ /^-?[0-9.]+(E[-+][0-9]+)?$/) v[NR, ++n[NR]] = $i + 0 }
    NR % 2 == 0 {
      if (n[NR] != 3 || n[NR - 1] != 3) { print "not 3 figures: " $0; bad = 1 }
      for (j = 1; j <= n[NR]; j++) {
        a = v[NR - 1, j]; b = v[NR, j]; d = a > b ? a - b : b - a; m = a > 0 ? a : -a
        if (d > (j < 3 ? 1e-5 * m : 1.0001e-3)) {
          print "iteration line " NR / 2 ": figure " j ": " a " against " b; bad = 1
        }
      }
    }
    END { if (NR == 0) { print "no iteration lines"; bad = 1 }; exit bad }' ||
    { echo "$3 differ (above: $1, $2)"; exit 1; }
}
# close_losses A B WHAT: as close, for runs without an aux loss (lm loss and grad norm only).
close_losses() {  # the lm loss within 1e-5 of its magnitude, the grad norm within 1.0001e-3
  paste -d'\n' "$1.txt" "$2.txt" | awk '
    { n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^-?[0-9.]+(E[-+][0-9]+)?$/) v[NR, ++n] = $i + 0
      c[NR] = n }
    NR % 2 == 0 {
      if (c[NR] != 2 || c[NR - 1] != 2) { print "not 2 figures: " $0; bad = 1 }
      for (j = 1; j <= 2; j++) {
        a = v[NR - 1, j]; b = v[NR, j]; d = a > b ? a - b : b - a; m = a > 0 ? a : -a
        if (d > (j < 2 ? 1e-5 * m : 1.0001e-3)) {
          print "iteration line " NR / 2 ": figure " j ": " a " against " b; bad = 1
        }
      }
    }
    END { if (NR == 0) { print "no iteration lines"; bad = 1 }; exit bad }' ||
    { echo "$3 differ (above: $1, $2)"; exit 1; }
}
