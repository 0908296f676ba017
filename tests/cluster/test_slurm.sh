#!/usr/bin/env bash
# `lattice launch --target slurm` on a real single-node Slurm cluster that this test starts
# (slurm_cluster.sh) and always stops. Cases: the demo plan (tiny) with 2 tasks through srun
# --mpi=pmix and through mpirun inside the allocation, each followed to completion and
# giving the same losses, bit for bit, as `mpirun -n 2` run directly; scancel mid-run leaves
# a checkpoint and a run recorded as killed; `scontrol requeue` mid-run makes the job resume
# from its checkpoint as run <name>-r1, continuing the first attempt's losses exactly; so does
# SIGUSR1 to the batch shell (the time-limit warning), after which the job requeues itself;
# `lattice runs import` of the job's store twice keeps one copy.
# Usage: test_slurm.sh LATTICE MPIRUN   (exit 77: skipped, not root or Slurm not installed)
set -euo pipefail

lattice=${1:?usage: test_slurm.sh LATTICE MPIRUN}
mpirun=${2:?usage: test_slurm.sh LATTICE MPIRUN}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
bash "$here/slurm_cluster.sh" check || exit $?

work=$(mktemp -d /tmp/lattice-slurm-test.XXXXXX)
ok=0
cleanup() {
  # Jobs first (their ranks), then the daemons.
  if [[ -f $work/cluster/env ]]; then scancel --user=root 2>/dev/null || true; fi
  bash "$here/slurm_cluster.sh" stop "$work/cluster"
  if [[ $ok == 1 ]]; then rm -rf "$work"; else echo "test_slurm: kept $work for a look" >&2; fi
}
trap cleanup EXIT
start=$SECONDS
step() { echo "--- [$((SECONDS - start)) s] $*"; }
fail() {
  echo "FAIL: $*" >&2
  tail -n 30 "$work"/cluster/log/slurmd.log >&2 || true
  exit 1
}

step "starting the cluster"
bash "$here/slurm_cluster.sh" start "$work/cluster"
source "$work/cluster/env"

step "demo corpus"
"$lattice" data demo >/dev/null
data_dir=${LATTICE_DATA_DIR:-$HOME/.local/share/lattice}
# The demo plan, made tiny: the demo corpus and tokenizer, a 2-layer model, 12 iterations.
flags=(--config "$source_dir/resources/configs/demo.json"
       --data-path "$data_dir/demo/fortunes_text_document"
       --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model "$data_dir/demo/fortunes.model"
       --num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --lr-warmup-iters 2 --lr-decay-iters 40
       --eval-interval 6 --eval-iters 1 --log-interval 1 --threads 1)
export OMP_NUM_THREADS=1

# "step value" lines of a run's lm loss, all digits.
losses() {  # DB [RUN_NAME]
  sqlite3 "$1" "SELECT m.step, printf('%.17g', m.value) FROM metrics m
    JOIN metric_keys k ON k.id = m.key_id JOIN runs r ON r.id = m.run_id
    WHERE k.name = 'lm loss' ${2:+AND r.name = '$2'} ORDER BY m.step"
}
job_state() { scontrol show job -o "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_until() {  # SECONDS CONDITION...
  local limit=$1
  shift
  for _ in $(seq 1 $((limit * 5))); do
    if "$@"; then return 0; fi
    sleep 0.2
  done
  return 1
}

step "direct: mpirun -n 2"
timeout 120 "$mpirun" --oversubscribe -n 2 "$lattice" train "${flags[@]}" --train-iters 12 \
  --db "$work/direct.sqlite" --run-name direct >"$work/direct.log" 2>&1 ||
  fail "mpirun -n 2 lattice train failed: $(tail -n 5 "$work/direct.log")"
direct=$(losses "$work/direct.sqlite")
[[ $(wc -l <<<"$direct") == 12 ]] || fail "the direct run logged $(wc -l <<<"$direct") losses"

