#!/bin/bash
# Expert TP strictly between 1 and TP (Note [expert tensor parallelism e] in
# engine/src/model/gpt_moe.cpp; docs/models.md "Mixture of experts"): TP 4 with
# --expert-tensor-parallel-size 2 on 4 ranks, the TP group's ranks forming two expert-TP groups
# of 2, each routing half of the tokens, each expert split over its group. `lattice train --fp64`
# of a 4-layer model with MoE on layers 0 and 2 (4 experts, top-2, a large load-balancing loss,
# no token dropping) prints one process's lm loss, moe aux loss and grad norm on every iteration
# at TP 4 x ETP 2 (EP 1: expert-data 2, the groups' expert gradients summed), with
# --sequence-parallel, with EP 2 (the all-to-alls between the ranks of one expert-TP
# coordinate), and on 8 ranks with DP 2 and the distributed optimizer and with CP 2; the parameters after 3 iterations (fp32) equal one process's within 1e-5 at
# TP 4 x ETP 2 x EP 2 (sequence parallel); its checkpoint holds each expert slice once, and
# resumes in one process and at TP 2 (expert TP = TP), the parameters 2 iterations later within
# 1e-5 of the run that saved it.
# usage: test_expert_tensor_parallel_groups.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# --make-vocab-size-divisible-by 32: the same padded vocabulary (256) at TP 1, 2 and 4.
model=(train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --vocab-size 255 --make-vocab-size-divisible-by 32 --micro-batch-size 1
       --global-batch-size 4 --log-interval 1 --num-experts 4 --moe-router-topk 2
       --moe-aux-loss-coeff 0.5 --moe-layer-freq 2 --lr 1e-2 --no-db --eval-iters 0
       --hidden-dropout 0 --attention-dropout 0)
args=("${model[@]}" --fp64 --train-iters 3)
etp2=(--tensor-model-parallel-size 4 --expert-tensor-parallel-size 2)
source "$here/moe_runs.sh"

run one 1 "${args[@]}"
[ "$(grep -c 'moe aux loss' one.txt)" = 3 ] ||
  { echo "one process: no moe aux loss on the 3 iteration lines"; cat one.log; exit 1; }
run etp2 4 "${args[@]}" "${etp2[@]}"
same one etp2 "TP 4 x ETP 2 on 4 ranks and one process"
run etp2sp 4 "${args[@]}" "${etp2[@]}" --sequence-parallel
same one etp2sp "TP 4 x ETP 2 (sequence parallel) on 4 ranks and one process"
run etp2ep2 4 "${args[@]}" "${etp2[@]}" --expert-model-parallel-size 2 --sequence-parallel
same one etp2ep2 "TP 4 x ETP 2 x EP 2 (sequence parallel) on 4 ranks and one process"
# 8 ranks: DP 2 with the distributed optimizer (the experts' state sharded over expert-data 4),
# and CP 2 (the route counts summed over TP and CP).
run etp2dist 8 "${args[@]}" "${etp2[@]}" --sequence-parallel --use-distributed-optimizer
same one etp2dist "TP 4 x ETP 2 x DP 2 with the distributed optimizer and one process"
run etp2cp2 8 "${args[@]}" "${etp2[@]}" --context-parallel-size 2
same one etp2cp2 "TP 4 x ETP 2 x CP 2 on 8 ranks and one process"

# Parameters after 3 iterations (fp32, saved), every tensor within 1e-5 of its largest magnitude
# (checkpoint_params.py; --adam-eps 1e-2 as test_expert_tensor_parallel).
pa=("${model[@]}" --train-iters 3 --adam-eps 1e-2)
run par1 1 "${pa[@]}" --save par1
run par_etp2 4 "${pa[@]}" "${etp2[@]}" --expert-model-parallel-size 2 --sequence-parallel \
  --save par_etp2
python3 "$here/checkpoint_params.py" par1/iter_0000003 par_etp2/iter_0000003 1e-5 ||
  { echo "TP 4 x ETP 2 x EP 2: parameters differ from one process's"; exit 1; }
python3 - par_etp2/iter_0000003/metadata.json <<'PY'
import collections, json, sys
pieces = json.load(open(sys.argv[1]))["pieces"]
experts = [p for p in pieces if p["kind"] == "model" and ".local_experts." in p["name"]]
by_name = collections.defaultdict(list)
for p in experts:
    by_name[p["name"]].append(p)
want = {f"decoder.layers.{l}.mlp.experts.local_experts.{e}.linear_fc{f}.{w}"
        for l in (0, 2) for e in range(4) for f in (1, 2) for w in ("weight", "bias")}
if set(by_name) != want:
    sys.exit(f"the ETP 2 checkpoint names {len(by_name)} expert tensors; want {len(want)}")
for name, ps in by_name.items():
    # fc2's bias is replicated over the expert-TP group (saved once); the rest split in 2.
    split = not name.endswith("linear_fc2.bias")
    if len(ps) != (2 if split else 1) or any((p["split_dim"] >= 0) != split for p in ps):
        sys.exit(f"{name}: {len(ps)} pieces split along {[p['split_dim'] for p in ps]}; "
                 f"want {'2 halves' if split else 'one whole piece'}")
PY

# Resharding: the ETP 2 run's iteration-2 checkpoint (weights and Adam moments) resumed in one
# process and at TP 2 (expert TP = TP) trains on to the saving run's iteration-4 parameters.
ck=("${model[@]}" --train-iters 4 --save-interval 2 --adam-eps 1e-2)
run save_etp2 4 "${ck[@]}" "${etp2[@]}" --expert-model-parallel-size 2 --sequence-parallel \
  --save ck_etp2
tail -n 2 save_etp2.txt > saved.txt
run load_one 1 "${ck[@]}" --load ck_etp2 --ckpt-step 2 --save ck_one
run load_tp2 2 "${ck[@]}" --tensor-model-parallel-size 2 --load ck_etp2 --ckpt-step 2 \
  --save ck_tp2
for resumed in load_one load_tp2; do
  grep -q "continuing after iteration 2" "$resumed.log" || { cat "$resumed.log"; exit 1; }
  close saved "$resumed" "iterations 3-4 of the ETP 2 run and $resumed"
done
for resumed in ck_one ck_tp2; do
  python3 "$here/checkpoint_params.py" ck_etp2/iter_0000004 "$resumed/iter_0000004" 1e-5 ||
    { echo "$resumed: parameters after resuming the ETP 2 checkpoint differ"; exit 1; }
done

echo "TP 4 x ETP 2 (with sequence parallelism, with EP 2) equals one process; the ETP 2" \
     "checkpoint holds each expert slice once and resumes at TP 1 and at TP 2"
