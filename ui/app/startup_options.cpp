// parseStartupOptions (QCommandLineParser) and startupPlan (through the engine's parser).
#include "app/startup_options.h"

#include <QCommandLineParser>
#include <QProcess>
#include <QRegularExpression>

#include "lattice/launch.h"
#include "plan/model_presets.h"
#include "plan/train_flags.h"

namespace lattice::ui {

namespace {

Result<ClusterSettings> parseCluster(const QString& text, ClusterSettings cluster) {
  static const QRegularExpression re(QStringLiteral("^(\\d+)x(\\d+)(?::([A-Za-z0-9-]+))?$"));
  const QRegularExpressionMatch m = re.match(text.trimmed());
  if (!m.hasMatch() || m.captured(1).toInt() < 1 || m.captured(2).toInt() < 1)
    return Status::invalid_argument("--cluster '" + text.toStdString() +
                                    "' is not NODESxDEVICES[:DEVICE], e.g. 4x8:h100");
  cluster.nodes = m.captured(1).toInt();
  cluster.devices_per_node = m.captured(2).toInt();
  if (m.hasCaptured(3)) cluster.device = m.captured(3).toLower();
  return cluster;
}

}  // namespace

bool StartupOptions::setsPlan() const {
  return !config.isEmpty() || !preset.isEmpty() || !cluster.isEmpty() || !flags.isEmpty();
}

Result<StartupOptions> parseStartupOptions(const QStringList& arguments) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      QStringLiteral("Lattice Studio: plan a parallel layout, see its cost, launch it."));
  const QCommandLineOption help = parser.addHelpOption();
  const QCommandLineOption screenshot("screenshot", "Render the window to FILE (PNG) and quit.",
                                      "FILE");
  const QCommandLineOption view("view",
                                "View to show: plan, launch, dashboard, history, "
                                "playground.",
                                "NAME", "plan");
  const QCommandLineOption size("size", "Window size for --screenshot.", "WxH", "1280x800");
  const QCommandLineOption theme("theme", "light or dark.", "THEME");
  const QCommandLineOption config("config", "Start from a run configuration (.json).", "FILE");
  const QCommandLineOption preset("preset", "Start from a model preset, e.g. \"GPT-3 6.7B\".",
                                  "NAME");
  const QCommandLineOption cluster("cluster",
                                   "Cluster, e.g. 4x8:h100 (cpu, h100, h100-pcie, h200, "
                                   "a100-80gb, a100-40gb, custom).",
                                   "SHAPE");
  const QCommandLineOption flags("flags", "lattice train flags applied last.", "FLAGS");
  const QCommandLineOption select("select-rank", "Highlight a rank's groups on the canvas.",
                                  "RANK");
  const QCommandLineOption start("start", "Start the plan's run on this machine (Launch view).");
  const QCommandLineOption target(
      "target", "Where the Launch view runs the plan: local, slurm or hostfile.", "TARGET");
  const QCommandLineOption wait("wait",
                                "With --screenshot and --start: grab when the run ends or after "
                                "this many seconds.",
                                "SECONDS", "20");
  const QCommandLineOption fresh("fresh", "Ignore the saved plan and settings (and keep them).");
  const QCommandLineOption demo("demo",
                                "Run the embedded demo at once, as `lattice demo` does: the demo "
                                "plan on the demo corpus, the model saved in "
                                "$LATTICE_DATA_DIR/demo/<run name> (implies --fresh, --start).");
  const QCommandLineOption db("db",
                              "The run store to read and launch into (default: "
                              "$LATTICE_DATA_DIR/runs.sqlite).",
                              "PATH");
  const QCommandLineOption run("run",
                               "A run (id or name) to show in the Dashboard and select in "
                               "History; repeat for several.",
                               "RUN");
  const QCommandLineOption page(
      "dashboard-page", "The Dashboard's page: training, throughput, system or estimate.", "PAGE");
  const QCommandLineOption exitAfterStart(
      "exit-after-start", "Print the time from process start to an interactive window, quit.");
  parser.addOptions({screenshot, view, size, theme, config, preset, cluster, flags, select, start,
                     wait, fresh, demo, db, run, page, exitAfterStart, target});
  if (!parser.parse(arguments)) return Status::invalid_argument(parser.errorText().toStdString());

  StartupOptions o;
  o.help = parser.isSet(help);
  o.helpText = parser.helpText();
  o.screenshot = parser.value(screenshot);
  o.view = parser.value(view);
  const QStringList wh = parser.value(size).split('x');
  if (wh.size() != 2 || wh[0].toInt() < 200 || wh[1].toInt() < 150)
    return Status::invalid_argument("--size '" + parser.value(size).toStdString() +
                                    "' is not WIDTHxHEIGHT (at least 200x150)");
  o.size = QSize(wh[0].toInt(), wh[1].toInt());
  o.theme = parser.value(theme);
  if (!o.theme.isEmpty() && o.theme != QLatin1String("light") && o.theme != QLatin1String("dark"))
    return Status::invalid_argument("--theme '" + o.theme.toStdString() + "' is not light or dark");
  o.config = parser.value(config);
  o.preset = parser.value(preset);
  o.cluster = parser.value(cluster);
  o.flags = parser.value(flags);
  if (parser.isSet(select)) {
    bool ok = false;
    o.selectRank = parser.value(select).toInt(&ok);
    if (!ok || o.selectRank < 0)
      return Status::invalid_argument("--select-rank '" + parser.value(select).toStdString() +
                                      "' is not a rank");
  }
  o.start = parser.isSet(start);
  o.target = parser.value(target);
  if (!o.target.isEmpty() && !launch::parse_target(o.target.toStdString()))
    return Status::invalid_argument("--target '" + o.target.toStdString() +
                                    "' is not local, slurm or hostfile");
  o.waitSeconds = parser.value(wait).toInt();
  o.demo = parser.isSet(demo);
  o.fresh = parser.isSet(fresh) || o.demo;
  o.start = o.start || o.demo;
  o.database = parser.value(db);
  o.runs = parser.values(run);
  o.dashboardPage = parser.value(page);
  if (!o.dashboardPage.isEmpty() && o.dashboardPage != QLatin1String("training") &&
      o.dashboardPage != QLatin1String("throughput") &&
      o.dashboardPage != QLatin1String("system") && o.dashboardPage != QLatin1String("estimate"))
    return Status::invalid_argument("--dashboard-page '" + o.dashboardPage.toStdString() +
                                    "' is not training, throughput, system or estimate");
  o.exitAfterStart = parser.isSet(exitAfterStart);
  return o;
}

