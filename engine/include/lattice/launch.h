// Launching a training job beyond `lattice train` in one terminal: on this machine under
// mpirun, on the hosts of an MPI hostfile, or as a Slurm batch job. Pure and Qt-free, shared
// by `lattice launch` and the Studio's Launch view: a LaunchSpec in, the exact command or
// batch script out, plus every reason it cannot run. Nothing here starts a process; the
// parsers at the end read what sbatch and scontrol print. docs/cluster.md is the user guide.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lattice/status.h"

namespace lattice::launch {

enum class Target { kLocal, kHostfile, kSlurm };
// How the nodes of a hostfile job talk: Open MPI's TCP transport or UCX over InfiniBand.
enum class Network { kTcp, kInfiniband };
// What starts the ranks inside a Slurm allocation.
enum class Launcher { kSrun, kMpirun };

const char* target_name(Target t);      // "local", "hostfile", "slurm"
const char* network_name(Network n);    // "tcp", "ib"
const char* launcher_name(Launcher l);  // "srun", "mpirun"
std::optional<Target> parse_target(const std::string& text);
std::optional<Network> parse_network(const std::string& text);  // "tcp", "ib" or "infiniband"
std::optional<Launcher> parse_launcher(const std::string& text);

struct LaunchSpec {
  Target target = Target::kLocal;
  int world_size = 1;     // ranks in the job; the layout is checked against it
  int nodes = 1;          // ranks are spread evenly: ranks / nodes per node
  int gpus_per_node = 0;  // 0: a CPU job (no --gpus-per-node line)
  int cpus_per_task = 0;  // 0: left to the scheduler (hostfile/local: not bound)
  std::string time;       // Slurm time limit: MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]; empty: none
  std::string partition, account;  // Slurm; empty: the cluster's defaults
  std::string hostfile;            // kHostfile: Open MPI hostfile ("host slots=N" lines)
  Network network = Network::kTcp;
  std::string network_interface;  // kTcp: btl/oob_tcp_if_include (e.g. eth0, 10.0.0.0/24)
  Launcher launcher = Launcher::kSrun;
  std::string output_dir;  // absolute for Slurm: script, logs, run store and checkpoints
  std::string job_name = "lattice";
  // Slurm: #SBATCH --requeue, checkpoints in output_dir/checkpoints (--save/--load unless the
  // train flags name their own), and SIGUSR1 to the ranks signal_seconds before the time
  // limit, after which the script requeues the job (Note [requeue and resume] in launch.cpp).
  bool requeue = true;
  int signal_seconds = 120;
  std::string lattice = "lattice";  // the program each rank runs (absolute path for Slurm)
  std::string mpirun = "mpirun";
  bool allow_run_as_root = false;       // mpirun --allow-run-as-root (the user is root)
  int local_cores = 0;                  // kLocal: more ranks than this oversubscribes; 0 unknown
  std::vector<std::string> train_args;  // `lattice train` flags (Megatron names)
};

struct LaunchPlan {
  // What to run now: kLocal and kHostfile the mpirun (or lattice) argv itself; kSlurm
  // `sbatch --parsable <script_path>`.
  std::vector<std::string> argv;
  std::string script;          // kSlurm: the batch script, to write to script_path
  std::string script_path;     // kSlurm: output_dir/<job_name>.sbatch
  std::string db_path;         // where the job records its run (kSlurm: output_dir/runs.sqlite)
  std::string save_dir;        // checkpoints the job saves and resumes from; empty: none
  std::string stdout_pattern;  // kSlurm: the log files, %j for the job id
  std::string stderr_pattern;
  int tasks_per_node = 1;
  std::vector<std::string> notes;  // worth knowing, not blocking (MCA settings explained)
};

// Every reason the spec cannot launch, one sentence each naming the flag and value: ranks
// not divisible by --nodes, more tasks per node than GPUs or hostfile slots, a bad --time,
// a missing hostfile, train flags `lattice train` would refuse, a layout that does not fit
// the world size. Reads the hostfile (and nothing else) from disk.
std::vector<std::string> validate(const LaunchSpec& spec);

// The command or script for a valid spec; a Status listing validate()'s errors otherwise.
Result<LaunchPlan> plan_launch(const LaunchSpec& spec);

// Seconds in a Slurm time limit ("30" minutes, "1:30" min:sec, "12:00:00", "2-00", "2-12:30",
// "2-12:30:00"); an error naming --time and the accepted forms otherwise.
Result<long> parse_time_limit(const std::string& text);

// The MCA settings a multi-node mpirun needs for this network, with one line of why each:
// pairs of (argv words, explanation). The same settings plan_launch puts into the command.
struct McaSetting {
  std::vector<std::string> args;
  std::string why;
};
std::vector<McaSetting> network_settings(Network network, const std::string& interface);

// ---- Open MPI hostfiles ----------------------------------------------------------------
struct HostfileEntry {
  std::string host;
  int num_slots = 1;  // "slots=N"; 1 when absent (Open MPI's default). Not `slots`: a Qt macro
};
// The hosts of an Open MPI hostfile ("host [slots=N] [max_slots=M]", # comments); errors
// name the file and line.
Result<std::vector<HostfileEntry>> read_hostfile(const std::string& path);

// ---- Slurm's answers -------------------------------------------------------------------
// The job id of `sbatch --parsable` ("123" or "123;cluster") or of plain sbatch
// ("Submitted batch job 123").
Result<std::string> parse_sbatch_output(const std::string& text);

struct JobInfo {
  std::string id;
  std::string state;      // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
  std::string reason;     // "None", "Resources", "Priority", "NonZeroExitCode", ...
  std::string exit_code;  // "0:0" (exit status:signal)
  int restarts = 0;       // Restarts=N: how often it was requeued
  std::string stdout_path, stderr_path;
  bool ended() const;  // a terminal state: nothing more will happen to it
};
// One job from `scontrol show job -o ID` (key=value words on one line; StdOut and StdErr
// may hold spaces only as the last words, which scontrol does not quote).
Result<JobInfo> parse_scontrol_job(const std::string& text);
// The accounting database's words on a job that slurmctld has forgotten (after MinJobAge):
// the columns that kSacctArgs asks for, one row per attempt (--duplicates), the latest last.
// No log paths: sacct of Slurm 22.05 has none.
inline constexpr const char* kSacctArgs[] = {"--allocations", "--duplicates", "--noheader",
                                             "--parsable2", "--format=JobID,State,ExitCode,Reason"};
Result<JobInfo> parse_sacct_job(const std::string& text, const std::string& id);

// `word` quoted for a POSIX shell only where needed; a command's words joined so.
std::string shell_quote(const std::string& word);
std::string shell_command(const std::vector<std::string>& argv);

}  // namespace lattice::launch
