// The `lattice` program as a user runs it: real processes, their exit codes and output.
#include <QtTest/QtTest>

#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include "common/process.h"

namespace {

using lattice::testing::Run;

// `lattice args`, with `extra_env` ("K=V" each) added to the test environment.
Run run_cli(const QStringList& args, const QStringList& extra_env = {}) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args, {}, 240000, extra_env);
}

using lattice::testing::lm_losses;

// The directory `lattice demo` says it saved the model in.
QString demo_checkpoint(const QString& out) {
  static const QRegularExpression re("> the model is saved in (\\S+)\n");
  return re.match(out).captured(1);
}

QByteArray file_text(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

const QStringList kTinyModel = {"--num-layers",          "2",   "--hidden-size", "64",
                                "--num-attention-heads", "4",   "--seq-length",  "64",
                                "--vocab-size",          "512", "--threads",     "2"};

}  // namespace

class Cli : public QObject {
  Q_OBJECT
 private slots:
  void mock_data_training_lowers_the_loss_steadily() {
    Run r = run_cli(QStringList{"train", "--mock-data", "--micro-batch-size", "4",
                                "--global-batch-size", "8", "--train-iters", "200",
                                "--log-interval", "20", "--lr", "1e-3", "--min-lr", "1e-4",
                                "--lr-warmup-iters", "10", "--lr-decay-style", "cosine"} +
                    kTinyModel);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const QList<double> losses = lm_losses(r.out);
    QCOMPARE(losses.size(), 10);  // one averaged value per 20 iterations
    for (int i = 1; i < losses.size(); i++)
      QVERIFY2(losses[i] < losses[i - 1],
               qPrintable(QString("interval %1 loss %2 did not fall below %3")
                              .arg(i + 1)
                              .arg(losses[i])
                              .arg(losses[i - 1])));
    QVERIFY2(losses.last() < 0.5 * losses.first(),
             qPrintable(QString("loss %1 -> %2").arg(losses.first()).arg(losses.last())));
  }

  void progress_line_has_megatrons_fields() {
    Run r =
        run_cli(QStringList{"train", "--mock-data", "--train-iters", "2", "--log-interval", "1"} +
                kTinyModel);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    for (const char* field :
         {"iteration        2/       2", "consumed samples:", "elapsed time per iteration (ms):",
          "throughput per GPU (TFLOP/s/GPU):", "learning rate:", "global batch size:", "lm loss:",
          "loss scale: 1.0", "grad norm:", "number of skipped iterations:",
          "number of nan iterations:", "tokens per second:", "MFU:"})
      QVERIFY2(r.out.contains(field), field);
  }

