#!/bin/bash
# `lattice generate --image` and `lattice serve`'s image content parts on a tiny LLaVA-style
# model (docs/vision.md, "Generation"): trained on the mock image-text stream (a solid-colour
# image whose colour the caption's first token names: colour c -> token 1 + c) and saved, then
# greedy generation from the prompt "<image>" alone (the mock's sequences start with the image)
# gives the token of each image's colour; the same call twice gives the same output; errors (an
# image on a text model, a missing file, more images than <image> markers, a prompt past the
# context) are refused with a sentence. The server: a chat message with a PNG data URL part
# answers with the colour's token, an http URL is refused (the server fetches nothing). With
# MPIEXEC: TP 2 (every rank runs the whole tower) prints what one process prints.
# usage: test_vlm_generate.sh LATTICE [MPIEXEC]
set -euo pipefail
lattice=$1
mpiexec=${2:-}
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
export LATTICE_DATA_DIR="$work/data"
py=/usr/bin/python3
# Solid-colour PNGs of the mock stream's palette (colours 0, 1, 2: red, green, blue).
$py - <<'PY'
import struct, zlib
def png(path, rgb, size=20):
    raw = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
png("red.png", (220, 40, 40)); png("green.png", (40, 180, 60)); png("blue.png", (40, 80, 220))
PY
printf 'not an image' > corrupt.png
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 15
       --vision-model-type clip --vision-num-layers 1 --vision-hidden-size 16
       --vision-num-attention-heads 2 --img-h 16 --img-w 16 --patch-dim 8)
"$lattice" train --mock-data "${model[@]}" --micro-batch-size 4 --global-batch-size 8 \
  --train-iters 60 --lr 1e-2 --log-interval 20 --no-db --eval-iters 0 --hidden-dropout 0 \
  --attention-dropout 0 --save vlm > train.log 2>&1 || { cat train.log; exit 1; }
gen=(generate --load vlm --prompt "<image>" --tokens-to-generate 2 --temperature 0 --ignore-eod)
first_token() {  # the first generated id of `lattice generate --image $1` (NullTokenizer: ids)
  "$lattice" "${gen[@]}" --image "$1" > "$1.out" 2> "$1.err" || { cat "$1.err"; exit 1; }
  sed 's/^<image>//' "$1.out" | awk '{ print $1 }'
}
for pair in red.png:1 green.png:2 blue.png:3; do
  got=$(first_token "${pair%%:*}")
  if [ "$got" != "${pair##*:}" ]; then
    echo "--image ${pair%%:*}: first token $got, the mock caption's ${pair##*:}"
    cat "${pair%%:*}.out"; tail -n 4 train.log; exit 1
  fi
done
"$lattice" "${gen[@]}" --image red.png > again.out 2>&1
cmp -s red.png.out again.out || { echo "two runs differ"; cat red.png.out again.out; exit 1; }
if [ -n "$mpiexec" ]; then  # the same tokens, log-probabilities within 2e-5
  "$lattice" "${gen[@]}" --image blue.png --logprobs > tp1.out
  OMP_NUM_THREADS=1 "$mpiexec" --oversubscribe -n 2 "$lattice" "${gen[@]}" --image blue.png \
    --logprobs --tensor-model-parallel-size 2 > tp2.out 2> tp2.err || { cat tp2.err; exit 1; }
  paste tp1.out tp2.out | awk 'NR == 1 { if ($1 != $3 || $2 != $4) exit 1; next }
    { d = $2 - $5; if ($1 != $4 || d > 2e-5 || d < -2e-5) exit 1 }' ||
    { echo "TP 2 differs from one process"; cat tp1.out tp2.out; exit 1; }
fi
refused() {  # $1: what the error must say; the rest: generate's arguments
  local want=$1; shift
  if "$lattice" generate "$@" > refused.out 2>&1; then
    echo "accepted: generate $*"; cat refused.out; exit 1
  fi
  grep -q -- "$want" refused.out || { echo "generate $*: no '$want' in:"; cat refused.out; exit 1; }
}
refused "missing.png" "${gen[@]:1}" --image missing.png
refused "corrupt.png" "${gen[@]:1}" --image corrupt.png
refused "2 --image(s)" "${gen[@]:1}" --image red.png --image blue.png
refused "context is 16" "${gen[@]:1}" --image red.png --prompt "<image>1 2 3 4 5 6 7 8 9 10 11 12 13"
"$lattice" train --mock-data --num-layers 1 --hidden-size 32 --num-attention-heads 4 \
  --seq-length 16 --vocab-size 15 --micro-batch-size 2 --train-iters 1 --no-db --eval-iters 0 \
  --save text > text.log 2>&1 || { cat text.log; exit 1; }
refused "no vision tower" --load text --prompt "1 2" --image red.png

# The server: the chat template renders the messages' contents alone (NullTokenizer ids).
printf '%s' "{% for m in messages %}{{ m['content'] }}{% endfor %}" > content.jinja
"$lattice" serve --load vlm --port 0 --chat-template content.jinja > serve.out 2> serve.err &
server_pid=$!
for _ in $(seq 100); do
  grep -q "http://127.0.0.1:" serve.out 2>/dev/null && break
  sleep 0.2
done
port=$(grep -oE "http://127\.0\.0\.1:[0-9]+" serve.out | head -n 1 | cut -d: -f3)
[ -n "$port" ] || { echo "serve did not start"; cat serve.out serve.err; exit 1; }
PORT=$port $py - <<'PY'
import base64, json, os, sys, urllib.request, urllib.error
url = "http://127.0.0.1:%s/v1/chat/completions" % os.environ["PORT"]
def chat(part):
    body = {"messages": [{"role": "user", "content": [part]}], "max_tokens": 1,
            "temperature": 0, "logprobs": True}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
for name, token in (("red.png", "1"), ("blue.png", "3")):
    data = "data:image/png;base64," + base64.b64encode(open(name, "rb").read()).decode()
    status, answer = chat({"type": "image_url", "image_url": {"url": data}})
    got = answer["choices"][0]["logprobs"]["content"][0]["token"] if status == 200 else answer
    if got != token:
        sys.exit("chat with %s: got %r, want token %s" % (name, got, token))
status, answer = chat({"type": "image_url", "image_url": {"url": "http://example.com/x.png"}})
if status != 400 or "does not fetch" not in answer["error"]["message"]:
    sys.exit("an http image URL: %d %r" % (status, answer))
PY
echo "ok"
