// Specification of the launch library (lattice/launch.h): the Slurm batch script of a 4-node
// x 8-GPU plan against the options a Slurm user writes by hand (and against the copy shown
// in docs/cluster.md), the hostfile and local commands, every validation rule, and the
// parsers of sbatch's and scontrol's answers.
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "lattice/launch.h"

using lattice::launch::Launcher;
using lattice::launch::LaunchPlan;
using lattice::launch::LaunchSpec;
using lattice::launch::Network;
using lattice::launch::Target;

namespace {

// A GPT of 24 layers, TP 8 within a node, PP 4 across the nodes (DP 1): 32 ranks.
std::vector<std::string> gpt_flags() {
  return {"--mock-data", "--vocab-size",
          "50257",       "--num-layers",
          "24",          "--hidden-size",
          "2048",        "--num-attention-heads",
          "16",          "--seq-length",
          "2048",        "--micro-batch-size",
          "1",           "--global-batch-size",
          "64",          "--tensor-model-parallel-size",
          "8",           "--pipeline-model-parallel-size",
          "4",           "--train-iters",
          "100000",      "--save-interval",
          "1000"};
}

LaunchSpec four_by_eight() {
  LaunchSpec s;
  s.target = Target::kSlurm;
  s.world_size = 32;
  s.nodes = 4;
  s.gpus_per_node = 8;
  s.cpus_per_task = 12;
  s.time = "12:00:00";
  s.partition = "gpu";
  s.account = "llm-research";
  s.output_dir = "/scratch/lattice/gpt-2b";
  s.job_name = "gpt-2b";
  s.lattice = "/opt/lattice/bin/lattice";
  s.train_args = gpt_flags();
  return s;
}

LaunchPlan plan_or_fail(const LaunchSpec& s) {
  lattice::Result<LaunchPlan> plan = lattice::launch::plan_launch(s);
  if (!plan) qFatal("plan_launch: %s", plan.status().message().c_str());
  return *plan;
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

// The errors of a spec, all in one string.
std::string errors_of(const LaunchSpec& s) {
  std::string all;
  for (const std::string& e : lattice::launch::validate(s)) all += e + "\n";
  return all;
}

}  // namespace

class LaunchTest : public QObject {
  Q_OBJECT

 private slots:
  // What a Slurm user writes by hand for 4 nodes of 8 GPUs, one rank per GPU.
  void slurm_script_for_four_nodes_of_eight_gpus() {
    const LaunchPlan plan = plan_or_fail(four_by_eight());
    const std::vector<std::string> expected = {
        "#SBATCH --job-name=gpt-2b",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=12",
        "#SBATCH --time=12:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=llm-research",
        "#SBATCH --output=/scratch/lattice/gpt-2b/gpt-2b-%j.out",
        "#SBATCH --error=/scratch/lattice/gpt-2b/gpt-2b-%j.err",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@120",
    };
    QCOMPARE(lines_starting(plan.script, "#SBATCH"), expected);
    QVERIFY(plan.script.rfind("#!/bin/bash\n", 0) == 0);
    QCOMPARE(plan.tasks_per_node, 8);
    QCOMPARE(plan.script_path, std::string("/scratch/lattice/gpt-2b/gpt-2b.sbatch"));
    QCOMPARE(plan.argv, (std::vector<std::string>{"sbatch", "--parsable", plan.script_path}));
    // One srun starts all 32 ranks through PMIx; it is told the CPUs per task again
    // (Slurm >= 22.05 srun does not inherit them from sbatch).
    QCOMPARE(lines_starting(plan.script, "srun "),
             std::vector<std::string>{"srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=12 "
                                      "/opt/lattice/bin/lattice train \\"});
    QVERIFY(contains(plan.script, "/opt/lattice/bin/lattice train \\\n    --mock-data"));
    QVERIFY(contains(plan.script, "export OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\""));
    // The job's own run store (rollback journal, on shared storage) and checkpoints.
    QCOMPARE(plan.db_path, std::string("/scratch/lattice/gpt-2b/runs.sqlite"));
    QVERIFY(contains(plan.script, "--db \"$out/runs.sqlite\" --db-journal-mode delete"));
    QCOMPARE(plan.save_dir, std::string("/scratch/lattice/gpt-2b/checkpoints"));
    QVERIFY(contains(plan.script, "--save \"$save\""));
    QVERIFY(contains(plan.script, "resume=(--load \"$save\")"));
    QVERIFY(contains(plan.script, "--run-name \"$run_name\" --tag \"slurm-job-$SLURM_JOB_ID\""));
    QVERIFY(contains(plan.script, "scontrol requeue \"$SLURM_JOB_ID\""));
    // MPI wires the ranks up: no torchrun-style rendezvous variables.
    QVERIFY(!contains(plan.script, "MASTER_ADDR"));
    QVERIFY(!contains(plan.script, "MASTER_PORT"));
  }

