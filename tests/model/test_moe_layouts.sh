#!/bin/bash
# MoE layers under pipeline, data, tensor and context parallelism (docs/models.md "Mixture of
# experts"): `lattice train --fp64` of a 4-layer model with MoE on layers 0 and 2 (4 experts,
# top-2, a large load-balancing loss so its gradient moves the weights) prints the same lm
# loss, moe aux loss and grad norm on every iteration (as the console prints them) in one
# process, as PP 2, DP 2, TP 2, TP 2 with --sequence-parallel (and full recomputation), CP 2 and
# CP 2 x TP 2 (with full recomputation); a SwiGLU model at TP 2 as in one process; a checkpoint
# saved at TP 2 after 2 iterations and resumed in one process gives the uninterrupted run's
# iterations 3 and 4; an expert TP that does not divide TP is refused with its sentence.
# usage: test_moe_layouts.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fp32=(train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 255 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --log-interval 1
      --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.5 --moe-layer-freq 2
      --lr 1e-2 --no-db --eval-iters 0 --hidden-dropout 0 --attention-dropout 0)
args=("${fp32[@]}" --fp64)
source "$here/moe_runs.sh"
run one 1 "${args[@]}"
if [ "$(grep -c 'moe aux loss' one.txt)" != 4 ]; then
  echo "one process: no moe aux loss on the 4 iteration lines"; cat one.log; exit 1
fi
run pp 2 "${args[@]}" --pipeline-model-parallel-size 2
same one pp "MoE: PP 2 and one process"
run dp 2 "${args[@]}"
same one dp "MoE: DP 2 and one process"
run tp 2 "${args[@]}" --tensor-model-parallel-size 2
same one tp "MoE: TP 2 and one process"
# With full recomputation too, which re-runs the routing and the experts from the gathered rows.
run sp 2 "${args[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
same one sp "MoE: TP 2 with --sequence-parallel and full recomputation and one process"
# Context parallelism (Note [MoE with context parallelism]): the aux loss's counts summed over
# CP; with TP inside each CP rank, and with full recomputation (the routing re-run sums them
# again).
run cp 2 "${args[@]}" --context-parallel-size 2
same one cp "MoE: CP 2 and one process"
run cptp 4 "${args[@]}" --context-parallel-size 2 --tensor-model-parallel-size 2 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
same one cptp "MoE: CP 2 x TP 2 with full recomputation and one process"
run swiglu_one 1 "${args[@]}" --swiglu
run swiglu_tp 2 "${args[@]}" --swiglu --tensor-model-parallel-size 2
same swiglu_one swiglu_tp "MoE: SwiGLU at TP 2 and TP 1"
# Checkpoints keep fp32 state (no --fp64): a TP 2 run saving after iterations 2 and 4, and its
# iteration-2 checkpoint resumed in one process, whose iterations 3 and 4 must be the TP 2 run's
# up to fp32 rounding (another layout sums in another order; a wrongly resharded expert is far
# off): the losses within 1e-5 relative, as test_checkpoint's resharded runs, the grad norm
# (printed with 3 decimals) within one unit of its last digit.
run tp_fp32 2 "${fp32[@]}" --tensor-model-parallel-size 2 --save ckpt --save-interval 2
grep -q "saved checkpoint of iteration 2" tp_fp32.log || { cat tp_fp32.log; exit 1; }
run resumed 1 "${fp32[@]}" --load ckpt --ckpt-step 2
grep -q "continuing after iteration 2" resumed.log || { cat resumed.log; exit 1; }
if [ "$(wc -l < resumed.txt)" != 2 ]; then
  echo "resumed: not 2 iterations"; cat resumed.log; exit 1
fi
tail -n 2 tp_fp32.txt > uninterrupted.txt
close uninterrupted resumed "MoE: TP 2's checkpoint resumed at TP 1 and the uninterrupted run"
# Expert TP 1 and 2 under TP 4 train (test_expert_tensor_parallel, _groups); one that does not
# divide TP (here above it) is refused.
if "$mpiexec" --oversubscribe -n 4 "$lattice" "${args[@]}" --tensor-model-parallel-size 2 \
     --expert-tensor-parallel-size 4 > etp.log 2>&1; then
  echo "--expert-tensor-parallel-size 4 with --tensor-model-parallel-size 2 was not refused"; exit 1
fi
grep -q "expert-tensor-parallel-size 4 that does not divide --tensor-model-parallel-size 2" \
  etp.log || { echo "ETP 4 at TP 2: no sentence naming the flags"; cat etp.log; exit 1; }
echo "MoE: PP 2, DP 2, TP 2 (also with --sequence-parallel, and SwiGLU) equal one process;" \
     "TP 2's checkpoint resumes at TP 1; an expert TP not dividing TP is refused"
