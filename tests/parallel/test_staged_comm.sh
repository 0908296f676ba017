#!/bin/bash
# Device collectives through host memory (Note [device collectives through host memory] in
# engine/src/parallel/staged_comm.h): with LATTICE_DEVICE_COMM=host every device communicator of
# a run copies its buffers to the host and back around MPI, and a run must print the same lm
# loss, moe aux loss and grad norm, digit for digit, as with the device's own communicators, in
# every layout whose collectives differ: TP 2 with sequence parallelism, interleaved PP 2 x TP 2,
# CP 2 (the ring's isend and irecv), DP 2 x PP 2 with the distributed optimizer in bf16, and
# EP 2 x TP 2 (the all-to-all). A value the variable does not take is refused by name.
# usage: test_staged_comm.sh LATTICE MPIEXEC
set -euo pipefail
lattice=$1
mpiexec=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
source "$here/../model/moe_runs.sh"
base=(train --mock-data --vocab-size 255 --num-layers 4 --hidden-size 64
      --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 --global-batch-size 8
      --train-iters 3 --log-interval 1 --threads 1 --eval-iters 0 --no-db)
both() {  # both NAME RANKS FLAGS...: the run with each communicator, the same figures
  local name=$1 ranks=$2
  shift 2
  LATTICE_DEVICE_COMM=auto run "$name-auto" "$ranks" "${base[@]}" "$@"
  LATTICE_DEVICE_COMM=host run "$name-host" "$ranks" "${base[@]}" "$@"
  [[ $(wc -l < "$name-auto.txt") == 3 ]] || { cat "$name-auto.log"; exit 1; }
  same "$name-auto" "$name-host" "$name: the device's communicators and host staging"
}
both tp 2 --tensor-model-parallel-size 2 --sequence-parallel
both pp-tp 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --tensor-model-parallel-size 2
both cp 2 --context-parallel-size 2 --attention-dropout 0
both dp-pp 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --bf16
both ep-tp 4 --num-experts 4 --moe-router-topk 2 --expert-model-parallel-size 2 \
  --tensor-model-parallel-size 2
if LATTICE_DEVICE_COMM=nccl "$mpiexec" --oversubscribe -n 2 "$lattice" "${base[@]}" \
    --tensor-model-parallel-size 2 > bad.log 2>&1; then
  echo "LATTICE_DEVICE_COMM=nccl was accepted"; exit 1
fi
grep -q "LATTICE_DEVICE_COMM=nccl: expected host" bad.log || { cat bad.log; exit 1; }
echo "test_staged_comm: the same figures in 5 layouts; an unknown value refused"
