// buildLaunchCommand: the plan's flags, the data and run flags, the mpirun options this machine
// needs, and every reason not to start, checked by the engine's own parser.
#include "launch/launch_command.h"

#include <unistd.h>

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QThread>

#include "lattice/data.h"
#include "lattice/layout.h"
#include "lattice/run_record.h"
#include "lattice/train_options.h"
#include "plan/text_format.h"
#include "plan/train_flags.h"
#include "playground/playground_io.h"

namespace lattice::ui {

namespace {

// More ranks than this on one machine is a plan for a cluster, not for "this machine".
constexpr int kMaxLocalRanks = 64;

// Flags the Launch view sets itself; the plan's values of these are not passed on.
const std::set<std::string> kLaunchOwned = {
    "data-path",       "mock-data",  "tokenizer-type", "vocab-file", "merge-file",
    "tokenizer-model", "vocab-size", "run-name",       "tag",        "db"};

bool fileExists(const QString& path) {
  return QFileInfo(path).isFile();
}

void addDataFlags(const Plan& plan, const LaunchSettings& s, const LaunchEnvironment& env,
                  QStringList& args, LaunchCommand& cmd) {
  const QString vocab = QString::number(plan.options.tokenizer.vocab_size);
  switch (s.data) {
    case DataSource::kDemo: {
      const DemoCorpus demo = demo_corpus_paths(env.dataDir.toStdString());
      const QString prefix = QString::fromStdString(demo.data_prefix);
      const QString model = QString::fromStdString(demo.tokenizer_model);
      if (!fileExists(prefix + ".bin") || !fileExists(prefix + ".idx") || !fileExists(model))
        cmd.steps.push_back(
            {env.lattice, {"data", "demo"}, QObject::tr("build the demo corpus (first run only)")});
      args << "--data-path" << prefix << "--tokenizer-type"
           << "GPTSentencePieceTokenizer"
           << "--tokenizer-model" << model;
      if (plan.options.model.vocab_size != 4096)
        cmd.notes << QObject::tr(
                         "The demo tokenizer has 4096 token ids; the plan assumed %1, so "
                         "the embedding differs from the plan's estimate.")
                         .arg(plan.options.model.vocab_size);
      return;
    }
    case DataSource::kDataset: {
      // A prefix, or a blend "W1 P1 W2 P2 ..." (the engine checks the weights).
      const QStringList words = QProcess::splitCommand(s.dataPath);
      if (words.isEmpty())
        cmd.errors << QObject::tr("Choose a dataset (--data-path), or use the demo corpus.");
      for (int i = words.size() == 1 ? 0 : 1; i < words.size(); i += 2)
        if (!fileExists(words[i] + ".bin") || !fileExists(words[i] + ".idx"))
          cmd.errors << QObject::tr(
                            "--data-path %1: no %1.bin and %1.idx (see `lattice data "
                            "preprocess`).")
                            .arg(words[i]);
      args << "--data-path" << words << "--tokenizer-type" << s.tokenizerType;
      QStringList files;  // (flag, path) pairs the tokenizer reads
      if (s.tokenizerType == QLatin1String("NullTokenizer")) args << "--vocab-size" << vocab;
      if (s.tokenizerType == QLatin1String("GPT2BPETokenizer"))
        files << "--vocab-file" << s.vocabFile << "--merge-file" << s.mergeFile;
      if (s.tokenizerType.contains(QLatin1String("SentencePiece")) ||
          s.tokenizerType == QLatin1String("HuggingFaceTokenizer"))  // tokenizer.json or its dir
        files << "--tokenizer-model" << s.tokenizerModel;
      for (int i = 0; i + 1 < files.size(); i += 2) {
        args << files[i] << files[i + 1];
        const bool directoryToo = s.tokenizerType == QLatin1String("HuggingFaceTokenizer");
        if (directoryToo ? !QFileInfo::exists(files[i + 1]) : !fileExists(files[i + 1]))
          cmd.errors << QObject::tr("%1 '%2': no such file.").arg(files[i], files[i + 1]);
      }
      return;
    }
    case DataSource::kMock:
      args << "--mock-data"
           << "--vocab-size" << vocab;
      return;
  }
}

// The reasons the engine itself would refuse these flags, found before starting it.
void checkWithEngine(const QStringList& trainArgs, int ranks, LaunchCommand& cmd) {
  std::vector<std::string> args;
  for (const QString& a : trainArgs) args.push_back(a.toStdString());
  Result<TrainOptions> parsed = parse_train_flags(args);
  if (!parsed) {
    cmd.errors << QString::fromStdString(parsed.status().message()).split('\n');
    return;
  }
  std::vector<std::string> errors = parsed->validate(/*require_data=*/true);
  const std::vector<std::string> layout =
      layout_errors(with_default_global_batch(*parsed, ranks), ranks);
  errors.insert(errors.end(), layout.begin(), layout.end());
  for (const std::string& e : errors) cmd.errors << QString::fromStdString(e);
}

QString absolute(const std::string& path) {
  const QFileInfo info(QString::fromStdString(path));
  const QString canonical = info.canonicalFilePath();
  return canonical.isEmpty() ? QDir::cleanPath(info.absoluteFilePath()) : canonical;
}

// A new run never writes into the checkpoints of an earlier one: a --save directory that
// holds a checkpoint blocks Start unless --load names it too (the user resumes that run).
void checkSaveDirectory(const QStringList& trainArgs, const LaunchSettings& s,
                        const QString& ownDirectory, LaunchCommand& cmd) {
  std::vector<std::string> args;
  for (const QString& a : trainArgs) args.push_back(a.toStdString());
  Result<TrainOptions> parsed = parse_train_flags(args);
  if (!parsed || parsed->save.empty()) return;  // a flag error is reported by its own check
  const QString save = QString::fromStdString(parsed->save);
  const int iteration = checkpointIteration(save);
  if (iteration < 0) return;
  if (!parsed->load.empty() && absolute(parsed->load) == absolute(parsed->save)) return;
  if (s.saveCheckpoints && absolute(parsed->save) == absolute(ownDirectory.toStdString()))
    cmd.errors << QObject::tr(
                      "The run name '%1' was used before: its checkpoint directory %2 holds "
                      "iteration %3. Choose a new run name (New), or add --load %2 to the "
                      "extra flags to resume that run.")
                      .arg(cmd.runName, save)
                      .arg(iteration);
  else
    cmd.errors << QObject::tr(
                      "--save %1 holds the checkpoints of an earlier run (iteration %2), which "
                      "this run would write into. Add --load %1 to the extra flags to resume "
                      "that run, or save elsewhere (Checkpoints: a directory of each run's own).")
                      .arg(save)
                      .arg(iteration);
}

}  // namespace

QString checkpointDirectory(const LaunchSettings& s, const LaunchEnvironment& env,
                            const QString& runName) {
  if (s.target == launch::Target::kSlurm)
    return QDir(jobOutputDirectory(s, runName)).filePath(QStringLiteral("checkpoints"));
  static const QRegularExpression unsafe(QStringLiteral("[^A-Za-z0-9._-]"));
  QString name = runName;
  name.replace(unsafe, QStringLiteral("_"));
  if (name.isEmpty() || name.startsWith('.')) name.prepend('_');
  return QDir(QDir(env.dataDir).filePath(s.checkpointsFolder)).filePath(name);
}

Result<TrainOptions> runConfiguration(const Plan& plan, const LaunchSettings& s,
                                      const LaunchEnvironment& env) {
  LaunchCommand ignored;
  QStringList flags = changedTrainFlags(plan.options, kLaunchOwned);
  addDataFlags(plan, s, env, flags, ignored);
  flags << QProcess::splitCommand(s.extraFlags);
  std::vector<std::string> args;
  for (const QString& f : flags) args.push_back(f.toStdString());
  Result<TrainOptions> options = parse_train_flags(args);
  if (!options) return options;
  normalizeOptions(*options);
  return with_default_global_batch(*options, plan.cluster.world());
}

LaunchSettings launchSettingsFrom(const TrainOptions& o, LaunchSettings s) {
  if (o.mock_data) {
    s.data = DataSource::kMock;
  } else if (!o.data_path.empty()) {
    s.data = DataSource::kDataset;
    QStringList words;
    for (const std::string& p : o.data_path) words << QString::fromStdString(p);
    s.dataPath = words.join(' ');  // a blend stays as written
    s.tokenizerType = QString::fromStdString(o.tokenizer.type);
    s.tokenizerModel = QString::fromStdString(o.tokenizer.model_file);
    s.vocabFile = QString::fromStdString(o.tokenizer.vocab_file);
    s.mergeFile = QString::fromStdString(o.tokenizer.merge_file);
  }
  return s;
}

LaunchEnvironment LaunchEnvironment::detect() {
  LaunchEnvironment env;
  const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath("lattice");
  env.lattice = fileExists(beside) ? beside : QStandardPaths::findExecutable("lattice");
  if (env.lattice.isEmpty()) env.lattice = QStringLiteral("lattice");
  env.mpirun = QStandardPaths::findExecutable("mpirun");
  env.cores = std::max(QThread::idealThreadCount(), 1);
  env.root = geteuid() == 0;
  env.dataDir = QString::fromStdString(default_data_dir());
  env.defaultDatabase = QString::fromStdString(default_run_db());
  return env;
}

QString shellQuote(const QString& word) {
  static const QRegularExpression plain(QStringLiteral("^[A-Za-z0-9_@%+=:,./-]+$"));
  if (plain.match(word).hasMatch()) return word;
  QString quoted = word;
  quoted.replace('\'', QStringLiteral("'\\''"));
  return '\'' + quoted + '\'';
}

QString commandLines(const QString& program, const QStringList& arguments, int width) {
  // Groups: a flag with the values after it, so that a line never separates them.
  QStringList groups{shellQuote(program)};
  for (const QString& a : arguments) {
    const QString word = shellQuote(a);
    if (a.startsWith('-') || groups.size() == 1)
      groups << word;
    else
      groups.back() += ' ' + word;
  }
  QStringList lines{groups.front()};
  for (int i = 1; i < groups.size(); i++) {
    if (lines.back().size() + 1 + groups[i].size() > width) {
      lines.back() += QStringLiteral(" \\");
      lines << QStringLiteral("    ") + groups[i];
    } else {
      lines.back() += ' ' + groups[i];
    }
  }
  return lines.join('\n');
}

QString LaunchCommand::displayText(int width) const {
  QStringList commands;
  for (const LaunchStep& step : steps)
    commands << commandLines(step.program, step.arguments, width);
  return commands.join(QStringLiteral(" &&\n"));
}

LaunchCommand buildLaunchCommand(const Plan& plan, const PlanAnalysis& analysis,
                                 const LaunchSettings& s, const LaunchEnvironment& env) {
  LaunchCommand cmd;
  cmd.ranks = plan.cluster.world();
  cmd.runName = s.runName.trimmed().isEmpty() ? QString::fromStdString(default_run_name())
                                              : s.runName.trimmed();
  cmd.database = s.database.trimmed().isEmpty() ? env.defaultDatabase : s.database.trimmed();
  if (!analysis.valid())
    cmd.errors << QObject::tr("The plan has %1; fix them in the Plan view.")
                      .arg(plural(static_cast<long long>(analysis.errors.size()), "error",
                                  "errors"));
  cmd.target = s.target;
  const bool local = s.target == launch::Target::kLocal;
  const bool gpu = plan.cluster.device != QLatin1String(kDeviceCpu);
  if (precisionOf(plan.options) == QLatin1String("bf16") && !gpu)
    cmd.errors << QObject::tr(
        "bf16 needs a GPU: choose a GPU device in the Plan view's cluster, or "
        "fp32 / fp16 precision for the CPU engine.");
  if (local && cmd.ranks > kMaxLocalRanks)
    cmd.errors << QObject::tr(
                      "%1 ranks are a plan for a cluster; this machine runs at most %2 "
                      "(choose the Slurm or hostfile target).")
                      .arg(cmd.ranks)
                      .arg(kMaxLocalRanks);
  if (local && cmd.ranks > 1 && env.mpirun.isEmpty())
    cmd.errors << QObject::tr(
                      "mpirun is not installed (Debian: openmpi-bin); it starts the %1 "
                      "ranks.")
                      .arg(cmd.ranks);

  QStringList train = changedTrainFlags(plan.options, kLaunchOwned);
  addDataFlags(plan, s, env, train, cmd);
  train << "--run-name" << cmd.runName;
  for (const QString& t : s.tags)
    if (!t.trimmed().isEmpty()) train << "--tag" << t.trimmed();
  // A Slurm job records its run in its own output directory (imported when it ends).
  if (cmd.database != env.defaultDatabase && s.target != launch::Target::kSlurm)
    train << "--db" << cmd.database;
  if (gpu)
    train << "--device"
          << "cuda";
  const QString ownCheckpoints = checkpointDirectory(s, env, cmd.runName);
  if (s.saveCheckpoints) train << "--save" << ownCheckpoints;
  train << QProcess::splitCommand(s.extraFlags);
  checkSaveDirectory(train, s, ownCheckpoints, cmd);
  if (!local) {
    addClusterSteps(plan, s, env, train, cmd);
    return cmd;
  }
  checkWithEngine(train, cmd.ranks, cmd);
  train.prepend(QStringLiteral("train"));

  if (cmd.ranks == 1) {
    cmd.steps.push_back({env.lattice, train, QObject::tr("train")});
    return cmd;
  }
  QStringList mpi;
  if (env.root) mpi << "--allow-run-as-root";
  if (cmd.ranks > env.cores) {
    mpi << "--oversubscribe";
    cmd.notes << QObject::tr(
                     "%1 ranks on %2 cores: mpirun oversubscribes them and each rank "
                     "gets one thread.")
                     .arg(cmd.ranks)
                     .arg(env.cores);
  }
  // Stop signals the ranks themselves (RunProcess); should mpirun get a SIGTERM, its default
  // leaves them 1 s to finish the iteration, save and record the run as killed (Note
  // [stopping under mpirun] in app/cli/train_command.cpp).
  mpi << "--mca"
      << "odls_base_sigkill_timeout"
      << "30"
      << "--bind-to"
      << "none"
      << "-n" << QString::number(cmd.ranks) << env.lattice << train;
  cmd.steps.push_back(
      {env.mpirun.isEmpty() ? QStringLiteral("mpirun") : env.mpirun, mpi, QObject::tr("train")});
  return cmd;
}

}  // namespace lattice::ui