for launcher in srun mpirun; do
  step "lattice launch --target slurm --launcher $launcher, followed to the end"
  out=$work/eq-$launcher
  # Bounded: a job that never starts would be followed forever.
  timeout 180 "$lattice" launch --target slurm --world-size 2 --launcher "$launcher" --job-name "eq-$launcher" \
    --output-dir "$out" --poll-ms 500 "${flags[@]}" --train-iters 12 >"$work/launch-$launcher.log" 2>&1 ||
    fail "lattice launch ($launcher) did not complete: $(tail -n 20 "$work/launch-$launcher.log")"
  grep -q "submitted batch job" "$work/launch-$launcher.log" || fail "no job id printed"
  grep -q "COMPLETED" "$work/launch-$launcher.log" || fail "the state COMPLETED was not printed"
  grep -q "iteration       12/      12" "$work/launch-$launcher.log" ||
    fail "the job's log was not tailed: $(tail -n 20 "$work/launch-$launcher.log")"
  got=$(losses "$out/runs.sqlite")
  if [[ $got != "$direct" ]]; then
    diff <(echo "$direct") <(echo "$got") >&2 || true
    fail "losses of the $launcher job differ from mpirun -n 2 run directly"
  fi
  [[ $(sqlite3 "$out/runs.sqlite" "SELECT status FROM runs") == finished ]] ||
    fail "the $launcher job's run is not recorded as finished"
  echo "losses equal bit for bit (12 iterations)"
done

step "lattice runs import, twice"
"$lattice" runs import "$work/eq-srun/runs.sqlite" --db "$work/home.sqlite" | grep -q "1 added" ||
  fail "the first import added no run"
"$lattice" runs import "$work/eq-srun/runs.sqlite" --db "$work/home.sqlite" |
  grep -q "0 added, 0 updated, 1 unchanged" || fail "the second import was not a no-op"
[[ $(sqlite3 "$work/home.sqlite" "SELECT count(*) FROM runs") == 1 ]] || fail "two copies"
[[ $(losses "$work/home.sqlite") == "$direct" ]] || fail "the imported losses differ"

step "scancel mid-run: a checkpoint and a run recorded killed"
out=$work/cancel
id=$("$lattice" launch --target slurm --world-size 2 --job-name cancel --output-dir "$out" \
  --no-follow "${flags[@]}" --train-iters 3000 2>/dev/null | awk '/submitted batch job/ {print $4}')
[[ -n $id ]] || fail "no job id"
steps_of() {  # DB RUN_NAME: how many steps the run logged
  sqlite3 "$1" "SELECT count(DISTINCT m.step) FROM metrics m JOIN runs r ON r.id = m.run_id
    WHERE r.name = '$2'" 2>/dev/null || echo 0
}
logging() { [[ $(steps_of "$out/runs.sqlite" "cancel-$id") -ge 5 ]]; }
wait_until 60 logging || fail "job $id logged no steps: $(tail -n 5 "$out"/*.err 2>/dev/null)"
"$lattice" launch cancel "$id" || fail "lattice launch cancel $id"
cancelled() { [[ $(job_state "$id") == CANCELLED ]]; }
wait_until 60 cancelled || fail "job $id not cancelled: $(job_state "$id")"
run_status() { sqlite3 "$out/runs.sqlite" "SELECT status FROM runs WHERE name = '$1'"; }
killed() { [[ $(run_status "cancel-$id") == killed ]]; }
wait_until 30 killed || fail "the cancelled run is recorded '$(run_status "cancel-$id")', not killed"
[[ -f $out/checkpoints/latest_checkpointed_iteration.txt ]] || fail "no checkpoint in $out"
last=$(sqlite3 "$out/runs.sqlite" "SELECT max(step) FROM metrics")
saved=$(cat "$out/checkpoints/latest_checkpointed_iteration.txt")
[[ $saved == "$last" ]] || fail "checkpoint of iteration $saved, but the run logged up to $last"
echo "killed at iteration $saved with a checkpoint of it"

# The reference for the requeue cases: the same flags run directly, stopped after
# $reference_steps iterations (--exit-interval). A first attempt runs tens of steps between
# the poll that sees it logging and its save (97 seen), so the reference reaches well beyond.
reference_steps=300
timeout 120 "$mpirun" --oversubscribe -n 2 "$lattice" train "${flags[@]}" --train-iters 3000 \
  --exit-interval $reference_steps --db "$work/direct.sqlite" --run-name reference >"$work/reference.log" 2>&1 ||
  fail "the reference run failed: $(tail -n 5 "$work/reference.log")"