Result<Plan> startupPlan(const StartupOptions& o, const Plan& base) {
  Plan plan = base;
  if (!o.config.isEmpty()) {
    Result<TrainOptions> options = readConfigFile(o.config);
    if (!options) return options.status();
    plan.options = *options;
  }
  if (!o.preset.isEmpty()) {
    const std::vector<ModelPreset>& presets = modelPresets();
    auto it = std::find_if(presets.begin(), presets.end(), [&](const ModelPreset& p) {
      return p.name.compare(o.preset, Qt::CaseInsensitive) == 0;
    });
    if (it == presets.end()) {
      QStringList names;
      for (const ModelPreset& p : presets) names << p.name;
      return Status::invalid_argument("--preset '" + o.preset.toStdString() +
                                      "' is not one of: " + names.join(", ").toStdString());
    }
    applyPreset(plan.options, *it);
  }
  if (!o.cluster.isEmpty()) {
    Result<ClusterSettings> cluster = parseCluster(o.cluster, plan.cluster);
    if (!cluster) return cluster.status();
    plan.cluster = *cluster;
  }
  if (!o.flags.isEmpty()) {
    std::vector<std::string> args;
    for (const QString& a : changedTrainFlags(plan.options)) args.push_back(a.toStdString());
    for (const QString& a : QProcess::splitCommand(o.flags)) args.push_back(a.toStdString());
    Result<TrainOptions> options = parse_train_flags(args);
    if (!options) return options.status();
    plan.options = *options;
  }
  normalizePlan(plan);
  return plan;
}

}  // namespace lattice::ui
