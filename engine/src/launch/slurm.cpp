// The Slurm half of the launch library: the batch script a plan becomes, and the parsers of
// what sbatch and scontrol print. Nothing here runs a Slurm command.
#include <cstdlib>
#include <sstream>

#include "lattice/launch.h"
#include "launch/launch_internal.h"

namespace lattice::launch {

// Note [requeue and resume]. A Slurm job ends at its time limit with SIGTERM to every
// process and SIGKILL KillWait seconds later, often too soon for a save. So the script asks
// for SIGUSR1 to the batch shell signal_seconds before the limit (#SBATCH --signal=B:USR1@S,
// "B:" because only the shell knows the launcher's pid) and passes it on to srun or mpirun,
// which both forward SIGUSR1 to every rank at once (Note [stopping under mpirun]). The ranks
// stop at the next iteration boundary, save into output_dir/checkpoints, record the run as
// killed and exit; the shell then requeues its own job (scontrol requeue), which Slurm runs
// again with SLURM_RESTART_COUNT raised. Every attempt loads the latest checkpoint when
// there is one, so the requeued job continues the exact sequence. Each attempt is its own
// run in the store, named <job>-<jobid> then <job>-<jobid>-r<N>, and all carry the tag
// slurm-job-<jobid>: the store's one-writer-per-run rule holds, and History shows the
// attempts side by side. scancel instead sends SIGTERM to the shell and the ranks: they save
// and record killed the same way (KillWait, 30 s by default, bounds the save), but the shell
// does not requeue.
namespace internal {

namespace {

void sbatch_line(std::ostringstream& s, const std::string& option, const std::string& value) {
  s << "#SBATCH --" << option << "=" << value << "\n";
}

// The launcher words before `lattice train`.
std::vector<std::string> launcher_argv(const LaunchSpec& spec, int tasks_per_node) {
  if (spec.launcher == Launcher::kSrun) {
    // srun --mpi=pmix wires Open MPI up through Slurm's PMIx server; since Slurm 22.05 srun no
    // longer inherits --cpus-per-task from sbatch, so it is repeated here.
    std::vector<std::string> argv = {"srun", "--mpi=pmix", "--kill-on-bad-exit=1"};
    if (spec.cpus_per_task > 0)
      argv.push_back("--cpus-per-task=" + std::to_string(spec.cpus_per_task));
    return argv;
  }
  // mpirun inside the allocation reads the nodes and slots from Slurm.
  std::vector<std::string> argv = {spec.mpirun};
  if (spec.allow_run_as_root) argv.push_back("--allow-run-as-root");
  for (const std::string& w :
       {std::string("-n"), std::to_string(spec.world_size), std::string("--map-by"),
        "ppr:" + std::to_string(tasks_per_node) + ":node", std::string("--bind-to"),
        std::string("none"), std::string("--mca"), std::string("odls_base_sigkill_timeout"),
        std::string("30"), std::string("-x"), std::string("OMP_NUM_THREADS")})
    argv.push_back(w);
  return argv;
}

// `head` (launcher and program) on the first line, then `flags` as shell words wrapped before
// a flag (never between a flag and its values) so that lines stay within 90 columns where
// they can; continuation lines are indented by four.
std::string wrapped_command(const std::vector<std::string>& head,
                            const std::vector<std::string>& flags) {
  std::vector<std::string> groups;
  for (const std::string& a : flags) {
    if (groups.empty() || a.rfind("--", 0) == 0)
      groups.push_back(shell_quote(a));
    else
      groups.back().append(" ").append(shell_quote(a));
  }
  std::string out = shell_command(head), line;
  for (const std::string& g : groups) {
    if (line.empty()) {
      line = "    " + g;
    } else if (line.size() + 1 + g.size() > 90) {
      out += " \\\n" + line;
      line = "    " + g;
    } else {
      line += " " + g;
    }
  }
  return line.empty() ? out : out + " \\\n" + line;
}

}  // namespace

LaunchPlan slurm_plan(const LaunchSpec& spec) {
  LaunchPlan plan;
  plan.tasks_per_node = spec.world_size / spec.nodes;
  const std::string& out = spec.output_dir;
  plan.script_path = out + "/" + spec.job_name + ".sbatch";
  plan.stdout_pattern = out + "/" + spec.job_name + "-%j.out";
  plan.stderr_pattern = out + "/" + spec.job_name + "-%j.err";
  plan.argv = {"sbatch", "--parsable", plan.script_path};

  // Run store, checkpoints and run name: the job's own unless the train flags set them.
  std::vector<std::string> train = spec.train_args;
  plan.db_path = internal::flag_value(train, "db").value_or(out + "/runs.sqlite");
  const bool own_db = !internal::flag_value(train, "db");
  // With --requeue every attempt resumes from the save directory (the job's own unless
  // --save names one); a --load in the train flags is the user's choice and stays alone.
  const std::optional<std::string> user_save = internal::flag_value(train, "save");
  const bool resumes = spec.requeue && !internal::flag_value(train, "load");
  const bool own_save = resumes && !user_save;
  plan.save_dir = own_save ? out + "/checkpoints" : user_save.value_or("");
  const std::string run_name = internal::flag_value(train, "run-name").value_or("");
  train = internal::without_flag(train, "run-name");

  std::ostringstream s;
  s << "#!/bin/bash\n"
       "# Generated by `lattice launch --target slurm`: review it, then submit with\n"
       "#   sbatch "
    << shell_quote(plan.script_path) << "\n";
  sbatch_line(s, "job-name", spec.job_name);
  sbatch_line(s, "nodes", std::to_string(spec.nodes));
  sbatch_line(s, "ntasks-per-node", std::to_string(plan.tasks_per_node));
  if (spec.gpus_per_node > 0) sbatch_line(s, "gpus-per-node", std::to_string(spec.gpus_per_node));
  if (spec.cpus_per_task > 0) sbatch_line(s, "cpus-per-task", std::to_string(spec.cpus_per_task));
  if (!spec.time.empty()) sbatch_line(s, "time", spec.time);
  if (!spec.partition.empty()) sbatch_line(s, "partition", spec.partition);
  if (!spec.account.empty()) sbatch_line(s, "account", spec.account);
  sbatch_line(s, "output", plan.stdout_pattern);
  sbatch_line(s, "error", plan.stderr_pattern);
  // A requeued attempt appends to the same log files instead of truncating them.
  sbatch_line(s, "open-mode", "append");
  if (spec.requeue) s << "#SBATCH --requeue\n";
  if (spec.signal_seconds > 0)
    sbatch_line(s, "signal", "B:USR1@" + std::to_string(spec.signal_seconds));

  s << "\nset -u\n"
       "out="
    << shell_quote(out)
    << "\n"
       "mkdir -p \"$out\"\n"
       "# One OpenMP thread per CPU Slurm gives each rank.\n"
       "export OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
       "# Each attempt is a run of its own; a requeued one continues the checkpoint (Note\n"
       "# [requeue and resume] in engine/src/launch/slurm.cpp).\n"
       "run_name="
    << (run_name.empty() ? shell_quote(spec.job_name) + "-\"$SLURM_JOB_ID\""
                         : shell_quote(run_name))
    << "\n"
       "if [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ]; then "
       "run_name=\"$run_name-r$SLURM_RESTART_COUNT\"; fi\n";
  if (resumes)
    s << "save=" << (own_save ? std::string("\"$out/checkpoints\"") : shell_quote(plan.save_dir))
      << "\n"
         "resume=()\n"
         "if [ -f \"$save/latest_checkpointed_iteration.txt\" ]; then resume=(--load \"$save\"); "
         "fi\n";
  s << "\n# SIGUSR1 before the time limit: pass it on to the ranks (they save and stop), then\n"
       "# requeue. SIGTERM (scancel): the ranks got it too; they save and stop, no requeue.\n"
       "requeue=0\n"
       "forward() { requeue=$1; kill -USR1 \"$launcher\" 2>/dev/null; }\n"
       "trap 'forward "
    << (spec.requeue ? 1 : 0)
    << "' USR1\n"
       "trap 'forward 0' TERM\n\n";

  std::vector<std::string> command = launcher_argv(spec, plan.tasks_per_node);
  command.push_back(spec.lattice);
  command.push_back("train");
  std::string line = wrapped_command(command, train);
  if (own_db) line += " \\\n    --db \"$out/runs.sqlite\" --db-journal-mode delete";
  if (own_save) line += " \\\n    --save \"$save\"";
  if (resumes) line += " ${resume[@]+\"${resume[@]}\"}";
  line += " \\\n    --run-name \"$run_name\" --tag \"slurm-job-$SLURM_JOB_ID\" &";
  s << line
    << "\nlauncher=$!\n"
       "# wait returns early when a trapped signal arrives; wait again until the launcher ends.\n"
       "while kill -0 \"$launcher\" 2>/dev/null; do wait \"$launcher\"; done\n"
       "wait \"$launcher\"\n"
       "status=$?\n"
       "if [ \"$requeue\" = 1 ]; then\n"
       "  echo \"lattice: saved before the time limit; requeueing job $SLURM_JOB_ID\" >&2\n"
       "  scontrol requeue \"$SLURM_JOB_ID\"\n"
       "  exit 0\n"
       "fi\n"
       "exit \"$status\"\n";
  plan.script = s.str();

  if (spec.launcher == Launcher::kSrun)
    plan.notes.push_back(
        "srun --mpi=pmix starts the ranks: Slurm's PMIx plugin must be "
        "installed (`srun --mpi=list` shows it); --launcher mpirun otherwise");
  if (own_db)
    plan.notes.push_back("the job records its run in " + plan.db_path +
                         " (rollback journal, safe on shared storage); `lattice runs import " +
                         plan.db_path + "` merges it into your history");
  if (resumes)
    plan.notes.push_back("checkpoints go to " + plan.save_dir +
                         "; a requeued job resumes from the latest one");
  if (spec.time.empty())
    plan.notes.push_back("no --time: the partition's default time limit applies");
  return plan;
}

}  // namespace internal

Result<std::string> parse_sbatch_output(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  const std::string submitted = "Submitted batch job ";
  if (const size_t at = t.rfind(submitted); at != std::string::npos)
    t = t.substr(at + submitted.size());
  else if (const size_t nl = t.rfind('\n'); nl != std::string::npos)
    t = t.substr(nl + 1);  // --parsable prints the id last
  t = t.substr(0, t.find(';'));
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
    return Status::invalid_argument("sbatch printed no job id: '" + text + "'");
  return t;
}

bool JobInfo::ended() const {
  for (const char* s : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                        "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
    if (state == s) return true;
  return false;
}

Result<JobInfo> parse_scontrol_job(const std::string& text) {
  // key=value words; a word without '=' continues the previous value (values with spaces).
  std::istringstream words(text);
  std::vector<std::pair<std::string, std::string>> fields;
  for (std::string w; words >> w;) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0) {
      if (!fields.empty()) fields.back().second += " " + w;
      continue;
    }
    fields.emplace_back(w.substr(0, eq), w.substr(eq + 1));
  }
  JobInfo job;
  for (const auto& [key, value] : fields) {
    if (key == "JobId") job.id = value;
    if (key == "JobState") job.state = value;
    if (key == "Reason") job.reason = value;
    if (key == "ExitCode") job.exit_code = value;
    if (key == "Restarts") job.restarts = std::atoi(value.c_str());
    if (key == "StdOut") job.stdout_path = value;
    if (key == "StdErr") job.stderr_path = value;
  }
  if (job.id.empty() || job.state.empty()) {
    std::string first = text.substr(0, text.find('\n'));
    return Status::invalid_argument("scontrol did not describe a job: '" + first + "'");
  }
  return job;
}

Result<JobInfo> parse_sacct_job(const std::string& text, const std::string& id) {
  std::istringstream lines(text);
  JobInfo job;
  int attempts = 0;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cols;
    std::istringstream row(line);
    for (std::string c; std::getline(row, c, '|');) cols.push_back(c);
    if (cols.size() < 4 || cols[0] != id) continue;
    attempts++;
    job.id = cols[0];
    job.state = cols[1].substr(0, cols[1].find(' '));  // "CANCELLED by 0": the state alone
    job.exit_code = cols[2];
    job.reason = cols[3];
  }
  if (attempts == 0)
    return Status::invalid_argument("sacct knows no job " + id +
                                    (text.empty() ? std::string()
                                                  : ": '" + text.substr(0, text.find('\n')) + "'"));
  job.restarts = attempts - 1;
  return job;
}

}  // namespace lattice::launch
