#!/bin/bash
# MoE layers under pipeline and data parallelism (docs/models.md "Mixture of experts"): `lattice
# train --fp64` of a 4-layer model with MoE on layers 0 and 2 (4 experts, top-2, a large
# load-balancing loss so its gradient moves the weights) prints the same lm loss, moe aux loss
# and grad norm on every iteration (the console's 7 significant digits) in one process, as PP 2
# and as DP 2; and tensor parallelism with MoE is refused with its sentence.
# usage: test_moe_layouts.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
args=(train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 255 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --log-interval 1
      --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.5 --moe-layer-freq 2 --fp64
      --lr 1e-2 --no-db --eval-iters 0 --hidden-dropout 0 --attention-dropout 0)
# The iteration lines' lm loss, moe aux loss and grad norm, one line per iteration.
metrics() {
  grep -oE "iteration +[0-9]+/|lm loss: [^|]*|moe aux loss: [^|]*|grad norm: [^|]*" |
    paste -sd' ' | sed 's/ iteration/\niteration/g'
}
"$mpiexec" --oversubscribe -n 1 "$lattice" "${args[@]}" > one.log 2>&1 || { cat one.log; exit 1; }
metrics < one.log > one.txt
if [ "$(grep -c 'moe aux loss' one.txt)" != 4 ]; then
  echo "one process: no moe aux loss on the 4 iteration lines"; cat one.log; exit 1
fi
for layout in pp dp; do
  extra=()
  [ "$layout" = pp ] && extra=(--pipeline-model-parallel-size 2)
  "$mpiexec" --oversubscribe -n 2 "$lattice" "${args[@]}" "${extra[@]}" > two.log 2>&1 ||
    { cat two.log; exit 1; }
  metrics < two.log > two.txt
  if ! diff one.txt two.txt; then
    echo "MoE: 2 ranks (${extra[*]:-DP 2}) differ from one process (above: one < > two)"; exit 1
  fi
done
if "$mpiexec" --oversubscribe -n 2 "$lattice" "${args[@]}" --tensor-model-parallel-size 2 > tp.log 2>&1; then
  echo "--num-experts with --tensor-model-parallel-size 2 was not refused"; exit 1
fi
grep -q "does not combine with --tensor-model-parallel-size 2" tp.log ||
  { echo "TP 2 with MoE: no sentence naming the flags"; cat tp.log; exit 1; }
echo "MoE: PP 2 and DP 2 equal one process; TP 2 refused"
