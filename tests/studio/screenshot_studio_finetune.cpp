// Not a test: renders fine-tuning from History for docs/studio.md. On a run store holding a
// base run that saved a checkpoint and a fine-tune of it (`lattice train --load BASE --finetune`),
// it saves the fine-tune dialog for the base run (LoRA, on --data), History's "Compare with base"
// on the fine-tune, and the Dashboard with both runs' curves overlaid, offscreen.
// usage: screenshot_studio_finetune OUTDIR --db DB --base RUN --ft RUN --data PREFIX [--no-sft]
//        [--theme light|dark]
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QElapsedTimer>
#include <QThread>
#include <cstdio>

#include "app/main_window.h"
#include "app/screenshot.h"
#include "history/finetune_dialog.h"
#include "history/history_view.h"
#include "lattice/storage/run_store.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/plan_model.h"

using namespace lattice::ui;

namespace {

void settle(int ms) {
  QElapsedTimer timer;
  timer.start();
  while (timer.elapsed() < ms) {
    QApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(5);
  }
}

int fail(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QCommandLineParser parser;
  parser.addPositionalArgument("outdir", "Where the PNGs go.");
  const QCommandLineOption db("db", "The run store.", "PATH"), base("base", "Base run.", "RUN"),
      ft("ft", "The fine-tune run.", "RUN"), data("data", "Dataset prefix.", "PREFIX"),
      noSft("no-sft", "Untick SFT."), theme("theme", "light or dark.", "THEME", "light");
  parser.addOptions({db, base, ft, data, noSft, theme});
  parser.process(app);
  if (parser.positionalArguments().size() != 1 || !parser.isSet(db) || !parser.isSet(base) ||
      !parser.isSet(ft)) {
    std::fprintf(stderr, "%s", qPrintable(parser.helpText()));
    return 2;
  }
  const QDir out(parser.positionalArguments()[0]);
  auto store = lattice::storage::RunStore::open(parser.value(db).toStdString());
  if (!store) return fail(store.status().message());
  auto baseRun = (*store)->find_run(parser.value(base).toStdString());
  auto ftRun = (*store)->find_run(parser.value(ft).toStdString());
  if (!baseRun || !ftRun) return fail("no such runs in the store");

  MainWindow::Options options;
  options.useSettings = false;
  options.measureCpu = false;
  options.database = parser.value(db);
  MainWindow window(options);
  window.setTheme(themeFromName(parser.value(theme)));

  // The dialog for the base run: LoRA rank 8 on the attention and MLP inputs.
  FineTuneDialog dialog(*baseRun, window.launchView()->form()->settings(),
                        window.planModel()->plan().cluster, LaunchEnvironment::detect());
  FineTuneSettings s = dialog.fineTuneSettings();
  s.dataPath = parser.value(data);
  s.sft = !parser.isSet(noSft);
  s.loraRank = 8;
  s.loraAlpha = 16;
  s.loraTargets = {"linear_qkv", "linear_fc1"};
  s.loraDropout = 0.05;
  s.iterations = 200;
  s.runName = QString::fromStdString(baseRun->name) + "-lora";
  s.saveDir.clear();  // the directory of the run's own
  dialog.setFineTuneSettings(s);
  dialog.show();
  settle(400);
  if (!dialog.grab().save(out.filePath("studio-finetune-dialog.png"), "PNG"))
    return fail("cannot write the dialog's PNG");
  dialog.hide();

  // History: "Compare with base" on the fine-tune, once the settings are read.
  HistoryView* history = window.historyView();
  window.showView(MainWindow::View::kHistory);
  window.resize(1280, 800);
  window.show();
  // The settings may be read already (while the dialog was shown): poll for the base.
  QElapsedTimer waited;
  waited.start();
  while (!history->baseRunOf(ftRun->id) && waited.elapsed() < 20000) settle(50);
  if (!history->compareWithBase(ftRun->id)) return fail("the fine-tune's base was not found");
  lattice::Status saved = saveScreenshot(window, MainWindow::View::kHistory, QSize(1280, 800),
                                         out.filePath("studio-history-finetune-1280x800.png"));
  if (!saved) return fail(saved.message());
  // The Dashboard with both runs, as "Compare curves" opens it.
  window.showRuns({baseRun->id, ftRun->id});
  saved = saveScreenshot(window, MainWindow::View::kDashboard, QSize(1280, 800),
                         out.filePath("studio-dashboard-finetune-1280x800.png"));
  if (!saved) return fail(saved.message());
  std::printf("%s\n", qPrintable(dialog.problemsText()));
  return 0;
}
