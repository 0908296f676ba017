// Not a test: renders the Plan view with its Calibrate dialog after fitting a recorded run
// (offscreen, no saved settings), for docs/studio.md "Calibrate". The plan comes from the
// startup options and must be the run's model and world. --hostfile and --cluster-name show the
// cluster target (the Launch view's hostfile) chosen and the fit saved for that cluster.
// usage: screenshot_studio_calibrate OUT.png DATABASE RUN [--cluster NxD:DEVICE] [--flags F]
//                                    [--hostfile FILE] [--cluster-name NAME]
#include <QApplication>
#include <QCommandLineParser>
#include <QPainter>
#include <QPixmap>
#include <cstdio>

#include "app/main_window.h"
#include "app/startup_options.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/calibrate_dialog.h"
#include "plan/plan_model.h"
#include "plan/plan_view.h"
#include "wait_for.h"

using namespace lattice::ui;

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QCommandLineParser parser;
  parser.addPositionalArgument("out", "The PNG to write.");
  parser.addPositionalArgument("database", "The run store holding the probe.");
  parser.addPositionalArgument("run", "The probe run's name or id.");
  const QCommandLineOption cluster("cluster", "NODESxDEVICES:DEVICE.", "CLUSTER", "1x2:cpu"),
      flags("flags", "`lattice train` flags of the plan.", "FLAGS", ""),
      hostfile("hostfile", "The Launch view's hostfile target, chosen as the probe's.", "FILE"),
      clusterName("cluster-name", "The plan's cluster name.", "NAME");
  parser.addOptions({cluster, flags, hostfile, clusterName});
  parser.process(app);
  const QStringList args = parser.positionalArguments();
  if (args.size() != 3) {
    std::fprintf(stderr, "%s", qPrintable(parser.helpText()));
    return 2;
  }
  StartupOptions start;
  start.cluster = parser.value(cluster);
  start.flags = parser.value(flags);
  lattice::Result<Plan> plan = startupPlan(start, defaultPlan());
  if (!plan) return std::fprintf(stderr, "%s\n", plan.status().message().c_str()), 2;
  plan->cluster.name = parser.value(clusterName);

  MainWindow::Options options;
  options.useSettings = false;
  MainWindow window(options);
  window.planModel()->resetPlan(*plan);
  window.resize(1280, 800);
  window.showView(MainWindow::View::kPlan);
  window.show();
  // This CPU's SGEMM rate, as the Studio measures it at start-up (the defaults' peak).
  waitFor([&] { return window.planModel()->cpuGflops() > 0; }, 60000);
  if (parser.isSet(hostfile)) {
    LaunchSettings launch = window.launchView()->form()->settings();
    launch.target = lattice::launch::Target::kHostfile;
    launch.hostfile = parser.value(hostfile);
    window.launchView()->form()->setSettings(launch);
  }
  window.planView()->openCalibrate();
  auto* dialog = window.findChild<CalibrateDialog*>();
  if (!dialog) return std::fprintf(stderr, "no Calibrate dialog\n"), 1;
  if (parser.isSet(hostfile)) dialog->setTarget(CalibrateDialog::Target::kCluster);
  dialog->setDatabase(args[1]);
  if (!dialog->fitRun(args[2]))
    return std::fprintf(stderr, "%s\n", qPrintable(dialog->statusText())), 1;
  waitFor([] { return false; }, 300);  // layouts settle
  QPixmap pixels = window.grab();
  QPainter painter(&pixels);
  const QPixmap over = dialog->grab();
  painter.drawPixmap((pixels.width() - over.width()) / 2, (pixels.height() - over.height()) / 2,
                     over);
  painter.end();
  if (!pixels.save(args[0], "PNG"))
    return std::fprintf(stderr, "cannot write %s\n", qPrintable(args[0])), 1;
  std::printf("%s\n", qPrintable(dialog->statusText()));
  return 0;
}
