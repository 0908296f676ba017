#!/bin/bash
# Chat with images end to end (docs/vision.md, "Generation"): a tiny LLaVA-style model with
# Llama 3's real tokenizer and chat template (installers/fetch-hf-tokenizers.sh; skipped, exit
# 77, without it), trained a few steps by `lattice train` on image-text conversations that
# `lattice data preprocess --images` rendered through that template, and saved. `lattice serve`
# answers POST /v1/chat/completions (a text part and a PNG data-URL image_url part, greedy) with
# the tokens and log-probabilities `lattice generate --image` prints for the same conversation
# rendered by an independent renderer (Python's jinja2 on tokenizer_config.json's template) to
# the digit; /v1/completions and Megatron's PUT /api refuse a prompt holding <image> in one
# sentence (text prompts carry no images). The HTTP client is Python's urllib, as test_vlm_generate's.
# usage: test_vlm_chat.sh LATTICE
set -euo pipefail
lattice=$1
hf="${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}/hf-tokenizers/llama3"
py=/usr/bin/python3
if [ ! -f "$hf/tokenizer.json" ] || [ ! -f "$hf/tokenizer_config.json" ]; then
  echo "SKIP: Llama 3's tokenizer files missing in $hf (installers/fetch-hf-tokenizers.sh)"
  exit 77
fi
if ! $py -c "import jinja2" 2>/dev/null; then
  echo "SKIP: Python's jinja2 (python3-jinja2) is not installed"
  exit 77
fi
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
export LATTICE_DATA_DIR="$work/data"
mkdir -p data
# Solid-colour PNGs and one conversation per image: "What colour is this?" -> the colour.
$py - <<'PY'
import json, struct, zlib
def png(path, rgb, size=20):
    raw = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
colours = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220)}
with open("chat.jsonl", "w") as f:
    for name, rgb in colours.items():
        png(name + ".png", rgb)
        for _ in range(2):
            f.write(json.dumps({"messages": [
                {"role": "user", "content": [{"type": "text", "text": "What colour is this?"},
                                             {"type": "image", "image": name + ".png"}]},
                {"role": "assistant", "content": name}]}) + "\n")
PY
tok=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$hf/tokenizer.json")
"$lattice" data preprocess --images --input chat.jsonl --output-prefix data/chat "${tok[@]}" \
  --image-size 16 > prep.log 2>&1 || { cat prep.log; exit 1; }
"$lattice" train --data-path data/chat_text_document "${tok[@]}" --num-layers 2 \
  --hidden-size 32 --num-attention-heads 4 --seq-length 40 --vision-model-type clip \
  --vision-num-layers 1 --vision-hidden-size 16 --vision-num-attention-heads 2 --img-h 16 \
  --img-w 16 --patch-dim 8 --micro-batch-size 2 --global-batch-size 2 --train-iters 60 \
  --lr 1e-2 --eval-iters 0 --no-db --save vlm > train.log 2>&1 || { cat train.log; exit 1; }

# The conversation the server renders (a text part, then the image part as <image>), by jinja2.
$py - "$hf/tokenizer_config.json" > prompt.txt <<'PY'
import json, sys, jinja2
config = json.load(open(sys.argv[1]))
env = jinja2.Environment()
text = env.from_string(config["chat_template"]).render(
    messages=[{"role": "user", "content": "What colour is this?<image>"}],
    bos_token=config["bos_token"] if isinstance(config["bos_token"], str) else config["bos_token"]["content"],
    add_generation_prompt=True)
# The template writes the BOS; this tokenizer.json's post_processor (ByteLevel alone) adds none,
# so generate adds none either (a second one would change every log-probability below).
assert text.startswith("<|begin_of_text|>"), text
sys.stdout.write(text)
PY
prompt="$(cat prompt.txt; printf x)"  # $(...) alone drops the template's closing "\n\n"
"$lattice" generate --load vlm --image red.png --prompt "${prompt%x}" --temperature 0 \
  --tokens-to-generate 2 --logprobs > generate.out 2> generate.err ||
  { cat generate.err; exit 1; }

"$lattice" serve --load vlm --port 0 > serve.out 2> serve.err &
server_pid=$!
for _ in $(seq 100); do
  grep -q "http://127.0.0.1:" serve.out 2>/dev/null && break
  sleep 0.2
done
port=$(grep -oE "http://127\.0\.0\.1:[0-9]+" serve.out | head -n 1 | cut -d: -f3)
[ -n "$port" ] || { echo "serve did not start"; cat serve.out serve.err; exit 1; }
PORT=$port $py - <<'PY'
import base64, json, os, re, sys, urllib.request, urllib.error
base = "http://127.0.0.1:%s/" % os.environ["PORT"]
def post(path, body, method="POST"):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
data = "data:image/png;base64," + base64.b64encode(open("red.png", "rb").read()).decode()
status, answer = post("v1/chat/completions", {
    "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What colour is this?"},
        {"type": "image_url", "image_url": {"url": data}}]}],
    "max_tokens": 3, "temperature": 0, "logprobs": True, "stop": []})
if status != 200:
    sys.exit("chat: %d %r" % (status, answer))
served = [(t["token"], t["logprob"]) for t in answer["choices"][0]["logprobs"]["content"]]
reply = answer["choices"][0]["message"]["content"]
# generate --logprobs: the text, then a line per token: its id, log-probability (5 decimals) and
# text. The server stops at the template's end of turn (<|eot_id|>), which it does not show.
generated = []
for line in open("generate.out").read().splitlines():
    m = re.match(r"^\s*(\d+)\s+(-?[0-9.]+)\s+(.*)$", line)
    if m:
        generated.append((int(m.group(1)), float(m.group(2)), m.group(3)))
shown = [g for g in generated if g[2] != "<|eot_id|>"]
report = "generate:\n%s\nserve: %r %r" % (open("generate.out").read(), reply, served)
if not shown or len(served) < len(shown) or reply != "".join(g[2] for g in shown):
    sys.exit("the chat reply is not generate's text; " + report)
for (tok, lp), (gid, glp, text) in zip(served, generated):
    if tok != text or abs(lp - glp) > 6e-6:
        sys.exit("token %r: serve's log-probability %r, generate's %r; %s" % (tok, lp, glp, report))
if reply != "red":
    sys.exit("the trained model does not name the red image's colour; " + report)
print("chat reply %r = lattice generate's tokens %s" % (reply, generated))
# /v1/completions: text prompts carry no images.
prompt = open("prompt.txt").read()
status, answer = post("v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
if status != 400 or "send images to /v1/chat/completions" not in answer["error"]["message"]:
    sys.exit("a completion prompt with <image>: %d %r" % (status, answer))
# Megatron's PUT /api takes text prompts alike.
status, answer = post("api", {"prompts": [prompt], "tokens_to_generate": 1}, method="PUT")
if status != 400 or "send images to /v1/chat/completions" not in json.dumps(answer):
    sys.exit("a Megatron /api prompt with <image>: %d %r" % (status, answer))
PY
echo "ok"
