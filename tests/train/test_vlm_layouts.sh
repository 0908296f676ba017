#!/bin/bash
# A LLaVA-style vision-language model (docs/vision.md) under data, pipeline and tensor
# parallelism: `lattice train --fp64 --vision-model-type clip` on the mock image-text stream (a
# solid-colour image whose colour the caption's first token names) prints the same lm loss and
# grad norm on every iteration in one process as DP 2, PP 2 (the tower on the first stage, 1F1B
# with two micro-batches in flight, so the tower's backward re-runs its forward), TP 2 with
# --sequence-parallel, and TP 2 x PP 2 (the tower split over TP: Note [tower tensor parallelism]
# in model/vision_encoder.cpp); the loss falls; --freeze-LM --freeze-ViT (projector-only)
# trains the projector alone (the loss still falls, fewer parameters train), at TP 2 as in one
# process; a checkpoint saved at
# TP 2 x PP 2 after 2 iterations and resumed in one process gives the uninterrupted run's
# iterations 3 and 4 (the tower's tensors reshard); under --bf16 PP 2 equals one process.
# usage: test_vlm_layouts.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fp32=(train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 255 --micro-batch-size 2 --global-batch-size 8 --train-iters 4 --log-interval 1
      --lr 1e-2 --no-db --eval-iters 0 --hidden-dropout 0 --attention-dropout 0
      --vision-model-type clip --vision-num-layers 2 --vision-hidden-size 16
      --vision-num-attention-heads 2 --img-h 16 --img-w 16 --patch-dim 8)
args=("${fp32[@]}" --fp64)
source "$here/../model/moe_runs.sh"
run one 1 "${args[@]}"
awk '/lm loss/ { n++ } END { exit n == 4 ? 0 : 1 }' one.log || { cat one.log; exit 1; }
first=$(head -n 1 one.txt | grep -oE "lm loss: [0-9.E+-]+" | cut -d' ' -f3)
last=$(tail -n 1 one.txt | grep -oE "lm loss: [0-9.E+-]+" | cut -d' ' -f3)
awk -v a="$first" -v b="$last" 'BEGIN { exit b < a ? 0 : 1 }' ||
  { echo "one process: the loss did not fall ($first -> $last)"; exit 1; }
run dp 2 "${args[@]}"
same one dp "VLM: DP 2 and one process"
run pp 2 "${args[@]}" --pipeline-model-parallel-size 2
same one pp "VLM: PP 2 and one process"
run sp 2 "${args[@]}" --tensor-model-parallel-size 2 --sequence-parallel
same one sp "VLM: TP 2 with --sequence-parallel and one process"
run tppp 4 "${args[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
same one tppp "VLM: TP 2 x PP 2 and one process"
# LLaVA's stage 1: only the projector trains.
run projector 1 "${args[@]}" --freeze-LM --freeze-ViT
first=$(head -n 1 projector.txt | grep -oE "lm loss: [0-9.E+-]+" | cut -d' ' -f3)
last=$(tail -n 1 projector.txt | grep -oE "lm loss: [0-9.E+-]+" | cut -d' ' -f3)
awk -v a="$first" -v b="$last" 'BEGIN { exit b < a ? 0 : 1 }' ||
  { echo "projector-only: the loss did not fall ($first -> $last)"; cat projector.log; exit 1; }
if diff -q one.txt projector.txt > /dev/null; then
  echo "projector-only training printed the full run's figures"; exit 1
fi
# The projector split over TP with the encoder frozen (no input gradient through linear_1).
run projector_tp 2 "${args[@]}" --freeze-LM --freeze-ViT --tensor-model-parallel-size 2
same projector projector_tp "VLM projector-only: TP 2 and one process"
# Checkpoints keep fp32 state (no --fp64): saved at TP 2 x PP 2, resumed in one process.
run tppp_fp32 4 "${fp32[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --save ckpt --save-interval 2
grep -q "saved checkpoint of iteration 2" tppp_fp32.log || { cat tppp_fp32.log; exit 1; }
run resumed 1 "${fp32[@]}" --load ckpt --ckpt-step 2
grep -q "continuing after iteration 2" resumed.log || { cat resumed.log; exit 1; }
if [ "$(wc -l < resumed.txt)" != 2 ]; then
  echo "resumed: not 2 iterations"; cat resumed.log; exit 1
fi
tail -n 2 tppp_fp32.txt > uninterrupted.txt
close_losses uninterrupted resumed "VLM: TP 2 x PP 2's checkpoint resumed at TP 1 and the uninterrupted run"
# --bf16 (Note [tower precision] in model/gpt_vision.cpp): PP 2 equals one process, whose loss
# falls. LATTICE_CPU_BF16_GEMM=widened: the CPU's bf16 list also where oneDNN has no bf16 GEMM.
export LATTICE_CPU_BF16_GEMM=widened
run bf16 1 "${fp32[@]}" --bf16
first=$(head -n 1 bf16.txt | grep -oE "lm loss: [0-9.E+-]+" | cut -d' ' -f3)
last=$(tail -n 1 bf16.txt | grep -oE "lm loss: [0-9.E+-]+" | cut -d' ' -f3)
awk -v a="$first" -v b="$last" 'BEGIN { exit b < a ? 0 : 1 }' ||
  { echo "--bf16: the loss did not fall ($first -> $last)"; cat bf16.log; exit 1; }
run bf16_pp 2 "${fp32[@]}" --bf16 --pipeline-model-parallel-size 2
same bf16 bf16_pp "VLM --bf16: PP 2 and one process"
echo "VLM: DP 2, PP 2, TP 2 with --sequence-parallel and TP 2 x PP 2 equal one process;" \
     "projector-only training trains, at TP 2 as in one process;" \
     "TP 2 x PP 2's checkpoint resumes at TP 1;" \
     "--bf16 PP 2 equals one process"
