#!/bin/bash
# Expert TP 1 under TP (Note [expert tensor parallelism 1] in engine/src/model/gpt_moe.cpp;
# docs/models.md "Mixture of experts"): attention split over TP 2, every expert whole on its rank,
# each TP rank routing its own half of the tokens. `lattice train --fp64` of a 4-layer model with
# MoE on layers 0 and 2 (4 experts, top-2, a large load-balancing loss) prints one process's lm
# loss, moe aux loss and grad norm on every iteration (the console's 7 significant digits) at
#   TP 2 x EP 2 x ETP 1 on 4 ranks (DP 2, expert-data 2: the EP group is the TP group), with and
#   without --sequence-parallel, with the distributed optimizer (the experts' state sharded over
#   expert-data), and TP 2 x ETP 1 at EP 1 on 2 ranks (DP 1: the experts' gradients summed over
#   the TP ranks, their expert-data group), beside CP 2 (the route counts summed over TP and CP)
#   and PP 2 on 4 ranks, and on 4 ranks with the distributed optimizer (the experts sharded over
#   expert-data 4, the rest over DP 2);
# the parameters after 3 iterations (fp32) equal one process's within 1e-5 at TP 2 x EP 2 x ETP 1
# (sequence parallel) with and without the distributed optimizer; its checkpoint holds each
# expert once, whole, from its owner, and resumes in one process and at TP 2 x EP 2 with expert
# TP = TP (resharded), the parameters 2 iterations later within 1e-5 of the run that saved it.
# usage: test_expert_tensor_parallel.sh LATTICE MPIEXEC
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
etp1=(--tensor-model-parallel-size 2 --expert-tensor-parallel-size 1)
source "$here/moe_runs.sh"

run one 1 "${args[@]}"
[ "$(grep -c 'moe aux loss' one.txt)" = 3 ] ||
  { echo "one process: no moe aux loss on the 3 iteration lines"; cat one.log; exit 1; }
run etp1 4 "${args[@]}" "${etp1[@]}" --expert-model-parallel-size 2
same one etp1 "TP 2 x EP 2 x ETP 1 on 4 ranks and one process"
run etp1sp 4 "${args[@]}" "${etp1[@]}" --expert-model-parallel-size 2 --sequence-parallel
same one etp1sp "TP 2 x EP 2 x ETP 1 (sequence parallel) on 4 ranks and one process"
run etp1dist 4 "${args[@]}" "${etp1[@]}" --expert-model-parallel-size 2 --sequence-parallel \
  --use-distributed-optimizer
same one etp1dist "TP 2 x EP 2 x ETP 1 with the distributed optimizer and one process"
run etp1ep1 2 "${args[@]}" "${etp1[@]}"
same one etp1ep1 "TP 2 x ETP 1 at EP 1 on 2 ranks and one process"
run etp1cp2 4 "${args[@]}" "${etp1[@]}" --context-parallel-size 2
same one etp1cp2 "TP 2 x ETP 1 x CP 2 on 4 ranks (route counts over TP and CP) and one process"
run etp1pp2 4 "${args[@]}" "${etp1[@]}" --pipeline-model-parallel-size 2 --sequence-parallel
same one etp1pp2 "TP 2 x ETP 1 x PP 2 (sequence parallel) on 4 ranks and one process"
run etp1ep1dist 4 "${args[@]}" "${etp1[@]}" --use-distributed-optimizer
same one etp1ep1dist \
  "TP 2 x ETP 1 at EP 1 on 4 ranks (expert-data 4, DP 2, distributed optimizer) and one process"

# Parameters after 3 iterations (fp32, saved), every tensor within 1e-5 of its largest magnitude
# (checkpoint_params.py; --adam-eps 1e-2 as test_expert_parallel: a gradient of pure rounding
# noise would otherwise move its parameter by about lr either way).
pa=("${model[@]}" --train-iters 3 --adam-eps 1e-2)
run par1 1 "${pa[@]}" --save par1
run par_etp1 4 "${pa[@]}" "${etp1[@]}" --expert-model-parallel-size 2 --sequence-parallel \
  --save par_etp1
run par_etp1dist 4 "${pa[@]}" "${etp1[@]}" --expert-model-parallel-size 2 \
  --use-distributed-optimizer --save par_etp1dist
for other in par_etp1 par_etp1dist; do
  python3 "$here/checkpoint_params.py" par1/iter_0000003 "$other/iter_0000003" 1e-5 ||
    { echo "$other: parameters differ from one process's"; exit 1; }
done
python3 - par_etp1/iter_0000003/metadata.json <<'PY'
import json, sys
pieces = json.load(open(sys.argv[1]))["pieces"]
experts = [p for p in pieces if p["kind"] == "model" and ".local_experts." in p["name"]]
# 2 MoE layers (0, 2) x 4 experts x linear_fc1 / linear_fc2 weight and bias
want = {f"decoder.layers.{l}.mlp.experts.local_experts.{e}.linear_fc{f}.{w}"
        for l in (0, 2) for e in range(4) for f in (1, 2) for w in ("weight", "bias")}
