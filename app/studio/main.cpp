// `lattice-studio`: the desktop face of Lattice. Everything but the command line lives in
// ui/ (lattice_ui); see `lattice-studio --help`.
#include <unistd.h>
#include <QApplication>
#include <QEventLoop>
#include <QFile>
#include <QTimer>
#include <cstdio>
#include <cstring>

#include "app/icons.h"
#include "app/main_window.h"
#include "app/screenshot.h"
#include "app/startup_options.h"
#include "dashboard/dashboard_view.h"
#include "lattice/cpu_gemm.h"
#include "lattice/data.h"
#include "lattice/storage/run_store.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/layout_canvas.h"
#include "plan/layout_panel.h"
#include "plan/plan_model.h"
#include "plan/plan_view.h"

namespace {

// Seconds since the kernel started this process (/proc/self/stat field 22), so that the
// start-up figure includes loading the libraries; -1 where /proc is not there.
double secondsSinceProcessStart() {
  QFile stat(QStringLiteral("/proc/self/stat")), uptime(QStringLiteral("/proc/uptime"));
  if (!stat.open(QIODevice::ReadOnly) || !uptime.open(QIODevice::ReadOnly)) return -1;
  const QByteArray line = stat.readAll();
  const QList<QByteArray> fields = line.mid(line.lastIndexOf(')') + 2).split(' ');
  if (fields.size() < 20) return -1;
  const double started = fields[19].toDouble() / static_cast<double>(sysconf(_SC_CLK_TCK));
  return uptime.readAll().split(' ').value(0).toDouble() - started;
}

// Starts the plan's run and returns when it ends or after `seconds`, with the output shown.
void runForScreenshot(lattice::ui::MainWindow& window, int seconds) {
  lattice::ui::LaunchView* launch = window.launchView();
  launch->startRun();
  QEventLoop loop;
  QObject::connect(launch, &lattice::ui::LaunchView::runEnded, &loop, &QEventLoop::quit);
  QTimer::singleShot(seconds * 1000, &loop, &QEventLoop::quit);
  if (launch->isRunning()) loop.exec();
}

bool hasArgument(int argc, char** argv, const char* name) {
  const size_t n = std::strlen(name);
  for (int i = 1; i < argc; i++)
    if (std::strncmp(argv[i], name, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '='))
      return true;
  return false;
}

// --help without a display: a QCoreApplication is enough to print it.
int printHelp(int argc, char** argv) {
  QCoreApplication core(argc, argv);
  QCoreApplication::setApplicationName(QStringLiteral("lattice-studio"));
  lattice::Result<lattice::ui::StartupOptions> parsed =
      lattice::ui::parseStartupOptions(QCoreApplication::arguments());
  if (!parsed) {
    std::fprintf(stderr, "lattice-studio: %s\n", parsed.status().message().c_str());
    return 2;
  }
  std::printf("%s", qPrintable(parsed->helpText));
  return 0;
}

// The ids of --run RUN (ids or names) in the Studio's run store; an unknown run is an error.
lattice::Result<QList<qint64>> findRuns(const QString& database, const QStringList& runs) {
  QList<qint64> ids;
  if (runs.isEmpty()) return ids;
  auto store = lattice::storage::RunStore::open(database.toStdString());
  if (!store) return store.status();
  for (const QString& run : runs) {
    lattice::Result<lattice::storage::RunInfo> info = (*store)->find_run(run.toStdString());
    if (!info) return lattice::Status::invalid_argument("--run: " + info.status().message());
    ids << info->id;
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (hasArgument(argc, argv, "--help") || hasArgument(argc, argv, "-h"))
    return printHelp(argc, argv);
  // The Playground's GEMMs on the libraries `lattice` measured here (Note [GEMM choices file]).
  lattice::kernels::set_cpu_gemm_choices_dir(lattice::default_data_dir());
  const bool noPlatform = qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
  if (hasArgument(argc, argv, "--screenshot") && noPlatform) {
    qputenv("QT_QPA_PLATFORM", "offscreen");  // a screenshot needs no display
  } else if (noPlatform && qEnvironmentVariableIsEmpty("DISPLAY") &&
             qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")) {
    std::fprintf(stderr,
                 "lattice-studio: no display (DISPLAY and WAYLAND_DISPLAY are unset); "
                 "--screenshot FILE renders offscreen, and `lattice` runs without one\n");
    return 1;
  }
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("Lattice"));
  QApplication::setApplicationName(QStringLiteral("lattice-studio"));
  QApplication::setApplicationDisplayName(QStringLiteral("Lattice Studio"));
  QApplication::setApplicationVersion(QStringLiteral(LATTICE_VERSION));
  QApplication::setDesktopFileName(QStringLiteral("lattice-studio"));
  QApplication::setWindowIcon(lattice::ui::appIcon());

  lattice::Result<lattice::ui::StartupOptions> parsed =
      lattice::ui::parseStartupOptions(QApplication::arguments());
  if (!parsed) {
    std::fprintf(stderr, "lattice-studio: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const lattice::ui::StartupOptions& o = *parsed;
  const auto view = lattice::ui::MainWindow::viewFromName(o.view);
  if (!view) {
    std::fprintf(stderr,
                 "lattice-studio: --view '%s' is not one of plan, launch, dashboard, "
                 "history, playground\n",
                 qPrintable(o.view));
    return 2;
  }

  lattice::ui::MainWindow::Options options;
  const bool headless = !o.screenshot.isEmpty();
  options.useSettings = !headless && !o.fresh;
  options.measureCpu = !headless && !o.exitAfterStart;
  options.database = o.database;
  lattice::ui::MainWindow window(options);
  if (!o.theme.isEmpty() || !options.useSettings)
    window.setTheme(lattice::ui::themeFromName(o.theme));
  if (o.setsPlan()) {
    lattice::Result<lattice::ui::Plan> plan =
        lattice::ui::startupPlan(o, window.planModel()->plan());
    if (!plan) {
      std::fprintf(stderr, "lattice-studio: %s\n", plan.status().message().c_str());
      return 2;
    }
    window.planModel()->resetPlan(*plan);
  }
  if (o.demo) {  // `lattice demo`'s run: the demo corpus, the model kept in demo/<run name>
    lattice::ui::LaunchSettings launch = window.launchView()->form()->settings();
    launch.data = lattice::ui::DataSource::kDemo;
    launch.saveCheckpoints = true;
    launch.checkpointsFolder = QStringLiteral("demo");
    window.launchView()->form()->setSettings(launch);
  }
  if (!o.target.isEmpty()) {
    lattice::ui::LaunchSettings launch = window.launchView()->form()->settings();
    launch.target = *lattice::launch::parse_target(o.target.toStdString());
    window.launchView()->form()->setSettings(launch);
  }
  if (o.selectRank >= 0) window.planView()->layoutPanel()->canvas()->selectRank(o.selectRank);
  if (!o.runs.isEmpty()) {
    lattice::Result<QList<qint64>> ids = findRuns(window.database(), o.runs);
    if (!ids) {
      std::fprintf(stderr, "lattice-studio: %s\n", ids.status().message().c_str());
      return 2;
    }
    window.showRuns(*ids);
  }
  if (o.dashboardPage == QLatin1String("throughput"))
    window.dashboardView()->setCurrentPage(lattice::ui::DashboardView::kThroughputPage);
  else if (o.dashboardPage == QLatin1String("system"))
    window.dashboardView()->setCurrentPage(lattice::ui::DashboardView::kSystemPage);
  else if (o.dashboardPage == QLatin1String("estimate"))
    window.dashboardView()->setCurrentPage(lattice::ui::DashboardView::kEstimatePage);

  if (headless) {
    if (o.start) runForScreenshot(window, o.waitSeconds);
    const lattice::Status s = lattice::ui::saveScreenshot(window, *view, o.size, o.screenshot);
    if (!s) {
      std::fprintf(stderr, "lattice-studio: %s\n", s.message().c_str());
      return 1;
    }
    return 0;
  }
  window.showView(*view);
  window.show();
  if (o.start) QTimer::singleShot(0, window.launchView(), &lattice::ui::LaunchView::startRun);
  if (o.exitAfterStart)
    QTimer::singleShot(0, &app, [&app] {
      // One more turn of the loop: the first paint has happened when this runs.
      QTimer::singleShot(0, &app, [&app] {
        std::printf("lattice-studio: interactive %.0f ms after the process started\n",
                    secondsSinceProcessStart() * 1e3);
        app.quit();
      });
    });
  return app.exec();
}
