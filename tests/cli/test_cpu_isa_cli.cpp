// `lattice train` and the copy of the CPU kernels it runs (Note [CPU dispatch],
// kernels/cpu/README.md): the run's description line names it, --cpu-isa and LATTICE_CPU_ISA
// choose it (the flag first), the run record keeps it, and a request this CPU or this build
// cannot serve is refused before training, naming the flag or variable and the value.
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include "common/process.h"
#include "lattice/cpu_isa.h"

namespace {

using lattice::testing::Run;
namespace k = lattice::kernels;

const QStringList kOneStep = {
    "train",         "--mock-data", "--train-iters", "1",  "--num-layers",          "1",
    "--hidden-size", "32",          "--seq-length",  "16", "--num-attention-heads", "2",
    "--vocab-size",  "64",          "--threads",     "1",  "--eval-iters",          "0"};

// `lattice train` for one step; LATTICE_CPU_ISA is `env` ("" = unset).
Run train(const QStringList& extra, const QString& env = "", const QStringList& db = {"--no-db"}) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, kOneStep + extra + db, {}, 120000,
                                       {"LATTICE_CPU_ISA=" + env});
}

QString label(k::CpuIsa isa) {
  return QString("kernels ") + k::cpu_isa_label(isa);
}

}  // namespace

class CpuIsaCli : public QObject {
  Q_OBJECT
 private slots:
  void the_description_names_the_widest_isa_by_default() {
    const Run r = train({});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains(label(k::best_cpu_isa())), qPrintable(r.out));
  }

  void cpu_isa_runs_every_supported_copy_and_refuses_the_others() {
    for (k::CpuIsa isa : k::kAllCpuIsas) {
      const Run r = train({"--cpu-isa", k::cpu_isa_name(isa)});
      if (k::cpu_isa_supported(isa)) {
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains(label(isa)), qPrintable(r.out));
      } else {
        QCOMPARE(r.exit_code, 2);
        const QString expected = QString("--cpu-isa %1: this CPU has no %2")
                                     .arg(k::cpu_isa_name(isa), k::cpu_isa_label(isa));
        QVERIFY2(r.err.contains(expected), qPrintable(r.err));
        QVERIFY(!r.out.contains("iteration"));
      }
    }
  }

  void lattice_cpu_isa_chooses_the_copy_and_the_flag_wins() {
    Run r = train({}, "generic");
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains(label(k::CpuIsa::generic)), qPrintable(r.out));
    r = train({"--cpu-isa", k::cpu_isa_name(k::best_cpu_isa())}, "generic");
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains(label(k::best_cpu_isa())), qPrintable(r.out));
  }

  void unusable_requests_name_the_flag_or_the_variable() {
    Run r = train({"--cpu-isa", "avx3"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("--cpu-isa 'avx3' is not one of auto, generic, avx2, avx512"),
             qPrintable(r.err));
    r = train({}, "sse9");
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("LATTICE_CPU_ISA=sse9 is not an instruction set: use auto, generic, "
                            "avx2 or avx512"),
             qPrintable(r.err));
    QVERIFY(!r.out.contains("iteration"));
  }

  void the_run_record_keeps_the_copy_that_ran() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    const Run r = train({"--run-name", "isa-run"}, "generic", {"--db", db});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const Run show =
        lattice::testing::run_process(LATTICE_CLI_PATH, {"runs", "show", "isa-run", "--db", db});
    QVERIFY2(show.exit_code == 0, qPrintable(show.err));
    QVERIFY2(show.out.contains("\"cpu-isa\":\"generic\""), qPrintable(show.out));
  }
};

QTEST_GUILESS_MAIN(CpuIsaCli)
#include "test_cpu_isa_cli.moc"
