// lattice launch: a training job on this machine, the hosts of an MPI hostfile, or a Slurm
// cluster. The command and the batch script come from the launch library
// (lattice/launch.h), which the Studio's Launch view shares; this file parses flags, runs
// sbatch / scontrol / scancel and follows a job until it ends. docs/cluster.md is the guide.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "commands.h"
#include "lattice/flags.h"
#include "lattice/launch.h"

namespace lattice::cli {
namespace {

namespace fs = std::filesystem;
using launch::JobInfo;
using launch::LaunchPlan;
using launch::LaunchSpec;

struct Captured {
  int exit_code = -1;  // -1: could not start or killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs argv (no shell) to its end and returns what it printed.
Captured run_capture(const std::vector<std::string>& argv) {
  Captured c;
  int fds[2];
  if (pipe(fds) != 0) return c;
  const pid_t pid = fork();
  if (pid < 0) return c;
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> words;
    for (const std::string& a : argv) words.push_back(const_cast<char*>(a.c_str()));
    words.push_back(nullptr);
    execvp(words[0], words.data());
    std::fprintf(stderr, "cannot run %s: %s\n", words[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) c.output.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) c.exit_code = WEXITSTATUS(status);
  return c;
}

std::string this_program() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("lattice") : self.string();
}

std::string clock_time() {
  const std::time_t t = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
  return buf;
}

std::string timestamp() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

// Prints what `path` gained since *offset (a requeued job appends to the same file).
void tail_file(const std::string& path, std::streamoff* offset, std::ostream& out) {
  if (path.empty()) return;
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < *offset) *offset = 0;  // truncated: start again
  if (size == *offset) return;
  in.seekg(*offset);
  std::string chunk(static_cast<size_t>(size - *offset), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  *offset = size;
  out << chunk << std::flush;
}

// slurmctld's view of the job; once it has forgotten a finished job (MinJobAge, 300 s by
// default), the accounting database's (sacct), where the cluster keeps one.
Result<JobInfo> job_info(const std::string& id) {
  const Captured c = run_capture({"scontrol", "show", "job", "-o", id});
  if (c.exit_code == 0) return launch::parse_scontrol_job(c.output);
  std::vector<std::string> sacct = {"sacct", "--jobs=" + id};
  sacct.insert(sacct.end(), std::begin(launch::kSacctArgs), std::end(launch::kSacctArgs));
  const Captured a = run_capture(sacct);
  if (a.exit_code == 0)
    if (Result<JobInfo> job = launch::parse_sacct_job(a.output, id); job) return job;
  return Status::invalid_argument("scontrol show job " + id + ": " +
                                  (c.output.empty() ? std::string("cannot run scontrol")
                                                    : c.output.substr(0, c.output.find('\n'))) +
                                  " (and sacct has no record of it)");
}

std::string describe_state(const JobInfo& job) {
  std::string s = job.state;
  if (!job.reason.empty() && job.reason != "None") s += " (" + job.reason + ")";
  if (job.restarts > 0) s += ", requeued " + std::to_string(job.restarts) + "x";
  return s;
}

// Polls scontrol until the job ends, printing each state change and the job's log as it
// grows. 0 when it completed, 1 otherwise.
int follow_job(const std::string& id, int poll_ms) {
  std::string last;
  std::streamoff out_offset = 0, err_offset = 0;
  bool seen = false;
  for (;;) {
    Result<JobInfo> job = job_info(id);
    if (!job) {
      // Slurm forgets a finished job after MinJobAge (300 s by default).
      if (seen) {
        std::cerr << "lattice launch: job " << id
                  << " is no longer known to slurmctld; its last state was " << last << "\n";
        return last.rfind("COMPLETED", 0) == 0 ? 0 : 1;
      }
      print_error("launch", job.status().message());
      return 1;
    }
    seen = true;
    tail_file(job->stdout_path, &out_offset, std::cout);
    if (job->stderr_path != job->stdout_path) tail_file(job->stderr_path, &err_offset, std::cerr);
    const std::string now = describe_state(*job);
    if (now != last) {
      std::cerr << "[" << clock_time() << "] job " << id << ": " << now << "\n";
      last = now;
    }
    if (job->ended()) {
      std::cerr << "lattice launch: job " << id << " ended " << job->state << ", exit code "
                << job->exit_code << "\n";
      return job->state == "COMPLETED" ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

struct LaunchFlags {
  LaunchSpec spec;
  std::string target = "local", network = "tcp", launcher = "srun";
  int ntasks_per_node = 0;
  bool dry_run = false, no_follow = false, no_requeue = false;
  int poll_ms = 2000;
};

std::vector<FlagSpec> launch_flags(LaunchFlags& f) {
  LaunchSpec& s = f.spec;
  return {
      {"target", "local | hostfile | slurm: this machine, the hosts of --hostfile, a Slurm job",
       &f.target},
      {"world-size",
       "ranks in the job (default: --nodes x --ntasks-per-node, or x --gpus-per-node)",
       &s.world_size},
      {"nodes", "nodes to spread the ranks over evenly", &s.nodes},
      {"ntasks-per-node", "ranks per node (instead of --world-size)", &f.ntasks_per_node},
      {"gpus-per-node", "GPUs per node; 0 for a CPU job", &s.gpus_per_node},
      {"cpus-per-task", "CPUs (OpenMP threads) per rank; 0 leaves it to Slurm", &s.cpus_per_task},
      {"time", "Slurm time limit, HH:MM:SS or D-HH:MM:SS", &s.time},
      {"partition", "Slurm partition", &s.partition},
      {"account", "Slurm account", &s.account},
      {"hostfile", "--target hostfile: Open MPI hostfile (\"host slots=N\" lines)", &s.hostfile},
      {"network", "--target hostfile: tcp | ib (InfiniBand through UCX)", &f.network},
      {"network-interface",
       "tcp: the interface or subnet joining the nodes (eth0, 10.0.0.0/24); ib: the UCX device "
       "(mlx5_0:1)",
       &s.network_interface},
      {"launcher", "--target slurm: srun (--mpi=pmix) or mpirun inside the allocation",
       &f.launcher},
      {"output-dir",
       "--target slurm: script, logs, run store and checkpoints (default "
       "./lattice-jobs/<job-name>-<time>)",
       &s.output_dir},
      {"job-name", "Slurm job name; also the run names' prefix", &s.job_name},
      {"no-requeue", "--target slurm: no --requeue and no resume from the job's checkpoints",
       &f.no_requeue},
      {"signal-seconds", "--target slurm: SIGUSR1 (save and stop) this long before --time",
       &s.signal_seconds},
      {"dry-run", "print the command or batch script instead of running it", &f.dry_run},
      {"no-follow", "--target slurm: submit and return; `lattice launch follow JOBID` later",
       &f.no_follow},
      {"program", "the lattice program every rank runs (default: this one)", &s.lattice},
      {"poll-ms", "how often a followed job is polled with scontrol", &f.poll_ms},
  };
}

constexpr const char* kUsage =
    "usage: lattice launch [--target local|hostfile|slurm] [launch flags] [lattice train flags]\n"
    "       lattice launch status JOBID | follow JOBID | cancel JOBID\n\n"
    "Starts `lattice train` with the given train flags on every rank: on this machine under\n"
    "mpirun, on the hosts of an Open MPI hostfile, or as a Slurm batch job that is submitted\n"
    "with sbatch and followed (state changes and its log) until it ends. The layout is\n"
    "checked against --world-size before anything starts. A Slurm job writes its script, logs,\n"
    "run store (runs.sqlite, `lattice runs import` merges it) and checkpoints into\n"
    "--output-dir, saves and requeues itself before its time limit, and resumes from its\n"
    "latest checkpoint when requeued. --dry-run prints the command or script only.\n"
    "docs/cluster.md explains each target.\n\nlaunch flags:\n";

// Launch flags out of `args`; every other word goes to `train`.
std::vector<std::string> split_args(const std::vector<std::string>& args,
                                    const std::vector<FlagSpec>& specs,
                                    std::vector<std::string>* launch_args,
                                    std::vector<std::string>* train) {
  std::vector<std::string> errors;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.rfind("--", 0) == 0 ? a.substr(2, a.find('=') - 2) : "";
    const FlagSpec* spec = name.empty() ? nullptr : find_flag(specs, name);
    if (spec == nullptr) {
      train->push_back(a);
      continue;
    }
    launch_args->push_back(a);
    if (!is_switch(*spec) && a.find('=') == std::string::npos) {
      if (i + 1 >= args.size()) {
        errors.push_back("--" + name + " expects a value");
        break;
      }
      launch_args->push_back(args[++i]);
    }
  }
  return errors;
}

Result<LaunchSpec> read_spec(const std::vector<std::string>& args, LaunchFlags& f) {
  const std::vector<FlagSpec> specs = launch_flags(f);
  std::vector<std::string> launch_args, errors;
  f.spec.world_size = 0;
  f.spec.lattice.clear();
  errors = split_args(args, specs, &launch_args, &f.spec.train_args);
  std::vector<std::string> more = parse_flags(launch_args, specs, nullptr, "lattice launch");
  errors.insert(errors.end(), more.begin(), more.end());
  LaunchSpec& s = f.spec;
  if (std::optional<launch::Target> t = launch::parse_target(f.target))
    s.target = *t;
  else
    errors.push_back("--target '" + f.target + "' is not one of local, hostfile, slurm");
  if (std::optional<launch::Network> n = launch::parse_network(f.network))
    s.network = *n;
  else
    errors.push_back("--network '" + f.network + "' is not one of tcp, ib");
  if (std::optional<launch::Launcher> l = launch::parse_launcher(f.launcher))
    s.launcher = *l;
  else
    errors.push_back("--launcher '" + f.launcher + "' is not one of srun, mpirun");
  const int per_node = f.ntasks_per_node > 0 ? f.ntasks_per_node : std::max(s.gpus_per_node, 1);
  if (s.world_size == 0) s.world_size = s.nodes * per_node;
  if (f.ntasks_per_node > 0 && s.world_size != s.nodes * f.ntasks_per_node)
    errors.push_back("--world-size " + std::to_string(s.world_size) + " is not --nodes " +
                     std::to_string(s.nodes) + " x --ntasks-per-node " +
                     std::to_string(f.ntasks_per_node) + "; give one of them");
  s.requeue = !f.no_requeue;
  if (s.lattice.empty()) s.lattice = this_program();
  s.allow_run_as_root = geteuid() == 0;
  s.local_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (s.target == launch::Target::kSlurm) {
    std::error_code ec;
    if (s.output_dir.empty())
      s.output_dir = (fs::current_path(ec) / "lattice-jobs" / (s.job_name + "-" + timestamp()));
    s.output_dir = fs::absolute(s.output_dir, ec).lexically_normal().string();
    if (!s.output_dir.empty() && s.output_dir.back() == '/') s.output_dir.pop_back();
  }
  if (!errors.empty()) {
    std::string message;
    for (const std::string& e : errors) message += (message.empty() ? "" : "\n") + e;
    return Status::invalid_argument(message);
  }
  return s;
}

int submit(const LaunchPlan& plan, const LaunchSpec& spec, const LaunchFlags& f) {
  std::error_code ec;
  fs::create_directories(spec.output_dir, ec);
  if (ec) {
    print_error("launch", "--output-dir " + spec.output_dir + ": " + ec.message());
    return 1;
  }
  {
    std::ofstream script(plan.script_path);
    script << plan.script;
    if (!script.flush()) {
      print_error("launch", plan.script_path + ": cannot write the batch script");
      return 1;
    }
  }
  chmod(plan.script_path.c_str(), 0755);
  const Captured c = run_capture(plan.argv);
  if (c.exit_code != 0) {
    print_error("launch", launch::shell_command(plan.argv) + " failed: " + c.output);
    return 1;
  }
  Result<std::string> id = launch::parse_sbatch_output(c.output);
  if (!id) {
    print_error("launch", id.status().message());
    return 1;
  }
  std::cout << "submitted batch job " << *id << "\n" << std::flush;
  std::cerr << "  script:     " << plan.script_path << "\n  logs:       " << plan.stdout_pattern
            << "\n  run store:  " << plan.db_path << "\n";
  if (!plan.save_dir.empty()) std::cerr << "  checkpoints: " << plan.save_dir << "\n";
  std::cerr << "  follow: lattice launch follow " << *id << "   cancel: lattice launch cancel "
            << *id << "\n";
  if (f.no_follow) return 0;
  return follow_job(*id, f.poll_ms);
}

int job_subcommand(const std::string& what, const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].empty() ||
      args[0].find_first_not_of("0123456789_") != std::string::npos) {
    print_error("launch",
                what + " expects one Slurm JOBID; usage: lattice launch " + what + " JOBID");
    return 2;
  }
  const std::string& id = args[0];
  if (what == "follow") return follow_job(id, 2000);
  if (what == "cancel") {
    const Captured c = run_capture({"scancel", id});
    if (c.exit_code != 0) {
      print_error("launch", "scancel " + id + " failed: " + c.output);
      return 1;
    }
    std::cout << "cancelled job " << id
              << ": its ranks save a checkpoint and record the run as killed\n";
    return 0;
  }
  Result<JobInfo> job = job_info(id);
  if (!job) {
    print_error("launch", job.status().message());
    return 1;
  }
  std::cout << "job " << job->id << ": " << describe_state(*job) << ", exit code " << job->exit_code
            << "\n  stdout: " << job->stdout_path << "\n  stderr: " << job->stderr_path << "\n";
  return 0;
}

}  // namespace

int launch_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "status" || args[0] == "follow" || args[0] == "cancel"))
    return job_subcommand(args[0], std::vector<std::string>(args.begin() + 1, args.end()));
  LaunchFlags f;
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << kUsage << flags_help(launch_flags(f))
                << "\nEvery other flag goes to `lattice train` (`lattice train --help`).\n";
      return 0;
    }
  Result<LaunchSpec> spec = read_spec(args, f);
  if (!spec) {
    print_error("launch", spec.status().message());
    return 2;
  }
  Result<LaunchPlan> plan = launch::plan_launch(*spec);
  if (!plan) {
    print_error("launch", plan.status().message());
    return 2;
  }
  const bool slurm = spec->target == launch::Target::kSlurm;
  if (f.dry_run) {
    std::cout << (slurm ? plan->script : launch::shell_command(plan->argv) + "\n");
    for (const std::string& note : plan->notes) std::cerr << "note: " << note << "\n";
    return 0;
  }
  for (const std::string& note : plan->notes) std::cerr << "note: " << note << "\n";
  if (slurm) return submit(*plan, *spec, f);
  std::cerr << "+ " << launch::shell_command(plan->argv) << "\n";
  std::vector<char*> words;
  for (const std::string& a : plan->argv) words.push_back(const_cast<char*>(a.c_str()));
  words.push_back(nullptr);
  execvp(words[0], words.data());
  print_error("launch", "cannot run " + plan->argv[0] + ": " + std::strerror(errno));
  return 1;
}

}  // namespace lattice::cli
