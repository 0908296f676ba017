#!/bin/bash
# A LLaVA-style vision-language model under context parallelism (Note [images under context
# parallelism] in engine/src/model/gpt_vision.cpp): every CP rank runs the tower on the
# micro-batch's images and keeps its chunks of the spliced sequence; the tower's gradient is
# each rank's rows' share, summed over DP x CP with the language model's. `lattice train --fp64`
# on the mock image-text stream prints one process's lm loss and grad norm on every iteration at
# CP 2, CP 2 x TP 2 with --sequence-parallel, CP 2 x DP 2 with --use-distributed-optimizer and
# CP 2 x PP 2; in fp32, CP 2 x DP 2 with the distributed optimizer is one process's within the
# layout tests' tolerance (close_losses), and its checkpoint resumes in one process.
# The image straddles CP chunks: a 24 x 24 image of 8-pixel patches is 9 rows (the mock stream's
# rows 0..8), and a 16-row sequence at CP 2 is 4 chunks of 4 rows (rank 0: chunks 0 and 3, rank
# 1: chunks 1 and 2), so the image's rows 0-3 are rank 0's, 4-7 and 8 rank 1's two chunks.
# usage: test_vlm_context_parallel.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
seq=16 img=24 patch=8 cp=2
patches=$(((img / patch) * (img / patch))) chunk=$((seq / (2 * cp)))
if ((patches <= chunk || patches % chunk == 0)); then  # the case this test is for
  echo "the image's $patches rows do not straddle a boundary of $chunk-row CP chunks"; exit 1
fi
fp32=(train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4
      --seq-length "$seq" --vocab-size 255 --micro-batch-size 2 --global-batch-size 8
      --train-iters 3 --log-interval 1 --lr 1e-2 --no-db --eval-iters 0 --hidden-dropout 0
      --attention-dropout 0 --vision-model-type clip --vision-num-layers 2
      --vision-hidden-size 16 --vision-num-attention-heads 2 --img-h "$img" --img-w "$img"
      --patch-dim "$patch")
args=("${fp32[@]}" --fp64)
source "$here/../model/moe_runs.sh"
run one 1 "${args[@]}"
awk '/lm loss/ { n++ } END { exit n == 3 ? 0 : 1 }' one.log || { cat one.log; exit 1; }
run cp 2 "${args[@]}" --context-parallel-size "$cp"
same one cp "VLM: CP 2 and one process"
run cptp 4 "${args[@]}" --context-parallel-size "$cp" --tensor-model-parallel-size 2 \
  --sequence-parallel
same one cptp "VLM: CP 2 x TP 2 with --sequence-parallel and one process"
run cpdp 4 "${args[@]}" --context-parallel-size "$cp" --use-distributed-optimizer
same one cpdp "VLM: CP 2 x DP 2 with the distributed optimizer and one process"
run cppp 4 "${args[@]}" --context-parallel-size "$cp" --pipeline-model-parallel-size 2
same one cppp "VLM: CP 2 x PP 2 and one process"
run one_fp32 1 "${fp32[@]}"
run cpdp_fp32 4 "${fp32[@]}" --context-parallel-size "$cp" --use-distributed-optimizer \
  --save ckpt --save-interval 2
close_losses one_fp32 cpdp_fp32 "VLM fp32: CP 2 x DP 2 with the distributed optimizer and one process"
# Its checkpoint of iteration 2 (the tower's state from the DP x CP optimizer shards) resumed in
# one process gives its iteration 3.
grep -q "saved checkpoint of iteration 2" cpdp_fp32.log || { cat cpdp_fp32.log; exit 1; }
run resumed 1 "${fp32[@]}" --load ckpt --ckpt-step 2
grep -q "continuing after iteration 2" resumed.log || { cat resumed.log; exit 1; }
tail -n 1 cpdp_fp32.txt > uninterrupted.txt
close_losses uninterrupted resumed "VLM fp32: CP 2 x DP 2's checkpoint resumed in one process and the uninterrupted run"
echo "VLM: CP 2, CP 2 x TP 2 (sequence parallel), CP 2 x DP 2 (distributed optimizer) and" \
     "CP 2 x PP 2 equal one process, with an image across CP chunks and ranks; CP 2 x DP 2's" \
     "checkpoint resumes in one process"
