// What the Launch view runs for a plan: on this machine `lattice train <the plan's flags>`
// directly for one rank, under `mpirun -n N` for more; on the hosts of a hostfile, mpirun
// --hostfile; on Slurm, `lattice launch --target slurm`, which submits the batch script and
// follows the job (the script itself comes from the same launch library, lattice/launch.h,
// for review). Before it, `lattice data demo` when the demo corpus is not built yet. Pure:
// the same inputs give the same argument lists, which the view shows verbatim and RunProcess
// starts without a shell.
#pragma once

#include <QString>
#include <QStringList>
#include <vector>

#include "lattice/launch.h"
#include "plan/plan.h"
#include "plan/plan_analysis.h"

namespace lattice::ui {

enum class DataSource { kDemo, kDataset, kMock };

struct LaunchSettings {
  DataSource data = DataSource::kDemo;
  QString dataPath;  // indexed-dataset prefix (kDataset), without .bin / .idx
  QString tokenizerType = QStringLiteral("GPTSentencePieceTokenizer");  // kDataset
  QString tokenizerModel, vocabFile, mergeFile;                         // its files
  QString runName;  // empty: one is generated when the command is built
  QStringList tags;
  QString database;    // empty: the default run database
  QString extraFlags;  // more `lattice train` flags, appended last (they win)
  // --save in a directory of the run's own: checkpointDirectory() (docs/studio.md, "Launch").
  bool saveCheckpoints = false;
  // The folder of the data directory that holds those directories: "checkpoints", or "demo"
  // for the demo (`lattice-studio --demo`, as `lattice demo`). Not saved with the settings.
  QString checkpointsFolder = QStringLiteral("checkpoints");

  launch::Target target = launch::Target::kLocal;
  QString hostfile;  // kHostfile
  launch::Network network = launch::Network::kTcp;
  QString networkInterface;               // kHostfile: interface, subnet or UCX device
  QString partition, account, timeLimit;  // kSlurm; empty: the cluster's defaults
  QString outputDir;                      // kSlurm; empty: ~/lattice-jobs/<run name>
  launch::Launcher launcher = launch::Launcher::kSrun;
  int cpusPerTask = 0;  // kSlurm; 0: left to Slurm
};

// Facts about this machine the command depends on.
struct LaunchEnvironment {
  QString lattice;  // the `lattice` program
  QString mpirun;   // empty when not installed
  int cores = 1;
  bool root = false;
  QString dataDir;  // default_data_dir(): where the demo corpus lives
  QString defaultDatabase;
  // Looks next to this program, then on PATH; cores, user and directories of this process.
  static LaunchEnvironment detect();
};

struct LaunchStep {
  QString program;
  QStringList arguments;
  QString purpose;  // "build the demo corpus (first run only)", "train"
};

struct LaunchCommand {
  std::vector<LaunchStep> steps;  // run in order; the last one trains
  int ranks = 1;
  launch::Target target = launch::Target::kLocal;
  // The store the run is recorded in; for Slurm the job's own (in its output directory),
  // merged into importInto (the local store) when the job ends.
  QString runName, database;
  QString importInto;
  QString script;      // kSlurm: the batch script the job runs, for review
  QStringList errors;  // Start stays disabled while there are any
  QStringList notes;   // worth knowing, not blocking

  bool canStart() const { return errors.isEmpty() && !steps.empty(); }
  // The steps as shell commands joined by &&, each wrapped before a flag to at most `width`
  // columns where it can (continuation lines end in a backslash): for the preview and the
  // clipboard, where it pastes into a shell as it is.
  QString displayText(int width = 90) const;
};

LaunchCommand buildLaunchCommand(const Plan& plan, const PlanAnalysis& analysis,
                                 const LaunchSettings& settings, const LaunchEnvironment& env);

// The options the command trains with, without the run's name, tags and database: what File ▸
// Save config writes, so that `lattice train --config` on it trains what Start would.
Result<TrainOptions> runConfiguration(const Plan& plan, const LaunchSettings& settings,
                                      const LaunchEnvironment& env);
// `base` with the data and tokenizer of a configuration that names them (--data-path or
// --mock-data); `base` unchanged when it names neither.
LaunchSettings launchSettingsFrom(const TrainOptions& options, LaunchSettings base);

// Where a run named `runName` saves with LaunchSettings::saveCheckpoints: a Slurm job in
// `<its output directory>/checkpoints`, any other run in `<data dir>/<checkpointsFolder>/<run name>`
// (characters other than letters, digits, '.', '_' and '-' become '_'). A new run name is a new
// directory, so that no run writes into another's checkpoints.
QString checkpointDirectory(const LaunchSettings& settings, const LaunchEnvironment& env,
                            const QString& runName);
// A Slurm job's output directory: LaunchSettings::outputDir, or ~/lattice-jobs/<run name>.
QString jobOutputDirectory(const LaunchSettings& settings, const QString& runName);

// `word` quoted for a POSIX shell only where needed.
QString shellQuote(const QString& word);
// One command, wrapped as displayText() does.
QString commandLines(const QString& program, const QStringList& arguments, int width);

// The hostfile and Slurm steps (cluster_command.cpp): `train` holds the train flags without
// "train"; errors and notes go into `cmd`.
void addClusterSteps(const Plan& plan, const LaunchSettings& settings, const LaunchEnvironment& env,
                     const QStringList& train, LaunchCommand& cmd);

}  // namespace lattice::ui