reference=$(losses "$work/direct.sqlite" reference)
submit() {  # JOB_NAME [FLAGS...]: a 3000-iteration job, not followed; prints its id
  local name=$1
  shift
  "$lattice" launch --target slurm --world-size 2 --job-name "$name" --output-dir "$out" \
    --no-follow "${flags[@]}" --train-iters 3000 "$@" 2>/dev/null | awk '/submitted batch job/ {print $4}'
}
# Slurm holds a requeued job back for a while (Reason=BeginTime); let it start now, but not
# before the previous attempt's step daemons are gone (the new step would find its PMIx
# socket still bound: Slurm's own hold is what prevents that on a real cluster).
release() {
  [[ $(job_state "$id") == PENDING ]] && ! pgrep -f "slurmstepd: \[$id\." >/dev/null &&
    scontrol update JobId="$id" StartTime=now
}
# The job NAME-ID was requeued: its second attempt NAME-ID-r1 loads the checkpoint and
# continues where the first stopped, both with the uninterrupted reference's losses.
check_resumed() {  # NAME
  local first=$1-$id second=$1-$id-r1
  wait_until 30 release || fail "job $id could not be released: $(job_state "$id")"
  second_logging() { [[ $(steps_of "$out/runs.sqlite" "$second") -ge 3 ]]; }
  wait_until 120 second_logging ||
    fail "no second attempt $second logging ($(job_state "$id")): $(tail -n 5 "$out"/*.err)"
  scancel "$id"
  wait_until 60 cancelled || fail "job $id not cancelled"
  [[ $(run_status "$first") == killed ]] || fail "the first attempt is '$(run_status "$first")', not killed"
  grep -q "^> loaded .*checkpoints" "$out/$first.out" || fail "the second attempt did not load"
  local first_end second_start got missing
  first_end=$(sqlite3 "$out/runs.sqlite" "SELECT max(m.step) FROM metrics m JOIN runs r ON
    r.id = m.run_id WHERE r.name = '$first'")
  second_start=$(sqlite3 "$out/runs.sqlite" "SELECT min(m.step) FROM metrics m JOIN runs r ON
    r.id = m.run_id WHERE r.name = '$second'")
  [[ $second_start == $((first_end + 1)) ]] ||
    fail "the first attempt ended at step $first_end, the second began at $second_start"
  # Both attempts' losses equal the uninterrupted reference, bit for bit, where it has them.
  for run in "$first" "$second"; do
    got=$(losses "$out/runs.sqlite" "$run" | awk -F'|' -v n=$reference_steps '$1 <= n')
    [[ -n $got ]] || fail "$run logged no step up to $reference_steps to compare"
    missing=$(comm -23 <(sort <<<"$got") <(sort <<<"$reference"))
    [[ -z $missing ]] || fail "$run's losses differ from the uninterrupted run: $missing"
  done
  echo "attempt 1 ran steps 1-$first_end, attempt 2 resumed at $second_start; losses as uninterrupted"
}

step "scontrol requeue mid-run: the job resumes from its checkpoint"
out=$work/requeue
id=$(submit rq --save-interval 10)
[[ -n $id ]] || fail "no job id"
saved() { [[ -f $out/checkpoints/latest_checkpointed_iteration.txt ]]; }
wait_until 60 saved || fail "job $id saved no checkpoint"
scontrol requeue "$id" || fail "scontrol requeue $id"
check_resumed rq

step "the time-limit warning (SIGUSR1 to the batch shell): save, requeue itself, resume"
# What #SBATCH --signal=B:USR1@120 sends 120 s before the limit, sent now. No
# --save-interval: the only checkpoint is the one the signal makes.
out=$work/timelimit
id=$(submit tl)
[[ -n $id ]] || fail "no job id"
logging() { [[ $(steps_of "$out/runs.sqlite" "tl-$id") -ge 5 ]]; }
wait_until 60 logging || fail "job $id logged no steps: $(tail -n 5 "$out"/*.err 2>/dev/null)"
scancel --signal=USR1 --batch "$id" || fail "scancel --signal=USR1 --batch $id"
requeueing() { grep -q "saved before the time limit; requeueing job $id" "$out/tl-$id.err"; }
wait_until 60 requeueing || fail "job $id did not requeue itself: $(tail -n 5 "$out/tl-$id.err")"
saved_at=$(cat "$out/checkpoints/latest_checkpointed_iteration.txt")
last=$(sqlite3 "$out/runs.sqlite" "SELECT max(m.step) FROM metrics m JOIN runs r ON
  r.id = m.run_id WHERE r.name = 'tl-$id'")
[[ $saved_at == "$last" ]] || fail "checkpoint of iteration $saved_at, but the run logged up to $last"
check_resumed tl

ok=1
step "all cases passed"