  void the_script_is_valid_bash() {
    QTemporaryDir dir;
    const QString path = dir.filePath("job.sbatch");
    std::ofstream(path.toStdString()) << plan_or_fail(four_by_eight()).script;
    const lattice::testing::Run bash =
        lattice::testing::run_process("bash", {"-n", path}, {}, 10000);
    QVERIFY2(bash.exit_code == 0, qPrintable(bash.err));
  }

  // docs/cluster.md shows this very script: regenerate it there when this fails.
  void docs_show_the_generated_script() {
    std::ifstream in(std::string(LATTICE_SOURCE_DIR) + "/docs/cluster.md");
    QVERIFY2(in.good(), "docs/cluster.md is missing");
    const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string begin = "<!-- generated: test_launch four_by_eight -->\n```bash\n";
    const size_t at = doc.find(begin);
    QVERIFY2(at != std::string::npos, "docs/cluster.md has no generated 4x8 script block");
    const size_t from = at + begin.size();
    const std::string shown = doc.substr(from, doc.find("```", from) - from);
    QCOMPARE(shown, plan_or_fail(four_by_eight()).script);
  }

  void slurm_script_with_mpirun_inside_the_allocation() {
    LaunchSpec s = four_by_eight();
    s.launcher = Launcher::kMpirun;
    s.allow_run_as_root = false;
    const LaunchPlan plan = plan_or_fail(s);
    const std::vector<std::string> mpirun = lines_starting(plan.script, "mpirun ");
    QCOMPARE(mpirun.size(), size_t{1});
    QCOMPARE(mpirun[0], std::string("mpirun -n 32 --map-by ppr:8:node --bind-to none --mca "
                                    "odls_base_sigkill_timeout 30 -x OMP_NUM_THREADS "
                                    "/opt/lattice/bin/lattice train \\"));
    QVERIFY(lines_starting(plan.script, "srun").empty());
  }

  void user_checkpoints_and_names_are_kept() {
    LaunchSpec s = four_by_eight();
    s.train_args.insert(s.train_args.end(), {"--save", "/ckpt/gpt", "--run-name", "gpt 2b"});
    const LaunchPlan plan = plan_or_fail(s);
    QCOMPARE(plan.save_dir, std::string("/ckpt/gpt"));
    QVERIFY(contains(plan.script, "save=/ckpt/gpt\n"));
    QVERIFY(!contains(plan.script, "--save \"$save\""));  // the user's --save is in the flags
    QVERIFY(contains(plan.script, "run_name='gpt 2b'\n"));
    QVERIFY(!contains(plan.script, "--run-name 'gpt 2b'"));
    s.requeue = false;
    const LaunchPlan once = plan_or_fail(s);
    QVERIFY(lines_starting(once.script, "#SBATCH --requeue").empty());
    QVERIFY(!contains(once.script, "resume="));
  }

