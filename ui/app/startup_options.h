// lattice-studio's command line: where to start (a config, a preset, a cluster, extra flags),
// and the headless modes (--screenshot, --exit-after-start).
#pragma once

#include <QSize>
#include <QString>
#include <QStringList>

#include "lattice/status.h"
#include "plan/plan.h"

namespace lattice::ui {

struct StartupOptions {
  QString screenshot;  // write this PNG and quit
  QString view = QStringLiteral("plan");
  QSize size{1280, 800};
  QString theme;         // "light" | "dark"; empty: the saved one
  QString config;        // a run configuration to start from
  QString preset;        // a model preset name ("GPT-3 6.7B")
  QString cluster;       // "NODESxDEVICES[:DEVICE]", e.g. "4x8:h100"
  QString flags;         // `lattice train` flags applied last ("--tensor-model-parallel-size 2")
  int selectRank = -1;   // highlight this rank's groups on the canvas, as a click does
  bool start = false;    // start the plan's run (Launch view) once the window is up
  QString target;        // --target: local | slurm | hostfile (the Launch view's); empty: saved
  int waitSeconds = 20;  // --screenshot with --start: grab after the run ends or this long
  bool fresh = false;    // ignore and keep the saved settings
  // --demo: the embedded demo as `lattice demo` runs it (implies --fresh and --start): the demo
  // plan on the demo corpus, its checkpoints in <data dir>/demo/<run name>.
  bool demo = false;
  QString database;       // --db: the run store the Studio reads and launches into
  QStringList runs;       // --run: runs (ids or names) the Dashboard shows / History selects
  QString dashboardPage;  // --dashboard-page: training | throughput | system | estimate; empty:
                          // training
  bool exitAfterStart = false;  // print the start-up time and quit (measurements)
  bool help = false;
  QString helpText;

  // Any of config, preset, cluster or flags: the plan comes from the command line.
  bool setsPlan() const;
};

// Parses the arguments (the program name first); errors name the option and the value.
Result<StartupOptions> parseStartupOptions(const QStringList& arguments);
// The plan the options describe, starting from `base`.
Result<Plan> startupPlan(const StartupOptions& options, const Plan& base);

}  // namespace lattice::ui
