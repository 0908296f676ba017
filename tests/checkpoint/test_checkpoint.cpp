// Checkpoints as a user meets them, with real MPI jobs: a run stopped and resumed continues
// bit for bit; a checkpoint saved under one layout continues under others; a job killed while
// saving resumes from the previous complete checkpoint, removes what the save left and says so; a
// corrupt or truncated shard is refused by name; GPT-2 weights survive import and export unchanged;
// a Llama-family checkpoint continues in another layout and is refused by a run whose
// architecture flags differ; a reshard that pads the vocabulary further fills the new rows of
// both vocabulary tables with the mean of the real rows.
#include <QtTest/QtTest>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <cmath>
#include <csignal>

#include "checkpoint/safetensors.h"
#include "common/process.h"
#include "lattice/storage/run_store.h"

namespace {

using lattice::testing::Run;
using lattice::testing::run_lattice;

// 20 iterations planned (the learning-rate schedule depends on it); runs stop early with
// --exit-interval.
const QStringList kModel = {"train",
                            "--mock-data",
                            "--num-layers",
                            "4",
                            "--hidden-size",
                            "64",
                            "--num-attention-heads",
                            "8",
                            "--seq-length",
                            "32",
                            "--vocab-size",
                            "511",
                            "--micro-batch-size",
                            "2",
                            "--global-batch-size",
                            "8",
                            "--train-iters",
                            "20",
                            "--lr",
                            "1e-3",
                            "--lr-warmup-iters",
                            "2",
                            "--lr-decay-style",
                            "cosine",
                            "--eval-iters",
                            "0",
                            "--log-interval",
                            "5",
                            "--threads",
                            "1"};
const QStringList kTp2Pp2Dp2 = {"--tensor-model-parallel-size", "2",
                                "--pipeline-model-parallel-size", "2",
                                "--use-distributed-optimizer"};

}  // namespace

