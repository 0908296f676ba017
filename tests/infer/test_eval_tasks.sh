#!/usr/bin/env bash
# `lattice eval --task`: multiple-choice accuracy on questions whose answers are known from an
# independent float64 PyTorch forward of the same weights (eval_tasks_reference.py): acc and
# acc_norm (which differ on this set) equal the reference's, every choice's log-likelihood is
# within 1e-3, and a bad line is refused naming the file and line. Then --eval-tasks during
# training: printed, recorded in the run store, equal to `lattice eval --task` on the result.
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
# --eval-tasks: the same task scored on the training model every --eval-interval and at the
# end, printed and recorded in the run store ("task acc", "task acc_norm" and per task). The
# training resumes from the checkpoint above, so the score at its last iteration must equal
# `lattice eval --task` on what it saves (the same weights).
"$lattice" train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 32 --vocab-size 300 --micro-batch-size 2 --train-iters 5 --eval-iters 0 \
  --eval-interval 2 --eval-tasks "$dir/task.jsonl,$dir/task.jsonl" --load "$dir/ckpt" \
  --save "$dir/ckpt2" --db "$dir/runs2.sqlite" >"$dir/train2.log"
# Resumed at iteration 3: scored at 4 (--eval-interval) and 5 (the end), two files each.
grep -c " task $dir/task.jsonl at iteration [45] " "$dir/train2.log" | grep -qx 4 || {
  echo "FAIL: expected 4 task lines (2 files at iterations 4 and 5):"
  grep " task " "$dir/train2.log"
  exit 1
}
"$lattice" eval --task "$dir/task.jsonl" --load "$dir/ckpt2" --output "$dir/out2.json" >/dev/null
"$lattice" runs export 1 --format json --db "$dir/runs2.sqlite" --output "$dir/run2.json" >/dev/null
"$python" - "$dir/run2.json" "$dir/out2.json" "$dir/task.jsonl" <<'PY'
import json, sys
metrics = json.load(open(sys.argv[1]))["metrics"]
final = json.load(open(sys.argv[2]))["tasks"][0]
for key in ("task acc", "task acc_norm", f"task {sys.argv[3]} acc", f"task {sys.argv[3]} acc_norm"):
    assert key in metrics, f"the run store has no metric '{key}': {sorted(metrics)}"
    assert metrics[key]["steps"] == [4, 5], f"{key} at steps {metrics[key]['steps']}, not [4, 5]"
for name in ("acc", "acc_norm"):
    got = metrics[f"task {name}"]["values"][-1]
    assert got == final[name], f"task {name} at the last iteration {got}, lattice eval {final[name]}"
print(f"--eval-tasks: steps 4 and 5 recorded; at step 5 acc {final['acc']}, acc_norm "
      f"{final['acc_norm']}, as lattice eval on the saved checkpoint")
PY
echo "PASS"
