#!/usr/bin/env bash
# `lattice eval --task`: multiple-choice accuracy on questions whose answers are known from an
# independent float64 PyTorch forward of the same weights (eval_tasks_reference.py): acc and
# acc_norm (which differ on this set) equal the reference's, every choice's log-likelihood is
# within 1e-3, and a bad line is refused naming the file and line. Then --eval-tasks during
# training: printed, recorded in the run store, equal to `lattice eval --task` on the result.
# Then the same with images on a tiny vision-language model (questions with one or two images
# of several sizes at `<image>` markers, against the reference's LLaVA forward of the model's
# --save-hf files; the same questions with blank images score otherwise, as the reference
# says), --eval-tasks on that model, and the refusals of bad image questions.
# usage: test_eval_tasks.sh LATTICE   (skips, exit 77, without python3-torch, -numpy, -pil)
set -euo pipefail
lattice="$(readlink -f "$1")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=/usr/bin/python3  # Debian's, which python3-torch installs into (as test_torch_parity)
if ! "$python" -c "import torch, numpy, PIL" 2>/dev/null; then
  echo "SKIP: python3-torch, python3-numpy or python3-pil is not installed (installers/install-deps.sh --tests)"
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

# ---- Questions with images, on a vision-language model ----
# A tiny LLaVA-style model (GPT-2 decoder, CLIP tower of 2 layers, 16 px images of 4 patches)
# trained 40 iterations on the mock image-text stream, so that its image rows matter.
export LATTICE_DATA_DIR="$dir/data"
vlm=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --vocab-size 15
     --vision-model-type clip --vision-num-layers 2 --vision-hidden-size 16
     --vision-num-attention-heads 2 --img-h 16 --img-w 16 --patch-dim 8)
"$lattice" train --mock-data "${vlm[@]}" --micro-batch-size 2 --global-batch-size 4 \
  --train-iters 40 --lr 1e-2 --eval-iters 0 --no-db --save "$dir/vlm" --save-hf "$dir/vlm_hf" \
  >"$dir/vlm_train.log"
"$python" "$here/eval_tasks_reference.py" make-vlm "$dir/vlm_hf" 15 "$dir/vlm_task"
# From another folder: image paths are relative to the task file's folder.
cd "$dir"
"$lattice" eval --task vlm_task/task.jsonl --task vlm_task/task_blank.jsonl --load vlm \
  --output vlm_out.json | tee vlm_eval.log
"$python" "$here/eval_tasks_reference.py" check vlm_task/expected.json vlm_out.json 0
"$python" "$here/eval_tasks_reference.py" check vlm_task/expected_blank.json vlm_out.json 1
"$python" - vlm_out.json <<'PY'
import json, sys
real, blank = (t["loglikelihoods"] for t in json.load(open(sys.argv[1]))["tasks"])
change = [max(abs(a - b) for a, b in zip(r, k)) for r, k in zip(real, blank)]
assert min(change) > 1e-3, f"blank images leave question {change.index(min(change))} as it was"
print(f"the images are used: blank ones change every question's scores (by {min(change):.4f} "
      f"to {max(change):.4f})")
PY

# --eval-tasks on the vision-language model: resumed at lr 0 (the weights stay those above), the
# scores recorded at iterations 41 and 42 are the reference's, with images and with blank ones.
"$lattice" train --mock-data "${vlm[@]}" --micro-batch-size 2 --global-batch-size 4 \
  --train-iters 42 --lr 0 --eval-iters 0 --eval-interval 1 --load vlm --save vlm2 \
  --eval-tasks vlm_task/task.jsonl,vlm_task/task_blank.jsonl --db vlm_runs.sqlite >vlm_train2.log