  void validation_names_the_flag_and_value() {
    LaunchSpec s = four_by_eight();
    s.world_size = 30;
    QVERIFY2(contains(errors_of(s), "--world-size 30 is not divisible by --nodes 4"),
             errors_of(s).c_str());
    s = four_by_eight();
    s.world_size = 64;
    s.train_args = {"--mock-data", "--vocab-size", "512"};
    QVERIFY2(contains(errors_of(s),
                      "16 ranks per node (--world-size 64 / --nodes 4) exceed "
                      "--gpus-per-node 8"),
             errors_of(s).c_str());
    s = four_by_eight();
    s.time = "1:75:00";
    QVERIFY2(contains(errors_of(s), "--time '1:75:00' is not a Slurm time limit"),
             errors_of(s).c_str());
    s = four_by_eight();
    s.output_dir = "relative/dir";
    QVERIFY(contains(errors_of(s), "--output-dir 'relative/dir' must be an absolute path"));
    s = four_by_eight();
    s.world_size = 24;
    s.nodes = 3;
    QVERIFY2(contains(errors_of(s), "--pipeline-model-parallel-size"), errors_of(s).c_str());
    s = four_by_eight();
    s.train_args.push_back("--num-layer");
    QVERIFY2(contains(errors_of(s), "unknown flag --num-layer"), errors_of(s).c_str());
    s = four_by_eight();
    s.target = Target::kLocal;
    QVERIFY(contains(errors_of(s), "--target local runs on this machine only; --nodes 4"));
    QVERIFY(errors_of(four_by_eight()).empty());
  }

  void time_limits_in_slurms_forms() {
    using lattice::launch::parse_time_limit;
    QCOMPARE(*parse_time_limit("30"), 1800L);
    QCOMPARE(*parse_time_limit("30:15"), 1815L);
    QCOMPARE(*parse_time_limit("12:00:00"), 43200L);
    QCOMPARE(*parse_time_limit("2-00"), 172800L);
    QCOMPARE(*parse_time_limit("1-02:30"), 95400L);
    QCOMPARE(*parse_time_limit("1-00:00:10"), 86410L);
    for (const char* bad : {"", "abc", "1:2:3:4", "12:60:00", "-1", "1-", "0", "1-25"})
      QVERIFY2(!parse_time_limit(bad).is_ok(), bad);
  }

  void hostfile_command_with_tcp_and_infiniband() {
    QTemporaryDir dir;
    const std::string hosts = dir.filePath("hosts").toStdString();
    std::ofstream(hosts) << "# two nodes\nnode1 slots=4\nnode2 slots=4 max_slots=8\n";
    LaunchSpec s;
    s.target = Target::kHostfile;
    s.hostfile = hosts;
    s.nodes = 2;
    s.world_size = 8;
    s.network_interface = "10.0.0.0/24";
    s.train_args = {"--mock-data", "--vocab-size",        "512", "--tensor-model-parallel-size",
                    "4",           "--global-batch-size", "16"};
    const LaunchPlan tcp = plan_or_fail(s);
    const std::string command = lattice::launch::shell_command(tcp.argv);
    QVERIFY2(contains(command, "mpirun --hostfile " + hosts +
                                   " -n 8 --map-by ppr:4:node "
                                   "--bind-to none --mca pml ob1 --mca btl tcp,vader,self --mca "
                                   "btl_tcp_if_include 10.0.0.0/24 --mca oob_tcp_if_include "
                                   "10.0.0.0/24"),
             command.c_str());
    QVERIFY(contains(command, "lattice train --mock-data"));
    QVERIFY(std::any_of(tcp.notes.begin(), tcp.notes.end(), [](const std::string& n) {
      return contains(n, "btl_tcp_if_include") && contains(n, "hang");
    }));
    s.network = Network::kInfiniband;
    s.network_interface = "mlx5_0:1";
    const std::string ib = lattice::launch::shell_command(plan_or_fail(s).argv);
    QVERIFY2(contains(ib,
                      "--mca pml ucx --mca osc ucx --mca btl '^openib' -x "
                      "UCX_NET_DEVICES=mlx5_0:1"),
             ib.c_str());
    // Too few slots, too few hosts, a missing file.
    s.world_size = 10;
    s.nodes = 2;
    s.train_args = {"--mock-data", "--vocab-size", "512"};
    QVERIFY2(contains(errors_of(s), "host node1 has slots=4 but 5 ranks per node"),
             errors_of(s).c_str());
    s.nodes = 5;
    QVERIFY(contains(errors_of(s), "--nodes 5 but --hostfile " + hosts + " names 2 host(s)"));
    s.hostfile = hosts + ".missing";
    QVERIFY(contains(errors_of(s), "--hostfile " + hosts + ".missing: cannot open the file"));
  }