class Checkpoints : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db() const { return dir_.filePath("runs.sqlite"); }
  QString ckpt() const { return dir_.filePath("ckpt"); }

  // Every logged step's loss of run `name`, by step.
  std::map<int64_t, double> losses(const QString& name) {
    std::map<int64_t, double> out;
    auto store = lattice::storage::RunStore::open(db().toStdString());
    if (!store) return out;
    auto run = (*store)->find_run(name.toStdString());
    if (!run) return out;
    auto history = (*store)->history(run->id);
    if (!history) return out;
    for (const auto& series : history->metrics)
      if (series.key == "lm loss")
        for (const auto& p : series.points) out[p.step] = p.value;
    return out;
  }

  Run train(const QString& name, int ranks, const QStringList& extra) {
    return run_lattice(ranks, kModel + QStringList{"--db", db(), "--run-name", name} + extra);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    // The unchanged continuation, and a run stopped after 10 iterations with a checkpoint.
    Run straight = train("straight", 8, kTp2Pp2Dp2);
    QVERIFY2(straight.exit_code == 0, qPrintable(straight.err));
    Run first =
        train("first-10", 8, kTp2Pp2Dp2 + QStringList{"--save", ckpt(), "--exit-interval", "10"});
    QVERIFY2(first.exit_code == 0, qPrintable(first.err));
    QVERIFY2(first.out.contains("saved checkpoint of iteration 10"), qPrintable(first.out));
    QCOMPARE(losses("first-10").size(), size_t{10});
  }

  void resume_is_bit_identical() {
    Run resumed = train("resumed", 8, kTp2Pp2Dp2 + QStringList{"--load", ckpt()});
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err));
    QVERIFY2(resumed.out.contains("continuing after iteration 10"), qPrintable(resumed.out));
    const auto want = losses("straight"), got = losses("resumed");
    QCOMPARE(got.size(), size_t{10});
    for (int step = 11; step <= 20; step++)
      QVERIFY2(got.at(step) == want.at(step),
               qPrintable(QString("step %1: resumed loss %2, uninterrupted %3")
                              .arg(step)
                              .arg(got.at(step), 0, 'g', 17)
                              .arg(want.at(step), 0, 'g', 17)));
  }

  void another_layout_continues_the_run() {
    const auto want = losses("straight");
    const struct {
      const char* name;
      int ranks;
      QStringList layout;
    } cases[] = {{"resharded-pp4-dp2", 8, {"--pipeline-model-parallel-size", "4"}},
                 {"resharded-one-process", 1, {}}};
    for (const auto& c : cases) {
      Run r =
          train(c.name, c.ranks, c.layout + QStringList{"--load", ckpt(), "--exit-interval", "15"});
      QVERIFY2(r.exit_code == 0, qPrintable(r.err));
      const auto got = losses(c.name);
      QCOMPARE(got.size(), size_t{5});
      for (int step = 11; step <= 15; step++) {
        const double rel = std::abs(got.at(step) - want.at(step)) / want.at(step);
        QVERIFY2(rel <= 1e-5, qPrintable(QString("%1 step %2: loss %3, uninterrupted %4")
                                             .arg(c.name)
                                             .arg(step)
                                             .arg(got.at(step), 0, 'g', 17)
                                             .arg(want.at(step), 0, 'g', 17)));
      }
    }
  }

  // The Llama family (RoPE, RMSNorm, SwiGLU, 2 key/value heads for 8 query heads, the untied
  // output layer on the last stage, no biases): saved at iteration 4 under TP 2 x PP 2 x DP 2,
  // continued in one process like the run that never stopped; a run whose --rotary-base differs
  // from the checkpoint's is refused, naming the flag and both values.
  void a_llama_checkpoint_continues_in_another_layout_and_refuses_another_rope_base() {
    const QStringList llama = {"--position-embedding-type", "rope", "--normalization", "RMSNorm",
                               "--swiglu", "--ffn-hidden-size", "128", "--group-query-attention",
                               "--num-query-groups", "2", "--untie-embeddings-and-output-weights",
                               "--disable-bias-linear", "--exit-interval", "8"};
    const QString save = dir_.filePath("llama-ckpt");
    Run straight = train("llama-straight", 1, llama);
    QVERIFY2(straight.exit_code == 0, qPrintable(straight.err));
    Run first = train("llama-first-4", 8,
                      kTp2Pp2Dp2 + llama + QStringList{"--save", save, "--save-interval", "4"});
    QVERIFY2(first.exit_code == 0, qPrintable(first.err));
    QVERIFY(QFile::exists(save + "/iter_0000004/metadata.json"));
    Run resumed = train("llama-resumed", 1,
                        llama + QStringList{"--load", save, "--ckpt-step", "4"});
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err));
    const auto want = losses("llama-straight"), got = losses("llama-resumed");
    QCOMPARE(got.size(), size_t{4});
    for (int step = 5; step <= 8; step++) {
      const double rel = std::abs(got.at(step) - want.at(step)) / want.at(step);
      QVERIFY2(rel <= 1e-5, qPrintable(QString("step %1: resumed loss %2, uninterrupted %3")
                                           .arg(step)
                                           .arg(got.at(step), 0, 'g', 17)
                                           .arg(want.at(step), 0, 'g', 17)));
    }
    Run refused = train("llama-other-base", 1,
                        llama + QStringList{"--load", save, "--rotary-base", "500000"});
    QVERIFY(refused.exit_code != 0);
    QVERIFY2(refused.err.contains("--rotary-base 500000 disagrees with 10000 in"),
             qPrintable(refused.err));
  }

  // Megatron's wall-clock budget: every rank stops at the same iteration, which is saved and
  // recorded; the run exits 0 (a time budget is not a failure).
  void exit_duration_saves_and_stops_every_rank_at_one_iteration() {
    const QString save = dir_.filePath("duration");
    Run r = train("duration", 2,
                  {"--train-iters", "1000000", "--exit-duration-in-mins", "0.1", "--save", save});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const QRegularExpressionMatch m =
        QRegularExpression(R"(exiting after iteration (\d+) \(--exit-duration-in-mins 0.1\))")
            .match(r.out);
    QVERIFY2(m.hasMatch(), qPrintable(r.out.right(2000)));
    const int stopped = m.captured(1).toInt();
    QVERIFY2(stopped > 0 && stopped < 1000000, qPrintable(m.captured(0)));
    QVERIFY2(r.out.contains(QString("saved checkpoint of iteration %1").arg(stopped)),
             qPrintable(r.out.right(2000)));
    QFile latest(save + "/latest_checkpointed_iteration.txt");
    QVERIFY(latest.open(QIODevice::ReadOnly));
    QCOMPARE(latest.readAll().trimmed().toInt(), stopped);
    const auto logged = losses("duration");
    QCOMPARE(logged.size(), size_t(stopped));
    QCOMPARE(logged.rbegin()->first, int64_t{stopped});
  }

  void offline_reshard_loads_like_a_save() {
    const QString out = dir_.filePath("resharded");
    Run r = run_lattice(1, {"ckpt", "reshard", ckpt(), out, "--tensor-model-parallel-size", "1",
                            "--pipeline-model-parallel-size", "2"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    Run inspect = run_lattice(1, {"ckpt", "inspect", out});
    QVERIFY2(inspect.exit_code == 0, qPrintable(inspect.out + inspect.err));
    QVERIFY2(inspect.out.contains("layout      TP 1, PP 2, DP 1"), qPrintable(inspect.out));
    QVERIFY2(inspect.out.contains("every file's size and checksum match"), qPrintable(inspect.out));
    // The run's own settings travel with the weights; only the layout is the new one.
    QFile meta(out + "/iter_0000010/metadata.json");
    QVERIFY2(meta.open(QIODevice::ReadOnly), qPrintable(meta.fileName()));
    const QJsonObject config =
        QJsonDocument::fromJson(meta.readAll()).object()["config"].toObject();
    QCOMPARE(config["global-batch-size"].toInt(), 8);
    QCOMPARE(config["lr"].toDouble(), 1e-3);
    QCOMPARE(config["mock-data"].toBool(), true);
    QCOMPARE(config["use-distributed-optimizer"].toBool(), true);
    QCOMPARE(config["tensor-model-parallel-size"].toInt(), 1);
    QCOMPARE(config["pipeline-model-parallel-size"].toInt(), 2);
    // Same weights either way.
    QVERIFY(run_lattice(1, {"ckpt", "export-hf", ckpt(), dir_.filePath("a.st")}).exit_code == 0);
    QVERIFY(run_lattice(1, {"ckpt", "export-hf", out, dir_.filePath("b.st")}).exit_code == 0);
    QFile a(dir_.filePath("a.st")), b(dir_.filePath("b.st"));
    QVERIFY(a.open(QIODevice::ReadOnly) && b.open(QIODevice::ReadOnly));
    QVERIFY2(a.readAll() == b.readAll(), "export of the resharded checkpoint differs");
  }

  void killed_during_save_resumes_from_previous() {
    const QString save = dir_.filePath("crash");
    QProcess job;
    QProcessEnvironment e = lattice::testing::test_environment();
    e.insert("LATTICE_CHECKPOINT_STALL_AT", "4");
    job.setProcessEnvironment(e);
    job.start(LATTICE_MPIEXEC, QStringList{"--oversubscribe", "-n", "2", LATTICE_CLI_PATH} +
                                   kModel +
                                   QStringList{"--db", db(), "--run-name", "crash", "--save", save,
                                               "--save-interval", "2"});
    QVERIFY(job.waitForStarted());
    // Wait for iteration 4's shards to be written (the save then stalls), then kill -9.
    QElapsedTimer waited;
    waited.start();
    const QString tmp = save + "/iter_0000004.tmp";
    // (Data-parallel rank 1 holds a replica and writes nothing of its own.)
    while (!QFile::exists(tmp + "/rank_00000.json") && waited.elapsed() < 120000) QTest::qWait(100);
    QVERIFY2(QFile::exists(tmp + "/rank_00000.json"), "the save of iteration 4 never started");
    for (const QString& entry : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
      QFile cmdline("/proc/" + entry + "/cmdline");
      if (cmdline.open(QIODevice::ReadOnly) && cmdline.readAll().contains(save.toUtf8()) &&
          entry.toInt() != QCoreApplication::applicationPid())
        ::kill(entry.toInt(), SIGKILL);
    }
    job.waitForFinished(30000);
    QVERIFY(QFile::exists(save + "/iter_0000002/metadata.json"));
    QVERIFY(!QFile::exists(save + "/iter_0000004/metadata.json"));
    Run resumed = train("after-crash", 2, {"--load", save, "--save", save, "--exit-interval", "6"});
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err));
    QVERIFY2(resumed.out.contains("removed iter_0000004.tmp"), qPrintable(resumed.out));
    QVERIFY(!QFileInfo::exists(save + "/iter_0000004.tmp"));
    QVERIFY2(resumed.out.contains("continuing after iteration 2"), qPrintable(resumed.out));
    QVERIFY(QFile::exists(save + "/iter_0000006/metadata.json"));
  }

  // A job stopped through mpirun saves and is recorded as killed (Note [stopping under mpirun]
  // in app/cli/train_command.cpp). Each save is held 3 s, longer than mpirun's default kill
  // timeout, and rank 0 prints every iteration, so a rank blocked on its output pipe would
  // never save.
  void stop_through_mpirun(const QString& name, const QStringList& mpirun_options, int signal) {
    const QString save = dir_.filePath(name);
    QProcess job;
    QProcessEnvironment e = lattice::testing::test_environment();
    e.insert("LATTICE_CHECKPOINT_STALL_AT", "*:3");
    job.setProcessEnvironment(e);
    job.setProcessChannelMode(QProcess::MergedChannels);  // mpirun's notices are on stderr
    job.start(LATTICE_MPIEXEC, mpirun_options +
                                   QStringList{"--oversubscribe", "-n", "2", LATTICE_CLI_PATH} +
                                   kModel +
                                   QStringList{"--train-iters", "100000", "--log-interval", "1",
                                               "--db", db(), "--run-name", name, "--save", save});
    QVERIFY(job.waitForStarted());
    QElapsedTimer waited;
    waited.start();
    while (losses(name).size() < 2 && waited.elapsed() < 120000) QTest::qWait(100);
    QVERIFY2(losses(name).size() >= 2, "the job never logged two iterations");
    QElapsedTimer stopping;
    stopping.start();
    ::kill(static_cast<pid_t>(job.processId()), signal);
    QVERIFY2(job.waitForFinished(90000), "the job did not end within 90 s of the signal");
    qInfo("%s: the job ended %lld ms after the signal", qPrintable(name),
          static_cast<long long>(stopping.elapsed()));
    const QString output = QString::fromLocal8Bit(job.readAll());
    if (signal == SIGUSR1) {
      // A stop is no failure: mpirun neither aborts the job nor waits out its kill timeout.
      QVERIFY2(job.exitStatus() == QProcess::NormalExit && job.exitCode() == 0,
               qPrintable(QString("mpirun exit code %1:\n%2").arg(job.exitCode()).arg(output)));
      QVERIFY2(!output.contains("aborted"), qPrintable(output.right(2000)));
      QVERIFY2(stopping.elapsed() < 20000, "mpirun outlived its stopped ranks");
    }
    QFile latest(save + "/latest_checkpointed_iteration.txt");
    QVERIFY2(latest.open(QIODevice::ReadOnly), "no complete checkpoint after the stop");
    const int iteration = latest.readAll().trimmed().toInt();
    QVERIFY2(iteration >= 2, qPrintable(QString("checkpoint of iteration %1").arg(iteration)));
    QVERIFY(
        QFile::exists(save + QString("/iter_%1/metadata.json").arg(iteration, 7, 10, QChar('0'))));
    auto store = lattice::storage::RunStore::open(db().toStdString());
    QVERIFY(store.is_ok());
    auto run = (*store)->find_run(name.toStdString());
    QVERIFY(run.is_ok());
    QCOMPARE(QString(lattice::storage::run_status_name(run->status)), QString("killed"));
    QCOMPARE(run->latest_step.value_or(-1), static_cast<int64_t>(iteration));
  }

  // mpirun forwards SIGUSR1 to every rank at once: no kill timeout is involved, not even the
  // 30 s one the launch library gives mpirun.
  void sigusr1_to_mpirun_saves_and_records_killed() {
    stop_through_mpirun("usr1", {"--mca", "odls_base_sigkill_timeout", "30"}, SIGUSR1);
  }

  // SIGTERM (or Ctrl-C) to mpirun reaches the ranks only after mpirun's kill timeout, and they
  // have that long again before SIGKILL; meanwhile mpirun reads none of their output.
  void sigterm_to_mpirun_with_a_kill_timeout_saves_and_records_killed() {
    stop_through_mpirun("term", {"--mca", "odls_base_sigkill_timeout", "8"}, SIGTERM);
  }

  void corrupt_or_truncated_shards_are_refused() {
    const QString save = dir_.filePath("crash");  // iterations 2 and 6 (4 was interrupted)
    QVERIFY(QFile::exists(save + "/iter_0000006/metadata.json"));
    const QString shard = save + "/iter_0000006/rank_00000.safetensors";
    QFile f(shard);
    QVERIFY(f.exists() && f.open(QIODevice::ReadWrite));
    QByteArray bytes = f.readAll();
    QVERIFY(bytes.size() > 1024);
    bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x5a);
    f.seek(0);
    f.write(bytes);
    f.close();
    Run corrupt = train("corrupt", 1, {"--load", save});
    QCOMPARE(corrupt.exit_code, 1);
    QVERIFY2(corrupt.err.contains("rank_00000.safetensors") && corrupt.err.contains("checksum") &&
                 corrupt.err.contains("the previous complete checkpoint is iter_0000002"),
             qPrintable(corrupt.err));
    QVERIFY(f.resize(bytes.size() / 2));
    Run truncated = train("truncated", 1, {"--load", save});
    QCOMPARE(truncated.exit_code, 1);
    QVERIFY2(truncated.err.contains("truncated"), qPrintable(truncated.err));
    Run inspect = run_lattice(1, {"ckpt", "inspect", save});
    QCOMPARE(inspect.exit_code, 1);
    QVERIFY2(inspect.out.contains("rank_00000.safetensors"), qPrintable(inspect.out));
  }

  // Vocabulary 301 (300 + NullTokenizer's end of document) pads to 384 at TP 1 and to 512 at
  // TP 4: rows 384-511, TP rank 3's whole slice, are new. Both tables (untied) get the mean of
  // the 301 real rows (Note [vocabulary padding rows], hf_tensors.cpp); the AdamW moments start
  // at zero there. Before, the word embedding's new rows were zero and an untied output layer
  // was refused.
  void reshard_pads_the_vocabulary_with_mean_rows() {
    const QString save = dir_.filePath("vocab-ck"), out = dir_.filePath("vocab-tp4");
    Run made = run_lattice(
        1, {"train", "--mock-data", "--num-layers", "2", "--hidden-size", "32",
            "--num-attention-heads", "4", "--seq-length", "16", "--vocab-size", "300",
            "--untie-embeddings-and-output-weights", "--micro-batch-size", "2",
            "--global-batch-size", "2", "--train-iters", "2", "--eval-iters", "0", "--threads",
            "1", "--db", db(), "--save", save});
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    Run r = run_lattice(1, {"ckpt", "reshard", save, out, "--tensor-model-parallel-size", "4",
                            "--pipeline-model-parallel-size", "1"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    auto floats = [](const lattice::safetensors::File& f, const std::string& name) {
      std::vector<float> v;
      const auto* t = f.find(name);
      if (!t) return v;
      v.resize(t->numel);
      if (!f.read_float(*t, v.data())) v.clear();
      return v;
    };
    auto saved = lattice::safetensors::File::open(
        (save + "/iter_0000002/rank_00000.safetensors").toStdString());
    auto last = lattice::safetensors::File::open(
        (out + "/iter_0000002/rank_00003.safetensors").toStdString());
    QVERIFY(saved && last);
    constexpr int kCols = 32, kReal = 301, kNewRows = 128;
    for (const std::string table : {"embedding.word_embeddings.weight", "output_layer.weight"}) {
      const std::vector<float> before = floats(*saved, "model/" + table),
                               after = floats(*last, "model/" + table),
                               moment = floats(*last, "exp_avg/" + table);
      QCOMPARE(before.size(), size_t{384 * kCols});
      QCOMPARE(after.size(), size_t{kNewRows * kCols});
      QCOMPARE(moment.size(), size_t{kNewRows * kCols});
      for (int c = 0; c < kCols; c++) {
        double mean = 0;
        for (int row = 0; row < kReal; row++) mean += before[row * kCols + c];
        mean /= kReal;
        for (int row = 0; row < kNewRows; row++) {
          QVERIFY2(std::abs(after[row * kCols + c] - mean) <= 1e-6 * (1 + std::abs(mean)),
                   qPrintable(QString("%1 row %2 column %3: %4, the real rows' mean %5")
                                  .arg(table.c_str())
                                  .arg(384 + row)
                                  .arg(c)
                                  .arg(after[row * kCols + c])
                                  .arg(mean)));
          QCOMPARE(moment[row * kCols + c], 0.0f);
        }
      }
    }
  }

  void gpt2_weights_round_trip_unchanged() {
    const QString hf = dir_.filePath("gpt2.safetensors"), back = dir_.filePath("back.safetensors");
    const QStringList model = {"--num-layers",          "2",  "--hidden-size", "64",
                               "--num-attention-heads", "4",  "--seq-length",  "32",
                               "--vocab-size",          "300"};
    Run made =
        run_lattice(1, QStringList{"train", "--mock-data", "--train-iters", "2", "--eval-iters",
                                   "0", "--threads", "1", "--db", db(), "--save-hf", hf} +
                           model);
    QVERIFY2(made.exit_code == 0, qPrintable(made.err));
    const QString ck = dir_.filePath("imported");
    Run imported = run_lattice(1, QStringList{"ckpt", "import-hf", hf, ck} + model);
    QVERIFY2(imported.exit_code == 0, qPrintable(imported.err));
    Run exported = run_lattice(1, {"ckpt", "export-hf", ck, back});
    QVERIFY2(exported.exit_code == 0, qPrintable(exported.err));
    auto a = lattice::safetensors::File::open(hf.toStdString());
    auto b = lattice::safetensors::File::open(back.toStdString());
    QVERIFY(a && b);
    QCOMPARE(a->tensors().size(), b->tensors().size());
    for (const auto& t : a->tensors()) {
      const auto* u = b->find(t.name);
      QVERIFY2(u, t.name.c_str());
      const auto x = a->bytes(t), y = b->bytes(*u);
      QVERIFY2(x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin()),
               qPrintable(QString("tensor %1 changed").arg(t.name.c_str())));
    }
    // Fine-tuning starts from it.
    Run tuned = run_lattice(
        1, QStringList{"train", "--mock-data", "--train-iters", "2", "--eval-iters", "0",
                       "--threads", "1", "--db", db(), "--load", ck, "--finetune"} +
               model);
    QVERIFY2(tuned.exit_code == 0, qPrintable(tuned.err));
    Run no_optimizer =
        run_lattice(1, QStringList{"train", "--mock-data", "--train-iters", "2", "--eval-iters",
                                   "0", "--threads", "1", "--db", db(), "--load", ck} +
                           model);
    QVERIFY2(no_optimizer.exit_code != 0 && no_optimizer.err.contains("--finetune"),
             qPrintable(no_optimizer.err));
  }
};

QTEST_GUILESS_MAIN(Checkpoints)
#include "test_checkpoint.moc"