  void profile_prints_the_timed_steps_per_op_with_the_optimizer_and_what_is_untimed() {
    // Validation every 2 iterations: its forward passes must stay out of the step's profile.
    Run r = run_cli(QStringList{"train", "--mock-data", "--train-iters", "4", "--micro-batch-size",
                                "2", "--global-batch-size", "4", "--eval-interval", "2",
                                "--eval-iters", "3", "--profile"} +
                    kTinyModel);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("> time per op, per step over the 3 timed iterations ("),
             qPrintable(r.out));
    auto calls = [&](const QString& op) {  // calls per step of one row
      const QRegularExpression row("\n    " + QRegularExpression::escape(op) +
                                   " +[0-9.]+ ms +[0-9.]+% +(\\d+) calls\n");
      const QRegularExpressionMatch m = row.match(r.out);
      return m.hasMatch() ? m.captured(1).toInt() : -1;
    };
    // Per step, 2 micro-batches: 4 linear layers in each of 2 layers, one LM head.
    QCOMPARE(calls("linear forward"), 2 * 2 * 4);
    QCOMPARE(calls("lm head forward"), 2);
    QVERIFY2(
        r.out.contains("\n    optimizer (norm, clip, adamw)") && r.out.contains("\n    untimed "),
        qPrintable(r.out));
  }

  void same_seed_same_output_across_processes() {
    const QStringList args = QStringList{"train",          "--mock-data", "--train-iters", "5",
                                         "--log-interval", "1",           "--seed",        "77"} +
                             kTinyModel;
    const QList<double> a = lm_losses(run_cli(args).out), b = lm_losses(run_cli(args).out);
    QCOMPARE(a.size(), 5);
    QCOMPARE(a, b);
  }

  void unknown_flag_is_refused_before_training() {
    Run r = run_cli({"train", "--mock-data", "--num-layer", "2"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("unknown flag --num-layer (did you mean --num-layers?)"),
             qPrintable(r.err));
    QVERIFY(!r.out.contains("iteration"));
  }

  void impossible_layout_is_refused_with_every_reason() {
    Run r = run_cli({"train", "--mock-data", "--hidden-size", "30", "--num-attention-heads", "4",
                     "--micro-batch-size", "3", "--global-batch-size", "8"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("--num-attention-heads 4 does not divide --hidden-size 30"),
             qPrintable(r.err));
    QVERIFY2(r.err.contains("--global-batch-size 8 is not a multiple of --micro-batch-size 3"),
             qPrintable(r.err));
  }

  void demo_builds_its_corpus_and_trains_on_it() {
    QTemporaryDir dir;
    Run help = run_cli({"demo", "--help"});
    QCOMPARE(help.exit_code, 0);
    QVERIFY(help.out.contains("\"num-layers\""));
    Run r = run_cli({"demo", "--train-iters", "3", "--log-interval", "1", "--eval-iters", "1",
                     "--threads", "2"},
                    {"LATTICE_DATA_DIR=" + dir.path()});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("demo corpus:") && r.out.contains("fortunes"), qPrintable(r.out));
    QCOMPARE(lm_losses(r.out).size(), 3);
    QVERIFY2(r.out.contains("validation loss at the end of training for val data | lm loss value:"),
             qPrintable(r.out));
    QVERIFY(QFileInfo::exists(dir.filePath("demo/fortunes_text_document.idx")));
    QVERIFY(QFileInfo::exists(dir.filePath("demo/fortunes.model")));

    // The model is kept, in a directory of the run's own, and used at once: a few generated
    // lines, then the commands that take it further.
    const QString first = demo_checkpoint(r.out);
    QVERIFY2(!first.isEmpty(), qPrintable(r.out));
    QCOMPARE(QFileInfo(first).dir().absolutePath(), QDir(dir.filePath("demo")).absolutePath());
    QVERIFY(QFileInfo::exists(first + "/latest_checkpointed_iteration.txt"));
    QVERIFY2(r.out.contains("> samples from the model") && r.out.contains("  1. The best way to"),
             qPrintable(r.out));
    for (const QString& next : {"generate --load " + first, "serve --load " + first,
                                QString("runs show run-"), QString("lattice-studio")})
      QVERIFY2(r.out.contains(next), qPrintable(next + " missing from:\n" + r.out));
    // A second demo keeps the first one's model and becomes demo/latest.
    Run again = run_cli({"demo", "--train-iters", "2", "--eval-iters", "0", "--threads", "2"},
                        {"LATTICE_DATA_DIR=" + dir.path()});
    QVERIFY2(again.exit_code == 0, qPrintable(again.err + again.out));
    const QString second = demo_checkpoint(again.out);
    QVERIFY2(!second.isEmpty() && second != first, qPrintable(again.out));
    QCOMPARE(file_text(first + "/latest_checkpointed_iteration.txt").trimmed(), QByteArray("3"));
    QCOMPARE(file_text(second + "/latest_checkpointed_iteration.txt").trimmed(), QByteArray("2"));
    QCOMPARE(QFileInfo(dir.filePath("demo/latest")).canonicalFilePath(),
             QFileInfo(second).canonicalFilePath());
    // The printed command works on the printed directory.
    Run generated = run_cli({"generate", "--load", first, "--prompt", "The", "--top-k", "1",
                             "--tokens-to-generate", "5", "--threads", "2"},
                            {"LATTICE_DATA_DIR=" + dir.path()});
    QVERIFY2(generated.exit_code == 0, qPrintable(generated.err));
    QVERIFY(!generated.out.trimmed().isEmpty());
  }

  // Every rank of `mpirun -n 2 lattice demo` on a fresh data directory builds the corpus at
  // once: two processes doing so take turns (a lock in the directory) and both succeed.
  void two_processes_building_the_demo_corpus_at_once_both_succeed() {
    QTemporaryDir dir;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("LATTICE_DATA_DIR", dir.path());
    QProcess a, b;
    for (QProcess* p : {&a, &b}) {
      p->setProcessEnvironment(env);
      p->start(LATTICE_CLI_PATH, {"data", "demo"});
    }
    for (QProcess* p : {&a, &b}) {
      QVERIFY(p->waitForFinished(240000));
      QVERIFY2(p->exitStatus() == QProcess::NormalExit && p->exitCode() == 0,
               qPrintable(p->readAllStandardError() + p->readAllStandardOutput()));
    }
    QVERIFY(QFileInfo::exists(dir.filePath("demo/fortunes_text_document.idx")));
  }

  void data_preprocess_inspect_train_and_eval() {
    QTemporaryDir dir;
    QFile input(dir.filePath("docs.jsonl"));
    QVERIFY(input.open(QIODevice::WriteOnly));
    for (int d = 0; d < 400; d++) {  // NullTokenizer documents: arithmetic runs, learnable
      QString text;
      for (int t = 0; t < 20 + d % 30; t++) text += (t ? " " : "") + QString::number((d + t) % 90);
      input.write(QString("{\"text\": \"%1\"}\n").arg(text).toUtf8());
    }
    input.close();
    const QString prefix = dir.filePath("nums");
    Run pre = run_cli({"data", "preprocess", "--input", input.fileName(), "--output-prefix", prefix,
                       "--tokenizer-type", "NullTokenizer", "--vocab-size", "100", "--append-eod",
                       "--workers", "2"});
    QVERIFY2(pre.exit_code == 0, qPrintable(pre.err));
    QVERIFY2(pre.out.contains("processed 400 documents"), qPrintable(pre.out));
    const QString data = prefix + "_text_document";
    Run inspect = run_cli({"data", "inspect", data, "--document", "1", "--tokenizer-type",
                           "NullTokenizer", "--vocab-size", "100"});
    QVERIFY2(inspect.exit_code == 0, qPrintable(inspect.err));
    QVERIFY2(inspect.out.contains("documents: 400") && inspect.out.contains("dtype:     uint16"),
             qPrintable(inspect.out));
    QVERIFY2(inspect.out.contains("1 2 3 4 5"), qPrintable(inspect.out));

    Run train = run_cli(QStringList{"train",
                                    "--data-path",
                                    data,
                                    "--vocab-size",
                                    "100",
                                    "--split",
                                    "90,10,0",
                                    "--train-iters",
                                    "20",
                                    "--eval-interval",
                                    "10",
                                    "--eval-iters",
                                    "2",
                                    "--log-interval",
                                    "5",
                                    "--lr",
                                    "3e-3",
                                    "--seq-length",
                                    "32",
                                    "--data-cache-path",
                                    dir.filePath("cache")} +
                        kTinyModel.mid(0, 6) + QStringList{"--threads", "2"});
    QVERIFY2(train.exit_code == 0, qPrintable(train.err));
    QVERIFY2(train.out.contains("validation loss at iteration 10 | lm loss value:"),
             qPrintable(train.out));
    QVERIFY2(train.out.contains("validation loss at iteration 20 | lm loss value:"),
             qPrintable(train.out));
    QVERIFY(QDir(dir.filePath("cache")).entryList(QDir::Files).size() > 0);

    Run eval = run_cli({"eval", "--data-path", data, "--vocab-size", "100", "--seq-length", "32",
                        "--eval-iters", "10", "--num-layers", "1", "--hidden-size", "32",
                        "--num-attention-heads", "2"});
    QVERIFY2(eval.exit_code == 0, qPrintable(eval.err));
    QVERIFY2(
        eval.out.contains("evaluated 10 samples (320 tokens)") && eval.out.contains("lm loss PPL:"),
        qPrintable(eval.out));
  }

  void corrupt_dataset_is_refused_with_its_name() {
    QTemporaryDir dir;
    const QString prefix = dir.filePath("broken");
    QFile idx(prefix + ".idx"), bin(prefix + ".bin");
    QVERIFY(idx.open(QIODevice::WriteOnly) && bin.open(QIODevice::WriteOnly));
    idx.write("NOTANIDX\0\0\0\0\0\0\0\0\0\0\0");
    idx.close();
    bin.close();
    Run r = run_cli({"train", "--data-path", prefix, "--vocab-size", "100", "--train-iters", "1"});
    QVERIFY(r.exit_code != 0);
    QVERIFY2(r.err.contains("broken.idx"), qPrintable(r.err));
    Run bad =
        run_cli({"data", "preprocess", "--input", dir.filePath("missing.jsonl"), "--output-prefix",
                 prefix, "--tokenizer-type", "NullTokenizer", "--vocab-size", "10"});
    QVERIFY(bad.exit_code != 0);
    QVERIFY2(bad.err.contains("missing.jsonl"), qPrintable(bad.err));
  }

  void runs_are_recorded_in_the_run_store() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    Run r = run_cli(QStringList{"train", "--mock-data", "--train-iters", "4", "--db", db,
                                "--run-name", "tiny-1", "--tag", "smoke", "--eval-iters", "1",
                                "--eval-interval", "2", "--tag", "cpu", "tiny"} +
                    kTinyModel);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    Run list = run_cli({"runs", "list", "--db", db, "--tag", "smoke"});
    QVERIFY2(list.exit_code == 0, qPrintable(list.err));
    QVERIFY2(list.out.contains("tiny-1") && list.out.contains("finished"), qPrintable(list.out));
    Run show = run_cli({"runs", "show", "tiny-1", "--db", db});
    QVERIFY2(show.exit_code == 0, qPrintable(show.err));
    // A repeated list flag adds to the list.
    for (const char* field :
         {"tags:        cpu, smoke, tiny", "status:      finished", "latest metrics (step 4)",
          "lm loss", "validation lm loss", "\"run-name\":\"tiny-1\""})
      QVERIFY2(show.out.contains(field), qPrintable(field + QString(" missing in ") + show.out));
    // The same name again is refused before any training.
    Run again = run_cli(QStringList{"train", "--mock-data", "--train-iters", "2", "--db", db,
                                    "--run-name", "tiny-1"} +
                        kTinyModel);
    QCOMPARE(again.exit_code, 2);
    QVERIFY2(again.err.contains("--run-name tiny-1"), qPrintable(again.err));
    QVERIFY(!again.out.contains("iteration"));
  }

  void a_foreign_database_is_refused_untouched() {
    QTemporaryDir dir;
    const QString db = dir.filePath("notes.txt");
    QFile f(db);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("my notes, not a database\n");
    f.close();
    Run r =
        run_cli(QStringList{"train", "--mock-data", "--train-iters", "2", "--db", db} + kTinyModel);
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("--db " + db), qPrintable(r.err));
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("my notes, not a database\n"));
  }

  void sigterm_marks_the_run_killed() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    QProcess p;
    p.start(LATTICE_CLI_PATH,
            QStringList{"train", "--mock-data", "--train-iters", "1000000", "--log-interval", "1",
                        "--db", db, "--run-name", "endless"} +
                kTinyModel);
    QVERIFY(p.waitForStarted());
    QByteArray out;
    while (!out.contains("iteration") && p.waitForReadyRead(60000))
      out += p.readAllStandardOutput();
    QVERIFY2(out.contains("iteration"), out.constData());
    p.terminate();  // SIGTERM
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 130);
    Run show = run_cli({"runs", "show", "endless", "--db", db});
    QVERIFY2(show.out.contains("status:      killed"), qPrintable(show.out + show.err));
  }

  void hf_weights_round_trip_through_training() {
    QTemporaryDir dir;
    const QString file = dir.filePath("gpt2.safetensors");
    Run save = run_cli(
        QStringList{"train", "--mock-data", "--train-iters", "2", "--save-hf", file} + kTinyModel);
    QVERIFY2(save.exit_code == 0, qPrintable(save.err));
    QVERIFY(QFileInfo(file).size() > 0);
    // lr 0 leaves the weights as loaded, so saving them again must give the same bytes.
    const QString again = dir.filePath("again.safetensors");
    const QStringList frozen = {"train", "--mock-data", "--train-iters", "1", "--log-interval", "1",
                                "--lr",  "0",           "--min-lr",      "0"};
    Run loaded = run_cli(frozen + kTinyModel + QStringList{"--load-hf", file, "--save-hf", again});
    QVERIFY2(loaded.exit_code == 0, qPrintable(loaded.err));
    QVERIFY(loaded.out.contains("loaded GPT-2 weights from"));
    QFile a(file), b(again);
    QVERIFY(a.open(QIODevice::ReadOnly) && b.open(QIODevice::ReadOnly));
    QVERIFY2(a.readAll() == b.readAll(), "load-hf then save-hf changed the weights file");
    // ... and the trained weights score better on mock data than a fresh initialisation.
    Run fresh = run_cli(frozen + kTinyModel);
    QVERIFY2(lm_losses(loaded.out).first() < lm_losses(fresh.out).first(),
             qPrintable(loaded.out + fresh.out));
  }

  void hf_shape_mismatch_names_tensor_and_flags() {
    QTemporaryDir dir;
    const QString file = dir.filePath("gpt2.safetensors");
    QCOMPARE(run_cli(QStringList{"train", "--mock-data", "--train-iters", "1", "--save-hf", file} +
                     kTinyModel)
                 .exit_code,
             0);
    QStringList wider = kTinyModel;
    wider[wider.indexOf("--hidden-size") + 1] = "128";
    Run r = run_cli(QStringList{"train", "--mock-data", "--train-iters", "1", "--load-hf", file} +
                    wider);
    QVERIFY(r.exit_code != 0);
    QVERIFY2(r.err.contains("--load-hf") && r.err.contains("wte.weight") &&
                 r.err.contains("--hidden-size"),
             qPrintable(r.err));
    Run missing =
        run_cli(QStringList{"train", "--mock-data", "--load-hf", dir.filePath("nope.safetensors")} +
                kTinyModel);
    QVERIFY(missing.exit_code != 0);
    QVERIFY2(missing.err.contains("nope.safetensors"), qPrintable(missing.err));
  }
};

QTEST_GUILESS_MAIN(Cli)
#include "test_cli.moc"
