#!/bin/bash
# `lattice eval` on a vision-language checkpoint and image-text data (docs/evaluation.md): a tiny
# LLaVA-style model trained a few steps by `lattice train` on 12 captioned solid-colour images
# (NullTokenizer ids) with --split 1,1,0, so its validation split is documents 6-11, and
# --eval-interval at the last iteration; the checkpoint saved there, evaluated by `lattice eval`
# on the same 6 documents preprocessed as their own dataset (the same tokens and images, in the
# same order), prints the validation loss the trainer printed, to every printed digit. The
# captions' first token names the image's colour, so a loss that ignored the images would differ.
# Refused in one sentence: the VLM on text-only data, a text model on image-text data (which
# itself evaluates text data from its checkpoint).
# usage: test_vlm_eval.sh LATTICE
set -euo pipefail
lattice=$1
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
cd "$work"
export LATTICE_DATA_DIR="$work/data"
py=/usr/bin/python3
# 12 images of 6 colours; caption "1+c 7 8" for colour c (ids below --vocab-size 15).
$py - <<'PY'
import json, struct, zlib
def png(path, rgb, size=20):
    raw = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
colours = [(220, 40, 40), (40, 180, 60), (40, 80, 220), (230, 220, 50), (150, 60, 170), (250, 140, 30)]
lines = []
for i in range(12):
    c = (i * 5) % 6
    png("img%d.png" % i, colours[c])
    lines.append(json.dumps({"image": "img%d.png" % i, "text": "%d 7 8" % (1 + c)}))
open("all.jsonl", "w").write("\n".join(lines) + "\n")
open("valid.jsonl", "w").write("\n".join(lines[6:]) + "\n")
open("text.jsonl", "w").write("\n".join(json.dumps({"text": "1 2 3 4 5 6"}) for _ in range(4)) + "\n")
PY
mkdir -p data
tok=(--tokenizer-type NullTokenizer --vocab-size 15)
for name in all valid; do
  "$lattice" data preprocess --images --input $name.jsonl --output-prefix data/$name "${tok[@]}" \
    --image-size 16 > prep_$name.log 2>&1 || { cat prep_$name.log; exit 1; }
done
"$lattice" data preprocess --input text.jsonl --output-prefix data/text "${tok[@]}" \
  > prep_text.log 2>&1 || { cat prep_text.log; exit 1; }
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --vision-model-type clip --vision-num-layers 1 --vision-hidden-size 16
       --vision-num-attention-heads 2 --img-h 16 --img-w 16 --patch-dim 8)
"$lattice" train --data-path data/all_text_document --split 1,1,0 "${tok[@]}" "${model[@]}" \
  --micro-batch-size 2 --global-batch-size 6 --train-iters 4 --lr 1e-2 --eval-interval 4 \
  --eval-iters 1 --no-db --save vlm > train.log 2>&1 || { cat train.log; exit 1; }
want=$(grep -oE "validation loss at iteration 4 \| lm loss value: [0-9.E+-]+" train.log |
  awk '{ print $NF }')
[ -n "$want" ] || { echo "no validation loss at iteration 4 in train.log"; cat train.log; exit 1; }
"$lattice" eval --load vlm --data-path data/valid_text_document --eval-iters 6 \
  --micro-batch-size 2 > eval.out 2> eval.err || { cat eval.out eval.err; exit 1; }
got=$(grep -oE "lm loss: [0-9.E+-]+" eval.out | awk '{ print $NF }')
# 6 documents of 3 caption tokens and EOD: 24 targets.
grep -q "evaluated 6 samples (24 tokens)" eval.out || { echo "unexpected counts:"; cat eval.out; exit 1; }
if [ "$got" != "$want" ]; then
  echo "lattice eval's loss $got differs from the trainer's validation loss $want"
  cat eval.out; grep "validation" train.log; exit 1
fi

refused() {  # $1: what the error must say; the rest: eval's arguments
  local want=$1; shift
  if "$lattice" eval "$@" > refused.out 2>&1; then
    echo "accepted: eval $*"; cat refused.out; exit 1
  fi
  grep -q -- "$want" refused.out || { echo "eval $*: no '$want' in:"; cat refused.out; exit 1; }
  [ "$(wc -l < refused.out)" = 1 ] || { echo "eval $*: not one sentence:"; cat refused.out; exit 1; }
}
refused "is text-only (no data/text_text_document_images.json), but the model in" \
  --load vlm --data-path data/text_text_document --eval-iters 2
"$lattice" train --mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 4 \
  --seq-length 16 --vocab-size 15 --micro-batch-size 2 --train-iters 1 --no-db --eval-iters 0 \
  --save text > text.log 2>&1 || { cat text.log; exit 1; }
# A text checkpoint on text data is evaluated (--load, the checkpoint's architecture).
"$lattice" eval --load text --data-path data/text_text_document --eval-iters 1 > text_eval.out \
  2>&1 || { cat text_eval.out; exit 1; }
grep -q "evaluated 1 samples (16 tokens)" text_eval.out || { cat text_eval.out; exit 1; }
refused "is image-text data (data/valid_text_document_images.json), but the model in" \
  --load text --data-path data/valid_text_document --eval-iters 2
refused "holds only 6" --load vlm --data-path data/valid_text_document --eval-iters 7
echo "ok: lattice eval $got = the trainer's validation loss $want"
