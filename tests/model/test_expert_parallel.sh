#!/bin/bash
# Expert parallelism (Note [expert parallelism] in engine/src/model/gpt_moe.cpp; docs/models.md
# "Mixture of experts"): `lattice train --fp64` of a 4-layer model with MoE on layers 0 and 2
# (4 experts, top-2, a large load-balancing loss) prints one process's lm loss, moe aux loss and
# grad norm on every iteration (the console's 7 significant digits) at
#   EP 2 on 2 ranks (DP 2, expert-data 1), EP 2 on 4 ranks (DP 4, expert-data 2) with and
#   without the distributed optimizer (the experts' state sharded over expert-data), EP 2 x PP 2
#   on 4 ranks, EP 2 x TP 2 x DP 2 on 4 ranks (with and without sequence parallelism), EP 2 x
#   CP 2 x DP 2 on 4 ranks, and EP 2 with token dropping (--moe-expert-capacity-factor 1, per
#   rank);
# and a checkpoint saved at EP 2 (each expert once, by its owner) resumes at EP 1, one saved
# at EP 1 resumes at EP 2, and one of EP 2 with the distributed optimizer at EP 1 without it,
# each continuing as the run that saved it; and the parameters after 3 iterations equal one
# process's within 1e-5 at EP 2 x TP 2 x DP 2 and at EP 2 with the distributed optimizer.
# (What EP refuses: test_layout_5d.)
# usage: test_expert_parallel.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
model=(train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --vocab-size 255 --micro-batch-size 1 --global-batch-size 4 --log-interval 1
       --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.5 --moe-layer-freq 2
       --lr 1e-2 --no-db --eval-iters 0 --hidden-dropout 0 --attention-dropout 0)
args=("${model[@]}" --fp64 --train-iters 3)
source "$here/moe_runs.sh"

run one 1 "${args[@]}"
[ "$(grep -c 'moe aux loss' one.txt)" = 3 ] ||
  { echo "one process: no moe aux loss on the 3 iteration lines"; cat one.log; exit 1; }
run ep2 2 "${args[@]}" --expert-model-parallel-size 2
same one ep2 "EP 2 on 2 ranks (DP 2) and one process"
run ep2dp4 4 "${args[@]}" --expert-model-parallel-size 2
same one ep2dp4 "EP 2 on 4 ranks (DP 4, expert-data 2) and one process"
run ep2dist 4 "${args[@]}" --expert-model-parallel-size 2 --use-distributed-optimizer
same one ep2dist "EP 2 on 4 ranks with the distributed optimizer and one process"
run ep2pp2 4 "${args[@]}" --expert-model-parallel-size 2 --pipeline-model-parallel-size 2
same one ep2pp2 "EP 2 x PP 2 on 4 ranks and one process"
# Tensor parallelism inside each expert (expert TP = TP): the all-to-all per TP rank.
run ep2tp2 4 "${args[@]}" --expert-model-parallel-size 2 --tensor-model-parallel-size 2
same one ep2tp2 "EP 2 x TP 2 x DP 2 on 4 ranks and one process"
run ep2tp2sp 4 "${args[@]}" --expert-model-parallel-size 2 --tensor-model-parallel-size 2 \
  --sequence-parallel
same one ep2tp2sp "EP 2 x TP 2 (sequence parallel) x DP 2 on 4 ranks and one process"
# Context parallelism beside EP (EP carved out of DP x CP; the aux loss's counts over CP).
run ep2cp2 4 "${args[@]}" --expert-model-parallel-size 2 --context-parallel-size 2
same one ep2cp2 "EP 2 x CP 2 x DP 2 on 4 ranks and one process"
run drop1 1 "${args[@]}" --moe-expert-capacity-factor 1
run drop2 2 "${args[@]}" --moe-expert-capacity-factor 1 --expert-model-parallel-size 2
same drop1 drop2 "EP 2 with --moe-expert-capacity-factor 1 and one process"

