// Not a test: renders the Plan view for a preset and its Suggest dialog once the search is
// done (offscreen, no saved settings), for looking at the Llama family's form and layouts
// without a display. Writes PREFIX-plan.png (the window) and PREFIX-suggest.png (the dialog
// drawn over the window where it opens).
// usage: screenshot_studio_suggest PREFIX [--preset NAME] [--cluster NxD:DEVICE] [--flags F]
#include <QApplication>
#include <QCommandLineParser>
#include <QPainter>
#include <QPixmap>
#include <cstdio>

#include "app/main_window.h"
#include "app/screenshot.h"
#include "app/startup_options.h"
#include "plan/plan_model.h"
#include "plan/plan_view.h"
#include "plan/suggest_dialog.h"
#include "plan/suggest_model.h"
#include "wait_for.h"

using namespace lattice::ui;

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QCommandLineParser parser;
  parser.addPositionalArgument("prefix", "PREFIX-plan.png and PREFIX-suggest.png are written.");
  const QCommandLineOption preset("preset", "Model preset.", "NAME", "Llama 3 70B"),
      cluster("cluster", "NODESxDEVICES:DEVICE.", "CLUSTER", "8x8:h100"),
      flags("flags", "More `lattice train` flags.", "FLAGS", "--bf16");
  parser.addOptions({preset, cluster, flags});
  parser.process(app);
  if (parser.positionalArguments().size() != 1) {
    std::fprintf(stderr, "%s", qPrintable(parser.helpText()));
    return 2;
  }
  const QString prefix = parser.positionalArguments()[0];
  StartupOptions start;
  start.preset = parser.value(preset);
  start.cluster = parser.value(cluster);
  start.flags = parser.value(flags);
  lattice::Result<Plan> plan = startupPlan(start, defaultPlan());
  if (!plan) return std::fprintf(stderr, "%s\n", plan.status().message().c_str()), 2;

  MainWindow::Options options;
  options.useSettings = false;
  options.measureCpu = false;
  MainWindow window(options);
  window.planModel()->resetPlan(*plan);
  const QSize size(1280, 800);
  lattice::Status saved =
      saveScreenshot(window, MainWindow::View::kPlan, size, prefix + "-plan.png");
  if (!saved) return std::fprintf(stderr, "%s\n", saved.message().c_str()), 1;

  window.planView()->openSuggest();
  auto* dialog = window.findChild<SuggestDialog*>();
  if (!dialog || !waitFor(dialog, &SuggestDialog::searchFinished, 120)) {
    std::fprintf(stderr, "the search did not finish\n");
    return 1;
  }
  dialog->resize(std::min(1200, size.width() - 40), std::min(640, size.height() - 80));
  waitFor([] { return false; }, 300);  // layouts settle
  QPixmap pixels = window.grab();
  QPainter painter(&pixels);
  const QPixmap over = dialog->grab();
  painter.drawPixmap((pixels.width() - over.width()) / 2, (pixels.height() - over.height()) / 2,
                     over);
  painter.end();
  if (!pixels.save(prefix + "-suggest.png", "PNG"))
    return std::fprintf(stderr, "cannot write %s-suggest.png\n", qPrintable(prefix)), 1;
  const SuggestModel* table = dialog->tableModel();
  std::printf("%d candidates; best TP %d PP %d, fits %s\n", table->rowCount(),
              table->rowCount() ? table->candidate(0).layout.tp : 0,
              table->rowCount() ? table->candidate(0).layout.pp : 0,
              table->rowCount() && table->candidate(0).fits ? "yes" : "no");
  return 0;
}
