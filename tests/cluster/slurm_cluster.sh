#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for tests: Debian's slurm-wlm and munge,
# configured in a directory of their own (key, sockets, state, spool, logs) and started as
# root; nothing under /etc is touched. Used by test_slurm.sh, and by any test that needs a
# cluster (a Qt test can run `slurm_cluster.sh start DIR` and read DIR/env).
#
#   slurm_cluster.sh check            exit 0 when a cluster can start here, 77 (with the
#                                     reason on stderr) when not root or packages are missing
#   slurm_cluster.sh start DIR        start munged, slurmctld and slurmd; wait until the node
#                                     is idle; write DIR/env (export SLURM_CONF=...)
#   slurm_cluster.sh stop DIR         stop the daemons started from DIR (by their pid files)
#
# start also leaves a reaper behind: when the process that ran `start` exits (a test that
# finished, crashed or was killed by a timeout before its own cleanup), the reaper cancels the
# cluster's jobs and stops its daemons, so no daemons outlive the test.
#
# The node is this host (`hostname -s`) with its CPUs, oversubscription allowed (OverSubscribe
# =FORCE), proctrack/linuxproc and task/none (no cgroups), no accounting storage: job states
# come from scontrol, and finished jobs are appended to DIR/jobcomp.txt. PMIx keeps its step
# directories in DIR/pmix (mpi.conf).
set -euo pipefail

sbin=/usr/sbin
need=("$sbin/munged" "$sbin/slurmctld" "$sbin/slurmd" /usr/bin/sbatch /usr/bin/scontrol
      /usr/bin/squeue /usr/bin/scancel)

check() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "slurm_cluster: skipped: slurmctld and slurmd must be started as root here" >&2
    return 77
  fi
  for f in "${need[@]}"; do
    if [[ ! -x $f ]]; then
      echo "slurm_cluster: skipped: $f is missing (installers/install-deps.sh --tests installs" \
           "slurm-wlm and munge)" >&2
      return 77
    fi
  done
}

start() {
  local dir=$1 host cpus port_base
  mkdir -p "$dir"/{munge,state,spool,log,pmix}
  dir=$(cd "$dir" && pwd)
  host=$(hostname -s)
  cpus=$(nproc --all)  # plain nproc honours OMP_NUM_THREADS, which tests set to 1
  # Ports of our own (not 6817/6818), derived from the directory, so two clusters can coexist.
  port_base=$((20000 + $(cksum <<<"$dir" | cut -d' ' -f1) % 20000))
  chmod 0700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  cat >"$dir/slurm.conf" <<EOF
ClusterName=lattice-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port_base
SlurmdPort=$((port_base + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  # PMIx's per-step client directories (spmix_appdir_<uid>_<job>.<step>) go under the cluster's
  # own directory, not /tmp: job ids restart at 1 on every new cluster, so a directory that a
  # killed step left in /tmp would make the same step of a later cluster fail to launch.
  echo "PMIxCliTmpDirBase=$dir/pmix" >"$dir/mpi.conf"
  "$sbin/munged" --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munge.seed"
  export SLURM_CONF=$dir/slurm.conf
  "$sbin/slurmctld" -f "$SLURM_CONF"
  "$sbin/slurmd" -f "$SLURM_CONF" -N "$host"
  echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env"
  local state=""
  for _ in $(seq 1 60); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    if [[ $state == idle* ]]; then
      echo "slurm_cluster: node $host idle ($cpus CPUs); source $dir/env" >&2
      # Detached, and off the caller's pipes (a caller reading our output to its end must
      # not wait for the reaper).
      setsid bash "${BASH_SOURCE[0]}" reap "$dir" "$PPID" </dev/null >/dev/null 2>&1 &
      return 0
    fi
    sleep 0.5
  done
  echo "slurm_cluster: node $host did not become idle (state '$state'); logs in $dir/log" >&2
  tail -n 20 "$dir"/log/*.log >&2 || true
  return 1
}

stop() {
  local dir=$1 pid
  for name in slurmd slurmctld munged; do
    [[ -f $dir/$name.pid ]] || continue
    pid=$(cat "$dir/$name.pid")
    if [[ -n $pid ]] && kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/$name.pid"
  done
}

# Waits for OWNER to exit; then, if the cluster in DIR is still up, cancels its jobs (their
# ranks) and stops it.
reap() {
  local dir=$1 owner=$2
  while kill -0 "$owner" 2>/dev/null; do sleep 1; done
  [[ -f $dir/slurmctld.pid ]] || return 0
  SLURM_CONF=$dir/slurm.conf timeout 10 scancel --user=root 2>/dev/null || true
  sleep 2
  stop "$dir"
}

case "${1:-}" in
  check) check ;;
  start)
    check
    start "${2:?usage: slurm_cluster.sh start DIR}"
    ;;
  stop) stop "${2:?usage: slurm_cluster.sh stop DIR}" ;;
  reap) reap "${2:?}" "${3:?}" ;;
  *)
    echo "usage: slurm_cluster.sh check | start DIR | stop DIR" >&2
    exit 2
    ;;
esac
