// Which rank is slow (lattice/rank_health.h, Note [slow ranks]): the rules on chosen phase
// times, the run recorder's keys read back, the watch's sentences, and a real two-rank run with
// one rank slowed by LATTICE_SLOW_FORWARD_MS, named by `lattice runs show`.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "common/process.h"
#include "lattice/rank_health.h"

using namespace lattice;

namespace {

RankPhaseTimes times(int rank, double forward, double backward, double pipeline_wait = 0,
                     double dp_comm = 0) {
  RankPhaseTimes t;
  t.rank = rank;
  t.forward = forward;
  t.backward = backward;
  t.pipeline_wait = pipeline_wait;
  t.dp_comm = dp_comm;
  t.optimizer = 0.002;
  return t;
}

QString sentences(const std::vector<RankFinding>& found) {
  QStringList s;
  for (const RankFinding& f : found) s << QString::fromStdString(f.sentence);
  return s.join('\n');
}

}  // namespace

class SlowRanks : public QObject {
  Q_OBJECT
 private slots:
  void equal_ranks_are_not_named() {
    const std::vector<RankPhaseTimes> ranks = {times(0, 0.100, 0.200, 0, 0.01),
                                               times(1, 0.110, 0.215, 0, 0.005)};
    QVERIFY2(find_slow_ranks(1, 1, 2, ranks).empty(),
             qPrintable(sentences(find_slow_ranks(1, 1, 2, ranks))));
  }

  void a_rank_over_one_and_a_half_times_its_peers_median_is_named() {
    // DP 4: rank 2 at 2x; the other three set the reference (their median, 0.302 s).
    const std::vector<RankPhaseTimes> ranks = {
        times(0, 0.100, 0.200, 0, 0.30), times(1, 0.105, 0.195, 0, 0.31),
        times(2, 0.200, 0.400, 0, 0.00), times(3, 0.098, 0.210, 0, 0.29)};
    const std::vector<RankFinding> found = find_slow_ranks(1, 1, 4, ranks);
    QCOMPARE(found.size(), size_t{1});
    QCOMPARE(found[0].kind, RankFinding::kSlowRank);
    QCOMPARE(found[0].rank, 2);
    QCOMPARE(found[0].pp, 0);
    QCOMPARE(QString::fromStdString(found[0].sentence),
             QString("rank 2 is slow: 602 ms of compute per iteration against 302 ms on the 3 "
                     "other ranks of pp 0 (2.0x); its data-parallel peers wait up to 310 ms per "
                     "iteration in the gradient reduction"));
  }

  void a_gap_under_the_floor_is_not_named() {
    // 3x, but 4 ms: a tiny model's sub-millisecond phases, not a slow rank.
    const std::vector<RankPhaseTimes> ranks = {times(0, 0.0005, 0.0005), times(1, 0.002, 0.004)};
    QVERIFY(find_slow_ranks(1, 1, 2, ranks).empty());
  }

  void peers_are_the_ranks_of_the_same_pipeline_stage() {
    // TP 2 x PP 2: ranks 0, 1 are pp 0, ranks 2, 3 pp 1 (Megatron's order). pp 1 does twice
    // the work of pp 0 in both ranks: no rank is slow against its peers, and with pp 0
    // waiting 40 % of its iteration, pp 1 is the stage the others wait on.
    const std::vector<RankPhaseTimes> ranks = {
        times(0, 0.050, 0.100, 0.12), times(1, 0.052, 0.102, 0.12),
        times(2, 0.100, 0.200, 0.01), times(3, 0.101, 0.203, 0.01)};
    const std::vector<RankFinding> found = find_slow_ranks(2, 2, 1, ranks);
    QCOMPARE(found.size(), size_t{1});
    QCOMPARE(found[0].kind, RankFinding::kWaitedOnStage);
    QCOMPARE(found[0].pp, 1);
    QCOMPARE(found[0].rank, 3);
    QVERIFY2(QString::fromStdString(found[0].sentence)
                 .startsWith("pp 1 is the stage the others wait on: 304 ms of compute per "
                             "iteration against 154 ms on the other stages, which spend 44 %"),
             found[0].sentence.c_str());
    // Without the wait, an uneven stage is not said to hold the others up.
    std::vector<RankPhaseTimes> unwaited = ranks;
    for (RankPhaseTimes& r : unwaited) r.pipeline_wait = 0.005;
    QVERIFY2(find_slow_ranks(2, 2, 1, unwaited).empty(),
             qPrintable(sentences(find_slow_ranks(2, 2, 1, unwaited))));
  }