  void local_command_under_mpirun() {
    LaunchSpec s;
    s.world_size = 4;
    s.local_cores = 2;
    s.allow_run_as_root = true;
    s.train_args = {"--mock-data", "--vocab-size", "512", "--global-batch-size", "16"};
    const LaunchPlan plan = plan_or_fail(s);
    QCOMPARE(lattice::launch::shell_command(plan.argv),
             std::string("mpirun --allow-run-as-root --oversubscribe --mca "
                         "odls_base_sigkill_timeout 30 --bind-to none -n 4 lattice train "
                         "--mock-data --vocab-size 512 --global-batch-size 16"));
    s.world_size = 1;
    QCOMPARE(plan_or_fail(s).argv,
             (std::vector<std::string>{"lattice", "train", "--mock-data", "--vocab-size", "512",
                                       "--global-batch-size", "16"}));
  }

  void reads_sbatch_and_scontrol() {
    using lattice::launch::parse_sbatch_output;
    QCOMPARE(*parse_sbatch_output("123\n"), std::string("123"));
    QCOMPARE(*parse_sbatch_output("123;cluster\n"), std::string("123"));
    QCOMPARE(*parse_sbatch_output("Submitted batch job 77\n"), std::string("77"));
    QVERIFY(!parse_sbatch_output("sbatch: error: invalid partition").is_ok());
    // One line of `scontrol show job -o` from Slurm 22.05 (shortened).
    const std::string line =
        "JobId=5 JobName=demo UserId=root(0) GroupId=root(0) Priority=4294901759 "
        "JobState=CANCELLED Reason=None Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 "
        "ExitCode=0:15 RunTime=00:00:09 TimeLimit=UNLIMITED Command=/tmp/out/demo.sbatch "
        "WorkDir=/tmp StdErr=/tmp/out/demo-5.err StdIn=/dev/null StdOut=/tmp/out/demo-5.out "
        "Power=\n";
    auto job = lattice::launch::parse_scontrol_job(line);
    QVERIFY(job.is_ok());
    QCOMPARE(job->id, std::string("5"));
    QCOMPARE(job->state, std::string("CANCELLED"));
    QCOMPARE(job->reason, std::string("None"));
    QCOMPARE(job->exit_code, std::string("0:15"));
    QCOMPARE(job->restarts, 1);
    QCOMPARE(job->stdout_path, std::string("/tmp/out/demo-5.out"));
    QCOMPARE(job->stderr_path, std::string("/tmp/out/demo-5.err"));
    QVERIFY(job->ended());
    lattice::launch::JobInfo pending = *job;
    pending.state = "PENDING";
    QVERIFY(!pending.ended());
    QVERIFY(!lattice::launch::parse_scontrol_job("slurm_load_jobs error: Invalid job id").is_ok());
  }

  // What `sacct --jobs=ID` with kSacctArgs prints (Slurm 22.05): one row per attempt of a
  // requeued job, the latest last; a cancelled job's state carries who cancelled it.
  void sacct_rows_give_the_latest_attempt() {
    const std::string rows =
        "57|REQUEUED|0:0|None\n"
        "57|CANCELLED by 0|0:15|None\n";
    auto job = lattice::launch::parse_sacct_job(rows, "57");
    QVERIFY2(job.is_ok(), job.status().message().c_str());
    QCOMPARE(job->id, std::string("57"));
    QCOMPARE(job->state, std::string("CANCELLED"));
    QCOMPARE(job->exit_code, std::string("0:15"));
    QCOMPARE(job->restarts, 1);
    QVERIFY(job->ended());
    auto failed = lattice::launch::parse_sacct_job("58|FAILED|1:0|NonZeroExitCode\n", "58");
    QVERIFY(failed.is_ok());
    QCOMPARE(failed->state, std::string("FAILED"));
    QCOMPARE(failed->reason, std::string("NonZeroExitCode"));
    QCOMPARE(failed->restarts, 0);
    QVERIFY(!lattice::launch::parse_sacct_job("", "59").is_ok());
    QVERIFY(!lattice::launch::parse_sacct_job("57|COMPLETED|0:0|None\n", "59").is_ok());
  }
};

QTEST_GUILESS_MAIN(LaunchTest)
#include "test_launch.moc"
