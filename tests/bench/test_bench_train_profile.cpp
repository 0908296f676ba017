// lattice-bench-train --profile: one table of where a training step's time goes. Each op's
// calls are counted per training step (no validation or test pass is folded in), the rows
// add up to the whole step (an optimizer row and an "untimed" row close it), and a run
// without the flag prints no table. Structure only: no figure is timed here.
#include <QtTest/QtTest>

#include <QMap>
#include <QRegularExpression>

#include "common/process.h"

namespace {

struct ProfileRow {
  double ms_per_step = 0, share = 0;
  QString calls_per_step;
};

// The "| op | ms per step | % of step | calls per step |" rows of `out`, by op name.
QMap<QString, ProfileRow> profile_rows(const QString& out) {
  QMap<QString, ProfileRow> rows;
  const QRegularExpression row(R"(^\| ([^|]+) \| ([0-9.]+) \| ([0-9.]+) \| ([^|]+) \|$)",
                               QRegularExpression::MultilineOption);
  for (auto it = row.globalMatch(out); it.hasNext();) {
    const auto m = it.next();
    rows[m.captured(1)] = {m.captured(2).toDouble(), m.captured(3).toDouble(), m.captured(4)};
  }
  return rows;
}

lattice::testing::Run bench(const QStringList& extra) {
  return lattice::testing::run_process(
      LATTICE_BENCH_TRAIN_PATH,
      QStringList{"--config", "A", "--threads", "1", "--steps", "2"} + extra);
}

}  // namespace

class TestBenchTrainProfile : public QObject {
  Q_OBJECT
 private slots:
  void ops_are_counted_per_training_step() {
    const auto r = bench({"--profile"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const auto rows = profile_rows(r.out);
    QVERIFY2(!rows.isEmpty(), qPrintable("no profile table in:\n" + r.out));
    // Config A: one LM head and one cross-entropy per step, 4 layers of 4 linear layers each,
    // 4 + 4 + 1 LayerNorms forward and backward.
    QCOMPARE(rows.value("lm head forward").calls_per_step, QString("1"));
    QCOMPARE(rows.value("lm head backward").calls_per_step, QString("1"));
    QCOMPARE(rows.value("softmax cross-entropy").calls_per_step, QString("1"));
    QCOMPARE(rows.value("linear forward").calls_per_step, QString("16"));
    QCOMPARE(rows.value("layernorm").calls_per_step, QString("18"));
  }

  void the_rows_add_up_to_the_step() {
    const auto r = bench({"--profile"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const auto rows = profile_rows(r.out);
    QVERIFY2(rows.contains("optimizer (norm, clip, adamw)"), qPrintable(r.out));
    QVERIFY2(rows.contains("untimed"), qPrintable(r.out));
    double share = 0;
    for (const ProfileRow& row : rows) share += row.share;
    // Each share is printed to 0.1 %; 16 rows round by at most 0.8 % together.
    QVERIFY2(std::abs(share - 100.0) <= 1.0,
             qPrintable(QString("shares add to %1 %:\n%2").arg(share).arg(r.out)));
  }

  void without_the_flag_there_is_no_table() {
    const auto r = bench({});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(profile_rows(r.out).isEmpty(), qPrintable(r.out));
    QVERIFY2(r.out.contains("RESULT {"), qPrintable(r.out));
  }
};

QTEST_GUILESS_MAIN(TestBenchTrainProfile)
#include "test_bench_train_profile.moc"
