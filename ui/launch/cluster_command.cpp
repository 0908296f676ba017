// addClusterSteps: the plan as a launch::LaunchSpec, checked and turned into a command by the
// launch library that `lattice launch` uses, so that the Studio and the command line launch
// the same job. A hostfile job is its mpirun command; a Slurm job is `lattice launch --target
// slurm`, which writes the script, submits it and follows the job to its end.
#include <QDir>
#include <QFileInfo>

#include "launch/launch_command.h"
#include "plan/plan.h"

namespace lattice::ui {

namespace {

std::string text(const QString& s) {
  return s.trimmed().toStdString();
}

launch::LaunchSpec specOf(const Plan& plan, const LaunchSettings& s, const LaunchEnvironment& env,
                          const QString& runName, const QStringList& train) {
  launch::LaunchSpec spec;
  spec.target = s.target;
  spec.world_size = plan.cluster.world();
  spec.nodes = plan.cluster.nodes;
  spec.gpus_per_node =
      plan.cluster.device == QLatin1String(kDeviceCpu) ? 0 : plan.cluster.devices_per_node;
  spec.cpus_per_task = s.cpusPerTask;
  spec.time = text(s.timeLimit);
  spec.partition = text(s.partition);
  spec.account = text(s.account);
  spec.hostfile = text(s.hostfile);
  spec.network = s.network;
  spec.network_interface = text(s.networkInterface);
  spec.launcher = s.launcher;
  spec.output_dir = jobOutputDirectory(s, runName).toStdString();
  spec.lattice = env.lattice.toStdString();
  if (!env.mpirun.isEmpty()) spec.mpirun = env.mpirun.toStdString();
  spec.allow_run_as_root = env.root;
  spec.local_cores = env.cores;
  for (const QString& a : train) spec.train_args.push_back(a.toStdString());
  return spec;
}

// The `lattice launch` flags that give `spec` (train flags follow them).
QStringList launchFlags(const launch::LaunchSpec& spec) {
  QStringList f{"launch",
                "--target",
                "slurm",
                "--world-size",
                QString::number(spec.world_size),
                "--nodes",
                QString::number(spec.nodes),
                "--gpus-per-node",
                QString::number(spec.gpus_per_node),
                "--launcher",
                launch::launcher_name(spec.launcher),
                "--output-dir",
                QString::fromStdString(spec.output_dir)};
  if (spec.cpus_per_task > 0) f << "--cpus-per-task" << QString::number(spec.cpus_per_task);
  const std::pair<const char*, const std::string*> optional[] = {
      {"--time", &spec.time}, {"--partition", &spec.partition}, {"--account", &spec.account}};
  for (const auto& [flag, value] : optional)
    if (!value->empty()) f << flag << QString::fromStdString(*value);
  f << "--program" << QString::fromStdString(spec.lattice);
  return f;
}

}  // namespace

QString jobOutputDirectory(const LaunchSettings& s, const QString& runName) {
  const QString out = s.outputDir.trimmed().isEmpty()
                          ? QDir::home().filePath(QStringLiteral("lattice-jobs/") + runName)
                          : s.outputDir.trimmed();
  return QFileInfo(out).absoluteFilePath();
}

void addClusterSteps(const Plan& plan, const LaunchSettings& s, const LaunchEnvironment& env,
                     const QStringList& train, LaunchCommand& cmd) {
  const launch::LaunchSpec spec = specOf(plan, s, env, cmd.runName, train);
  for (const std::string& e : launch::validate(spec)) cmd.errors << QString::fromStdString(e);
  Result<launch::LaunchPlan> made = launch::plan_launch(spec);
  if (!made) return;  // validate() listed why
  for (const std::string& n : made->notes) cmd.notes << QString::fromStdString(n);
  if (spec.target == launch::Target::kHostfile) {
    QStringList args;
    for (size_t i = 1; i < made->argv.size(); i++) args << QString::fromStdString(made->argv[i]);
    cmd.steps.push_back({QString::fromStdString(made->argv[0]), args, QObject::tr("train")});
    cmd.notes << QObject::tr(
        "Rank 0 records the run in the database from its own host: the path must be on storage "
        "that host can write (shared storage to see it here).");
    return;
  }
  cmd.script = QString::fromStdString(made->script);
  cmd.importInto = cmd.database;
  cmd.database = QString::fromStdString(made->db_path);
  cmd.steps.push_back(
      {env.lattice, launchFlags(spec) + train, QObject::tr("submit and follow the Slurm job")});
  cmd.notes << QObject::tr("The Studio merges the job's runs into %1 when the job ends.")
                   .arg(cmd.importInto);
}

}  // namespace lattice::ui
