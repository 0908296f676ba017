#!/usr/bin/env bash
# `lattice serve` under OpenAI's own Node client (npm `openai`, installed by
# installers/fetch-openai-client.sh): chat completions with and without stream, a bad role,
# completions with echo + logprobs as lm-evaluation-harness asks, checked by
# openai_client_check.js. The model: the tests' tiny GPT-2 over GPT-2's 50257 ids, trained
# two steps on mock data, served with GPT-2's tokenizer (its built-in chat template).
# usage: test_serve_openai_client.sh LATTICE   (exit 77, skipped, without node or the client)
set -euo pipefail
lattice="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data_dir="${LATTICE_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/lattice}"
client="$data_dir/openai-client/node_modules/openai"
gpt2="$data_dir/gpt2"
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed (installers/install-deps.sh)"
  exit 77
fi
if [[ ! -f "$client/package.json" ]]; then
  echo "SKIP: the openai npm client is not in $client (installers/fetch-openai-client.sh)"
  exit 77
fi
if [[ ! -f "$gpt2/vocab.json" || ! -f "$gpt2/merges.txt" ]]; then
  echo "SKIP: GPT-2's vocabulary is not in $gpt2 (installers/fetch-gpt2-vocab.sh)"
  exit 77
fi
dir="$(mktemp -d)"
server=""
cleanup() {
  if [[ -n "$server" ]]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

"$lattice" train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 64 --vocab-size 50257 --micro-batch-size 2 --train-iters 2 --eval-iters 0 \
  --save "$dir/ckpt" --db "$dir/runs.sqlite" >"$dir/train.log"

"$lattice" serve --load "$dir/ckpt" --port 0 --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$gpt2/vocab.json" --merge-file "$gpt2/merges.txt" >"$dir/serve.log" 2>&1 &
server=$!
port=""
for _ in $(seq 1 600); do
  port="$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$dir/serve.log" | head -n 1)"
  [[ -n "$port" ]] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$port" ]]; then
  echo "FAIL: lattice serve did not start:"
  cat "$dir/serve.log"
  exit 1
fi
node "$here/openai_client_check.js" "$port" "$client"
