// `lattice-studio --demo`, the Studio half of `installers/setup.sh run`, as a process: the demo
// plan trains on the demo corpus and keeps its model where `lattice demo` keeps it,
// <data dir>/demo/<run name>, recorded in the data directory's run store.
#include <QtTest/QtTest>

#include <QDir>
#include <QTemporaryDir>

#include "common/process.h"

using lattice::testing::Run;

class TestStudioDemo : public QObject {
  Q_OBJECT

 private slots:
  void the_demo_run_keeps_its_model_in_the_demo_directory() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QStringList env = {"LATTICE_DATA_DIR=" + dir.filePath("data"),
                             "XDG_CONFIG_HOME=" + dir.filePath("config"),
                             "QT_QPA_PLATFORM=offscreen"};
    // --screenshot waits for the run to end (or --wait seconds), then grabs the Launch view.
    const Run r = lattice::testing::run_process(
        LATTICE_STUDIO_PATH,
        {"--demo", "--view", "launch", "--screenshot", dir.filePath("launch.png"), "--wait", "200",
         "--flags", "--train-iters 3 --eval-iters 0 --log-interval 1 --threads 2"},
        {}, 240000, env);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY(QFileInfo::exists(dir.filePath("launch.png")));

    const QDir demo(dir.filePath("data/demo"));
    const QStringList runs = demo.entryList({"run-*"}, QDir::Dirs);
    QCOMPARE(runs.size(), 1);
    QFile latest(demo.filePath(runs[0] + "/latest_checkpointed_iteration.txt"));
    QVERIFY2(latest.open(QIODevice::ReadOnly), qPrintable(demo.absolutePath() + ": " + runs[0]));
    QCOMPARE(latest.readAll().trimmed(), QByteArray("3"));

    // The run store of the data directory has it, finished, with its checkpoint.
    const Run show =
        lattice::testing::run_process(LATTICE_CLI_PATH, {"runs", "show", runs[0]}, {}, 60000, env);
    QVERIFY2(show.exit_code == 0, qPrintable(show.err));
    QVERIFY2(show.out.contains("finished"), qPrintable(show.out));
    QVERIFY2(show.out.contains(demo.filePath(runs[0])), qPrintable(show.out));
  }
};

QTEST_GUILESS_MAIN(TestStudioDemo)
#include "test_studio_demo.moc"