names = [p["name"] for p in experts]
if sorted(names) != sorted(want):
    sys.exit(f"the ETP 1 checkpoint holds {len(names)} expert pieces ({len(set(names))} names); "
             f"want each of the {len(want)} expert tensors once")
for p in experts:
    if p["split_dim"] != -1:
        sys.exit(f"{p['name']} was saved split along {p['split_dim']}; expert TP 1 keeps it whole")
    # Expert grid rank = ep + 2 edp: experts 0, 1 on EP rank 0 (rank 0), 2, 3 on rank 1.
    owner = int(p["name"].split(".local_experts.")[1].split(".")[0]) // 2
    if p["file"] != f"rank_{owner:05d}.safetensors":
        sys.exit(f"{p['name']} was saved by {p['file']}, not by its owner, rank {owner}")
PY

# Resharding: the ETP 1 run's iteration-2 checkpoint (weights and Adam moments) resumed in one
# process and at expert TP = TP (each expert split over TP 2) trains on to the saving run's
# iteration-4 parameters (and its losses, as fp32 rounding allows).
ck=("${model[@]}" --train-iters 4 --save-interval 2 --adam-eps 1e-2)
run save_etp1 4 "${ck[@]}" "${etp1[@]}" --expert-model-parallel-size 2 --sequence-parallel \
  --save ck_etp1
tail -n 2 save_etp1.txt > saved.txt
run load_one 1 "${ck[@]}" --load ck_etp1 --ckpt-step 2 --save ck_one
run load_etp2 4 "${ck[@]}" --tensor-model-parallel-size 2 --expert-model-parallel-size 2 \
  --load ck_etp1 --ckpt-step 2 --save ck_etp2
for resumed in load_one load_etp2; do
  grep -q "continuing after iteration 2" "$resumed.log" || { cat "$resumed.log"; exit 1; }
  close saved "$resumed" "iterations 3-4 of the ETP 1 run and $resumed"
done
for resumed in ck_one ck_etp2; do
  python3 "$here/checkpoint_params.py" ck_etp1/iter_0000004 "$resumed/iter_0000004" 1e-5 ||
    { echo "$resumed: parameters after resuming the ETP 1 checkpoint differ"; exit 1; }
done

# `lattice ckpt` on the ETP 1 checkpoint: inspect names the expert grid; reshard to TP 1 x PP 2
# (experts whole, on their pipeline stage) and back to TP 2 x EP 2 x ETP 1 keeps every tensor
# bit for bit, and the round trip, resumed at the saving layout, trains on to the saving run's
# iteration-4 parameters bit for bit (its Adam moments came through too).
"$lattice" ckpt inspect ck_etp1/iter_0000002 > inspect.txt
grep -q "^layout      TP 2, PP 1, DP 2, EP 2, expert TP 1$" inspect.txt &&
  grep -q ", 4 experts (top 2) on 1 layer in 2 " inspect.txt ||
  { echo "ckpt inspect does not name the expert grid and the experts:"; cat inspect.txt; exit 1; }
"$lattice" ckpt reshard ck_etp1/iter_0000002 r_pp2 --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 2 > reshard.log
"$lattice" ckpt reshard r_pp2 r_etp1 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 1 --expert-model-parallel-size 2 \
  --expert-tensor-parallel-size 1 >> reshard.log
grep -q "^layout      TP 2, PP 1, DP 1, EP 2, expert TP 1$" <("$lattice" ckpt inspect r_etp1) ||
  { echo "the resharded checkpoint's layout:"; "$lattice" ckpt inspect r_etp1; exit 1; }
python3 "$here/checkpoint_params.py" ck_etp1/iter_0000002 r_etp1/iter_0000002 0 ||
  { echo "ckpt reshard through TP 1 x PP 2 changed the ETP 1 checkpoint's parameters"; exit 1; }
run load_round 4 "${ck[@]}" "${etp1[@]}" --expert-model-parallel-size 2 --sequence-parallel \
  --load r_etp1 --save ck_round
same saved load_round "iterations 3-4 of the ETP 1 run and of its resharded round trip"
python3 "$here/checkpoint_params.py" ck_etp1/iter_0000004 ck_round/iter_0000004 0 ||
  { echo "the resharded round trip trains on to other parameters"; exit 1; }

echo "TP 2 x EP 2 x ETP 1 (with and without sequence parallelism, distributed optimizer) and" \
     "TP 2 x ETP 1 equal one process; the ETP 1 checkpoint resumes at TP 1 and at ETP = TP," \
     "and survives lattice ckpt reshard bit for bit"
