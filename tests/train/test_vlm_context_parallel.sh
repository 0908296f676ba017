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
# Image-text data whose documents hold 1, 3 or no images (Note [present images] in
# gpt_vision.cpp: images_per_sample is 3, the tower runs on each micro-batch's present images
# only): CP 2 and PP 2 (two micro-batches in flight, so the tower's backward re-runs its forward
# on the right micro-batch's compacted images) print one process's figures.
/usr/bin/python3 - <<'PY'
import json, struct, zlib
def png(path, shift, size=16):
    raw = b"".join(b"\0" + bytes((x * 40 + y * 20 + c * 70 + shift) % 256 for x in range(size)
                                   for c in range(3)) for y in range(size))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size,
        8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for i in range(3): png("%d.png" % i, 50 * i)
with open("mixed.jsonl", "w") as f:
    for i in range(8):
        line = {"image": "%d.png" % (i % 3), "text": "%d 2 3 4 5 6 7 8" % (i + 1)}
        if i == 3: line = {"image": ["0.png", "1.png", "2.png"], "text": "5 6 7 8 9"}
        if i == 5: line = {"text": "6 4 5 6 7 8 9 10 11 12"}
        f.write(json.dumps(line) + "\n")
PY
"$lattice" data preprocess --images --input mixed.jsonl --output-prefix mixed \
  --tokenizer-type NullTokenizer --vocab-size 255 --image-size 16 > preprocess.log 2>&1 ||
  { cat preprocess.log; exit 1; }
mixed=(train --data-path mixed_text_document --split 100,0,0 --tokenizer-type NullTokenizer
       --vocab-size 255 --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --log-interval 1 --lr 1e-2
       --no-db --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --fp64
       --vision-model-type clip --vision-num-layers 2 --vision-hidden-size 16
       --vision-num-attention-heads 2 --img-h 16 --img-w 16 --patch-dim 8)
run mixed_one 1 "${mixed[@]}"
awk '/lm loss/ { n++ } END { exit n == 2 ? 0 : 1 }' mixed_one.log || { cat mixed_one.log; exit 1; }
run mixed_cp 2 "${mixed[@]}" --context-parallel-size "$cp"
same mixed_one mixed_cp "VLM on 0-, 1- and 3-image documents: CP 2 and one process"
run mixed_pp 2 "${mixed[@]}" --pipeline-model-parallel-size 2
same mixed_one mixed_pp "VLM on 0-, 1- and 3-image documents: PP 2 and one process"
echo "VLM: CP 2, CP 2 x TP 2 (sequence parallel), CP 2 x DP 2 (distributed optimizer) and" \
     "CP 2 x PP 2 equal one process, with an image across CP chunks and ranks; CP 2 x DP 2's" \
     "checkpoint resumes in one process; on documents of 0, 1 and 3 images CP 2 and PP 2 equal" \
     "one process"