"$lattice" runs export 1 --format json --db vlm_runs.sqlite --output vlm_run.json >/dev/null
"$python" - vlm_run.json <<'PY'
import json, sys
metrics = json.load(open(sys.argv[1]))["metrics"]
for task, expected in (("task.jsonl", "expected.json"), ("task_blank.jsonl", "expected_blank.json")):
    want = json.load(open(f"vlm_task/{expected}"))
    for name in ("acc", "acc_norm"):
        m = metrics[f"task vlm_task/{task} {name}"]
        assert m["steps"] == [41, 42], f"{task} {name} at steps {m['steps']}, not [41, 42]"
        assert m["values"] == [want[name]] * 2, f"{task} {name}: {m['values']}, reference {want[name]}"
print("--eval-tasks with images: the reference's acc and acc_norm at iterations 41 and 42")
PY

# Refused in one sentence naming the task file and line (and the image): before the model loads
# where the file alone tells, else before any question is scored.
refused() {  # $1: what stderr must hold; the rest: lattice's arguments
  local want=$1
  shift
  if "$lattice" "$@" >refused.out 2>refused.err; then
    echo "FAIL: accepted: lattice $*"
    exit 1
  fi
  grep -qF -- "$want" refused.err || { echo "FAIL: lattice $*: no '$want' in:"; cat refused.err; exit 1; }
  [ "$(wc -l <refused.err)" = 1 ] || { echo "FAIL: lattice $*: not one line:"; cat refused.err; exit 1; }
}
head -c 200 vlm_task/img/q0_0.png >vlm_task/img/truncated.png
printf 'not an image' >vlm_task/img/text.png
"$python" - vlm_task/task.jsonl <<'PY'
import json, sys
good = json.loads(open(sys.argv[1]).readline())
one = dict(good, context="<image>1 2", images=["img/q0_0.png"])
def write(name, bad):  # line 1 is good; line 2 is `bad`
    with open(f"vlm_task/{name}.jsonl", "w") as f:
        f.write(json.dumps(one) + "\n" + json.dumps(bad) + "\n")
write("count", dict(one, context="<image>1<image>2"))
write("not_list", dict(one, images="img/q0_0.png"))
write("not_strings", dict(one, images=[3]))
write("missing", dict(one, images=["img/missing.png"]))
write("text_file", dict(one, images=["img/text.png"]))
write("truncated", dict(one, images=["img/truncated.png"]))
write("choice_marker", dict(one, choices=[" 1", " <image>"]))
write("no_images", {"context": "<image>1 2", "choices": [" 1", " 2"], "label": 0})
PY
refused 'count.jsonl:2: the context has 2 <image> marker(s) for 1 file(s) in "images"' \
  eval --task vlm_task/count.jsonl --load vlm
refused 'not_list.jsonl:2: "images" must be a list of image file names (strings)' \
  eval --task vlm_task/not_list.jsonl --load vlm
refused 'not_strings.jsonl:2: "images" must be a list of image file names (strings)' \
  eval --task vlm_task/not_strings.jsonl --load vlm
refused "missing.jsonl:2: cannot open image 'vlm_task/img/missing.png'" \
  eval --task vlm_task/missing.jsonl --load vlm
refused "text_file.jsonl:2: image 'vlm_task/img/text.png' is neither a PNG nor a JPEG" \
  eval --task vlm_task/text_file.jsonl --load vlm
refused "truncated.jsonl:2: image 'vlm_task/img/truncated.png' is not a valid PNG or is truncated" \
  eval --task vlm_task/truncated.jsonl --load vlm
refused 'choice_marker.jsonl:2: the choice " <image>" holds <image>; images go in the context' \
  eval --task vlm_task/choice_marker.jsonl --load vlm
refused "no_images.jsonl:2: the question's text holds 1 <image> marker(s) but it gives no \"images\"" \
  eval --task vlm_task/no_images.jsonl --load vlm
refused 'task.jsonl:1: the question has "images", but the model has no vision tower (a text model)' \
  eval --task vlm_task/task.jsonl --load ckpt
refused 'task.jsonl:1: the question has "images", but the model has no vision tower (a text model)' \
  train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
  --vocab-size 300 --micro-batch-size 2 --train-iters 1 --eval-tasks vlm_task/task.jsonl --no-db
echo "PASS"