# Checkpoints (fp32: --save keeps fp32 state). Each run trains 4 iterations and saves after 2;
# the resumed run's iterations 3 and 4 are the saving run's. Both on 2 ranks, so that EP is
# the only difference: the forward rows meet the same weights bit for bit at any EP, and the
# experts' gradients are summed in another order, which the console's 7 digits do not show
# here (checked on lm loss, moe aux loss and grad norm).
# Resuming in another expert layout: fp32 runs (the checkpoints are fp32) whose aux loss sums its
# experts' shares over other ranks in another order, so the last printed digit may differ (from
# the same iteration-2 weights, EP 1 printed 1.045947 at iteration 3 and EP 2 1.045946): `close`,
# the suite's comparison for fp32 runs whose sums differ in order (moe_runs.sh), as the other
# MoE layout tests compare their resumes.
ck=("${model[@]}" --train-iters 4 --save-interval 2)
run save_ep2 2 "${ck[@]}" --expert-model-parallel-size 2 --save ck_ep2
python3 - ck_ep2/iter_0000002/metadata.json <<'PY'
import json, sys
pieces = json.load(open(sys.argv[1]))["pieces"]
names = [p["name"] for p in pieces if p["kind"] == "model"]
experts = [n for n in names if ".local_experts." in n]
# 2 MoE layers (0, 2) x 4 experts x linear_fc1 / linear_fc2 weight and bias
want = {f"decoder.layers.{l}.mlp.experts.local_experts.{e}.linear_fc{f}.{w}"
        for l in (0, 2) for e in range(4) for f in (1, 2) for w in ("weight", "bias")}
if sorted(experts) != sorted(want):
    sys.exit(f"the EP 2 checkpoint holds {len(experts)} expert pieces ({len(set(experts))} "
             f"names); want each of the {len(want)} expert tensors once")
# Each from its owner: experts 0 and 1 from EP rank 0 (world rank 0), 2 and 3 from world rank 1.
for p in pieces:
    if p["kind"] == "model" and ".local_experts." in p["name"]:
        owner = int(p["name"].split(".local_experts.")[1].split(".")[0]) // 2
        if p["file"] != f"rank_{owner:05d}.safetensors":
            sys.exit(f"{p['name']} was saved by {p['file']}, not by its owner, rank {owner}")
PY
run load_ep1 2 "${ck[@]}" --load ck_ep2 --ckpt-step 2 --save ck_unused
tail -n 2 save_ep2.txt > saved.txt
tail -n 2 load_ep1.txt > resumed.txt
[ "$(wc -l < resumed.txt)" = 2 ] && grep -qE "iteration +4/" resumed.txt ||
  { echo "EP 1 resume of the EP 2 checkpoint: no iterations 3 and 4"; cat load_ep1.log; exit 1; }
close saved resumed "iterations 3-4 resumed at EP 1 from the EP 2 checkpoint and the EP 2 run"
run save_ep1 2 "${ck[@]}" --save ck_ep1
run load_ep2 2 "${ck[@]}" --expert-model-parallel-size 2 --load ck_ep1 --ckpt-step 2 --save ck_unused2
tail -n 2 save_ep1.txt > saved.txt
tail -n 2 load_ep2.txt > resumed.txt
close saved resumed "iterations 3-4 resumed at EP 2 from the EP 1 checkpoint and the EP 1 run"
# The distributed optimizer's shards (the experts' over expert-data) on 4 ranks, resumed at EP 1
# without it.
run save_dist 4 "${ck[@]}" --expert-model-parallel-size 2 --use-distributed-optimizer --save ck_dist
run load_dist 4 "${ck[@]}" --load ck_dist --ckpt-step 2 --save ck_unused3
tail -n 2 save_dist.txt > saved.txt
tail -n 2 load_dist.txt > resumed.txt
close saved resumed "iterations 3-4 resumed at EP 1 from the EP 2 distributed-optimizer checkpoint"

# Parameters after 3 iterations (fp32, saved): one process against EP 2 x TP 2 x DP 2 and against
# EP 2 at DP 4 with the distributed optimizer, every tensor within 1e-5 of its largest
# magnitude (checkpoint_params.py assembles the TP slices and shards). --adam-eps 1e-2: with
# Adam's default 1e-8 a gradient that is pure rounding noise (the key bias's: softmax ignores
# it) moves its parameter by about lr whatever its sign, in any two summation orders.
pa=("${model[@]}" --train-iters 3 --adam-eps 1e-2)
run par1 1 "${pa[@]}" --save par1
run par_ep2tp2 4 "${pa[@]}" --expert-model-parallel-size 2 --tensor-model-parallel-size 2 \
  --save par_ep2tp2
run par_ep2dist 4 "${pa[@]}" --expert-model-parallel-size 2 --use-distributed-optimizer \
  --save par_ep2dist
for other in par_ep2tp2 par_ep2dist; do
  python3 "$here/checkpoint_params.py" par1/iter_0000003 "$other/iter_0000003" 1e-5 ||
    { echo "$other: parameters differ from one process's"; exit 1; }
done

echo "EP 2 (DP 2, DP 4, distributed optimizer, PP 2, TP 2, CP 2, token dropping) equals one"\
  "process; EP 2 <-> EP 1 checkpoints resume"