  void the_recorders_keys_are_read_back() {
    const std::map<std::string, double> latest = {{"lm loss", 5.0},
                                                  {"rank 0 forward time", 0.1},
                                                  {"rank 0 backward time", 0.2},
                                                  {"rank 0 optimizer time", 0.01},
                                                  {"rank 10 forward time", 0.3},
                                                  {"rank 10 data-parallel comm time", 0.04},
                                                  {"rank 10 pipeline wait time", 0.05},
                                                  {"rank 3 memory fragmentation", 1e6}};
    const std::vector<RankPhaseTimes> r = rank_phase_times(latest);
    QCOMPARE(r.size(), size_t{2});  // rank 3 has no forward time
    QCOMPARE(r[0].rank, 0);
    QCOMPARE(r[0].compute(), 0.1 + 0.2 + 0.01);
    QCOMPARE(r[1].rank, 10);
    QCOMPARE(r[1].dp_comm, 0.04);
    QCOMPARE(r[1].pipeline_wait, 0.05);
  }

  void the_watchs_absent_ranks_are_named() {
    const std::string stopped =
        "rank 0 waited 3 s (--distributed-timeout-minutes 0.05) in the tensor-parallel "
        "all-reduce of iteration 4 for rank 1 (its group: tensor-parallel [0,1]); rank 1 did "
        "not arrive and did not answer: it is stopped (SIGSTOP or a debugger; pid 77 on this "
        "machine); the job is ended";
    std::vector<RankFinding> found = absent_ranks(stopped);
    QCOMPARE(found.size(), size_t{1});
    QCOMPARE(found[0].rank, 1);
    QCOMPARE(QString::fromStdString(found[0].sentence),
             QString("rank 1 is the one the others waited for (it did not arrive and did not "
                     "answer: it is stopped; the run's error has the communication watch's "
                     "account)"));
    found = absent_ranks(
        "rank 2 (pid 9 on this machine) has ended (killed, crashed, or stopped by an error of "
        "its own printed above) while rank 0 waited 2 s in the all-reduce (group: world); the "
        "job is ended");
    QCOMPARE(found.size(), size_t{1});
    QCOMPARE(found[0].rank, 2);
    QVERIFY(absent_ranks("out of memory: 12 bytes of weights could not be allocated").empty());
  }

#ifdef LATTICE_MPIEXEC
  void a_slowed_rank_of_a_real_run_is_named_by_runs_show() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    // A tiny DP 2 run, two micro-batches of 2 per rank and iteration, logged every 3.
    const QStringList train =
        QStringList{LATTICE_CLI_PATH} +
        QString("train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                "--seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 8 "
                "--train-iters 6 --log-interval 3 --eval-iters 0 --threads 1 --run-name slowed")
            .split(' ') +
        QStringList{"--db", db};
    // DP 2: rank 1 alone gets 60 ms more per forward, 2 forwards per iteration.
    const testing::Run run = testing::run_process(
        LATTICE_MPIEXEC, QStringList{"--oversubscribe", "-n", "1"} + train +
                             QStringList{":", "-n", "1", "env", "LATTICE_SLOW_FORWARD_MS=60"} +
                             train);
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    const testing::Run show =
        testing::run_process(LATTICE_CLI_PATH, {"runs", "show", "slowed", "--db", db});
    QVERIFY2(show.exit_code == 0, qPrintable(show.err));
    QVERIFY2(show.out.contains("  slow or absent ranks (the latest logged phase times"),
             qPrintable(show.out));
    static const QRegularExpression named(
        "\n    rank 1 is slow: [0-9.]+ ms of compute per iteration against [0-9.]+ ms on the 1 "
        "other rank of pp 0 \\([0-9.]+x\\); its data-parallel peers wait up to [0-9.]+ ms per "
        "iteration in the gradient reduction\n");
    QVERIFY2(named.match(show.out).hasMatch(), qPrintable(show.out));
    QVERIFY2(!show.out.contains("rank 0 is slow"), qPrintable(show.out));
  }
#endif
};

QTEST_GUILESS_MAIN(SlowRanks)
#include "test_slow_ranks.moc"
