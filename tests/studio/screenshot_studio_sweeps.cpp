// Not a test: renders History's Groups and Parallel coordinates tabs for docs/studio.md, over a
// run store that a sweep of `lattice train` runs wrote. It opens History on every run, waits
// for their settings, groups them by a setting, waits for the grouped curves and saves the
// window; then shows Parallel coordinates and saves it again, as `lattice-studio --screenshot`
// saves the other views (offscreen, no saved settings).
// usage: screenshot_studio_sweeps GROUPS.png PARALLEL.png --db DB [--group-by SETTING]
//        [--band minmax|std] [--colour-by AXIS] [--theme light|dark]
#include <QApplication>
#include <QCommandLineParser>
#include <QEventLoop>
#include <QTimer>
#include <cstdio>

#include "app/main_window.h"
#include "app/screenshot.h"
#include "history/group_panel.h"
#include "history/history_view.h"
#include "history/parallel_view.h"
#include "wait_for.h"

using namespace lattice::ui;

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QCommandLineParser parser;
  parser.addPositionalArgument("groups", "The PNG of the Groups tab.");
  parser.addPositionalArgument("parallel", "The PNG of the Parallel coordinates tab.");
  const QCommandLineOption db("db", "The run store.", "PATH"),
      groupBy("group-by", "The setting to group by.", "SETTING", "lr"),
      band("band", "minmax or std.", "BAND", "minmax"),
      colourBy("colour-by", "The axis lines are coloured by.", "AXIS", "final loss"),
      theme("theme", "light or dark.", "THEME", "light");
  parser.addOptions({db, groupBy, band, colourBy, theme});
  parser.process(app);
  if (parser.positionalArguments().size() != 2 || !parser.isSet(db)) {
    std::fprintf(stderr, "%s", qPrintable(parser.helpText()));
    return 2;
  }
  MainWindow::Options options;
  options.useSettings = false;
  options.measureCpu = false;
  options.database = parser.value(db);
  MainWindow window(options);
  window.setTheme(themeFromName(parser.value(theme)));
  window.resize(1280, 800);
  window.showView(MainWindow::View::kHistory);
  window.show();
  HistoryView* history = window.historyView();
  if (!waitFor(history, &HistoryView::settingsParsed, 60)) {
    std::fprintf(stderr, "the runs' settings were not read: %s\n",
                 qPrintable(history->errorText()));
    return 1;
  }
  history->setAnalysisTab(HistoryView::kGroupsTab);
  GroupPanel* groups = history->groupPanel();
  if (!groups->settingChoices().contains(parser.value(groupBy))) {
    std::fprintf(stderr, "--group-by %s: the runs differ in %s\n",
                 qPrintable(parser.value(groupBy)),
                 qPrintable(groups->settingChoices().join(QStringLiteral(", "))));
    return 2;
  }
  groups->setBand(parser.value(band) == QLatin1String("std") ? BandKind::kStd : BandKind::kMinMax);
  groups->setGroupSetting(parser.value(groupBy));
  if (groups->readingCurves() && !waitFor(groups, &GroupPanel::curvesShown, 60)) {
    std::fprintf(stderr, "the grouped curves were not read\n");
    return 1;
  }
  const QStringList out = parser.positionalArguments();
  lattice::Status saved =
      saveScreenshot(window, MainWindow::View::kHistory, QSize(1280, 800), out[0]);
  if (!saved) return std::fprintf(stderr, "%s\n", saved.message().c_str()), 1;
  history->setAnalysisTab(HistoryView::kParallelTab);
  history->parallelPanel()->setColourBy(parser.value(colourBy));
  saved = saveScreenshot(window, MainWindow::View::kHistory, QSize(1280, 800), out[1]);
  if (!saved) return std::fprintf(stderr, "%s\n", saved.message().c_str()), 1;
  std::printf("%lld groups by %s; parallel coordinates coloured by %s\n",
              static_cast<long long>(groups->groups().size()), qPrintable(parser.value(groupBy)),
              qPrintable(history->parallelPanel()->colourBy()));
  return 0;
}
