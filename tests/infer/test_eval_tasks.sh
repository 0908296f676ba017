#!/usr/bin/env bash
# `lattice eval --task`: multiple-choice accuracy on questions whose answers are known from an
# independent float64 PyTorch forward of the same weights (eval_tasks_reference.py): acc and
# acc_norm (which differ on this set) equal the reference's, every choice's log-likelihood is
# within 1e-3, and a bad line is refused naming the file and line.
# usage: test_eval_tasks.sh LATTICE   (skips, exit 77, without python3-torch)
set -euo pipefail
lattice="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=/usr/bin/python3  # Debian's, which python3-torch installs into (as test_torch_parity)
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "SKIP: python3-torch is not installed (installers/install-deps.sh --tests)"
  exit 77
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

# The tests' tiny GPT-2 (2 layers, hidden 64, 4 heads, NullTokenizer over 300 ids), trained a
# few steps so that its weights are not the initialisation's.
"$lattice" train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 32 --vocab-size 300 --micro-batch-size 2 --train-iters 3 --eval-iters 0 \
  --save "$dir/ckpt" --save-hf "$dir/hf/model.safetensors" --db "$dir/runs.sqlite" >"$dir/train.log"

"$python" "$here/eval_tasks_reference.py" make "$dir/hf/model.safetensors" 4 300 \
  "$dir/task.jsonl" "$dir/expected.json"
"$lattice" eval --task "$dir/task.jsonl" --load "$dir/ckpt" --output "$dir/out.json" | tee "$dir/eval.log"
"$python" "$here/eval_tasks_reference.py" check "$dir/expected.json" "$dir/out.json"
# The last stdout line is the scores as JSON.
tail -n 1 "$dir/eval.log" | "$python" -c 'import json,sys; t=json.load(sys.stdin)["tasks"][0]; assert set(t)=={"task","questions","acc","acc_norm"}, t'

# A bad line: refused before the model loads, naming the file and the line.
{ head -n 2 "$dir/task.jsonl"; echo '{"context": "1 2", "choices": [" 3", " 4"], "label": 2}'; } >"$dir/bad.jsonl"
if "$lattice" eval --task "$dir/bad.jsonl" --load "$dir/ckpt" 2>"$dir/bad.err"; then
  echo "FAIL: a label outside the choices was accepted"
  exit 1
fi
grep -q "bad.jsonl:3: \"label\" must be an integer index into \"choices\" (0 to 1)" "$dir/bad.err" || {
  echo "FAIL: the error does not name the file and line:"
  cat "$dir/bad.err"
  exit 1
}
echo "PASS"
