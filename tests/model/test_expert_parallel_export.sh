#!/bin/bash
# The whole model gathered under expert parallelism (Note [gathering experts] in
# engine/src/parallel/model_chunks.cpp): a Mixtral-shaped model (RoPE, RMSNorm, SwiGLU experts in
# every layer, 4 experts, top-2) trained 3 iterations (--fp64) with --save-hf and --eval-tasks
# at EP 2 on 2 ranks (DP 2, expert-data 1), EP 2 on 4 ranks with the distributed optimizer
# (expert-data 2), EP 2 x TP 2 (expert TP 2 and 1) and EP 2 x PP 2 writes the Mixtral files (every tensor,
# block_sparse_moe.gate and experts.N.w1/w2/w3 included) of the same run at EP 1 (DP 2 on 2
# ranks) byte for byte, and scores the task as it does. (The experts' gradients are summed in
# another order at EP 2, Note [expert parallelism] in model/gpt_moe.cpp; in fp64 that stays
# below the float32 rounding of the export here.)
# usage: test_expert_parallel_export.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
source "$here/moe_runs.sh"

# A multiple-choice task of 40 questions over the NullTokenizer's ids, labels at random; each
# choice one token, so that the scores follow the model's next-token preferences (with the
# large --init-method-std below every expert moves them: gathered without the experts of EP
# rank 1, the scores differ).
python3 - <<'PY'
import json, random
rng = random.Random(5)
with open("task.jsonl", "w") as f:
    for _ in range(40):
        context = " ".join(str(rng.randrange(254)) for _ in range(rng.randrange(2, 8)))
        choices = [f" {c}" for c in rng.sample(range(254), 4)]
        f.write(json.dumps({"context": context, "choices": choices,
                            "label": rng.randrange(4)}) + "\n")
PY
args=(train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --vocab-size 255 --micro-batch-size 1 --global-batch-size 4 --log-interval 1
      --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 64
      --untie-embeddings-and-output-weights --disable-bias-linear
      --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.01
      --init-method-std 0.3 --lr 1e-2 --no-db --eval-iters 0 --hidden-dropout 0 --attention-dropout 0
      --fp64 --train-iters 3 --eval-tasks task.jsonl)
# scores NAME: NAME.log's task lines (acc and acc_norm at the last iteration).
scores() { grep -oE " task task.jsonl at iteration 3 .*" "$1.log" > "$1.scores" || true; }

run one 2 "${args[@]}" --save-hf one
scores one
[ -s one.scores ] || { echo "EP 1: no task score at iteration 3"; cat one.log; exit 1; }
# The export holds Mixtral's names, the experts' included (2 layers x 4 experts x w1, w2, w3).
python3 - one/model.safetensors <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    names = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
want = {f"model.layers.{l}.block_sparse_moe.{t}.weight" for l in (0, 1)
        for t in ["gate"] + [f"experts.{e}.w{w}" for e in range(4) for w in (1, 2, 3)]}
missing = want - set(names)
assert not missing, f"the EP 1 export lacks {sorted(missing)}"
PY
for case in "ep2 2 --expert-model-parallel-size 2" \
            "ep2dist 4 --expert-model-parallel-size 2 --use-distributed-optimizer" \
            "ep2tp2 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2" \
            "ep2pp2 4 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2" \
            "ep2tp2etp1 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1"; do
  set -- $case
  name=$1 ranks=$2
  shift 2
  run "$name" "$ranks" "${args[@]}" "$@" --save-hf "$name"
  same one "$name" "$name: the iteration lines of $* and of EP 1"
  scores "$name"
  diff one.scores "$name.scores" ||
    { echo "$name: --eval-tasks scores differ from EP 1's (above: EP 1 < > $*)"; exit 1; }
  for f in model.safetensors config.json; do
    cmp "one/$f" "$name/$f" || { echo "$name: $f differs from EP 1's ($*)"; exit 1; }
  done
  echo "$name ($*): the Mixtral files byte for byte EP 1's; $(cat "$name.scores")"
done
echo "--save-hf and --eval-tasks at EP 2 (DP 2, expert-data 2, TP 2 at expert TP 2 and 1, PP 2) equal EP 1's"
