// `lattice runs` as a user runs it, on a real database file: export (CSV and JSON), compare,
// tag, rename, delete (with --yes, refused without a terminal, asking on one), the messages
// for unknown and ambiguous RUNs, and a training run exported completely.
#include <pty.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest/QtTest>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>

#include "common/process.h"
#include "lattice/storage/run_store.h"
#include "storage/run_store_testing.h"

namespace {

using lattice::testing::Run;

// `lattice args`; its stdin is a pipe, never a terminal.
Run lattice_cli(const QStringList& args) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args);
}

QString text_of(const Run& r) {
  return "exit " + QString::number(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

// alpha (id 1): 5 steps, a NaN, validation at 2 and 4, memory of ranks 0 and 1 at step 5, a
// checkpoint, a timeline box and a log line. beta (id 2): 3 steps and another config.
void make_database(const std::string& path) {
  using namespace lattice::storage;
  auto store = std::move(RunStore::open(path).value());
  NewRun alpha;
  alpha.name = "alpha";
  alpha.tags = {"baseline"};
  alpha.config_json = R"({"lr":0.001,"layers":2,"optimizer":{"beta2":0.999},"tag":["a"]})";
  const std::int64_t a = store->create_run(alpha).value();
  NewRun beta;
  beta.name = "beta";
  beta.config_json = R"({"lr":0.0003,"layers":2,"optimizer":{"beta2":0.95},"extra":true})";
  const std::int64_t b = store->create_run(beta).value();
  QVERIFY(store->mark_running(a) && store->mark_running(b));
  for (int s = 1; s <= 5; ++s) {
    // Values exact in binary, so their text is predictable.
    std::map<std::string, double> v = {{"lm loss", 3.0 - 0.125 * s}, {"learning rate", 0.001}};
    v["grad norm"] = s == 3 ? std::numeric_limits<double>::quiet_NaN() : 1.0 + s;
    if (s % 2 == 0) v["validation lm loss"] = 2.0 + 0.25 * s;
    std::vector<MemorySample> memory;
    if (s == 5) {
      for (int rank : {1, 0}) {
        MemorySample m;
        m.rank = rank;
        m.weights = 1000 + rank;
        m.peak = 9000 + rank;
        memory.push_back(m);
      }
    }
    QVERIFY(store->log_step(a, s, v, memory).is_ok());
    if (s <= 3) QVERIFY(store->log_step(b, s, {{"lm loss", 3.0 - 0.125 * s}}).is_ok());
  }
  QVERIFY(store->record_checkpoint(a, {5, "/ckpt/alpha/5", 4096}).is_ok());
  QVERIFY(store->log_timeline(a, 5, {{0, 0, 0, "forward", 0.0, 0.25}}).is_ok());
  QVERIFY(store->log_message(a, "info", 0, "alpha done").is_ok());
  QVERIFY(store->finish(a, RunStatus::kFinished).is_ok());
  QVERIFY(store->finish(b, RunStatus::kFinished).is_ok());
}

using lattice::storage::testing::rows_of_run;

QString describe(const std::map<std::string, std::int64_t>& counts) {
  QString s;
  for (const auto& [table, n] : counts) {
    s += QString::fromStdString(table) + "=" + QString::number(n) + " ";
  }
  return s;
}

// Runs `lattice args` on a pseudo-terminal, answers the first "[y/N]" prompt with `answer`,
// and returns everything the terminal showed; exit_code as for lattice_cli().
Run lattice_on_terminal(const QStringList& args, const char* answer) {
  std::vector<std::string> owned = {LATTICE_CLI_PATH};
  for (const QString& a : args) owned.push_back(a.toStdString());
  std::vector<char*> argv;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  int terminal = -1;
  const pid_t child = forkpty(&terminal, nullptr, nullptr, nullptr);
  if (child == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  Run r;
  if (child < 0) return r;
  QByteArray shown;
  char buf[512];
  bool answered = false;
  for (;;) {
    const ssize_t n = read(terminal, buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child has exited
    shown.append(buf, static_cast<int>(n));
    if (!answered && shown.contains("[y/N]")) {
      answered = write(terminal, answer, std::strlen(answer)) > 0;
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  close(terminal);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = QString::fromUtf8(shown);
  return r;
}

}  // namespace

class RunsCli : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  QString db_;  // a fresh copy of the fixture for each test
  std::string db() const { return db_.toStdString(); }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    make_database(dir_.filePath("fixture.sqlite").toStdString());
  }

  void init() {
    static int n = 0;
    db_ = dir_.filePath(QString("runs-%1.sqlite").arg(++n));
    QVERIFY(QFile::copy(dir_.filePath("fixture.sqlite"), db_));
  }

  void help_describes_every_subcommand() {
    Run help = lattice_cli({"runs", "--help"});
    QCOMPARE(help.exit_code, 0);
    for (const char* command : {"list", "show", "export", "compare", "tag", "rename", "delete"}) {
      QVERIFY2(help.out.contains(QString("  ") + command + " "), qPrintable(help.out));
    }
    Run del = lattice_cli({"runs", "delete", "--help"});
    QCOMPARE(del.exit_code, 0);
    QVERIFY2(del.out.contains("usage: lattice runs delete RUN... [--yes]") &&
                 del.out.contains("--yes") && del.out.contains("--db"),
             qPrintable(del.out));
    Run exp = lattice_cli({"runs", "export", "-h"});
    QVERIFY2(exp.exit_code == 0 && exp.out.contains("--format"), qPrintable(text_of(exp)));
    Run wrong = lattice_cli({"runs", "exprot"});
    QCOMPARE(wrong.exit_code, 2);
    QVERIFY2(wrong.err.contains("unknown command 'exprot'"), qPrintable(wrong.err));
  }

  void export_csv_has_a_row_per_step_and_a_column_per_key() {
    const QString file = dir_.filePath("alpha.csv");
    Run r =
        lattice_cli({"runs", "export", "alpha", "--format", "csv", "--output", file, "--db", db_});
    QVERIFY2(r.exit_code == 0, qPrintable(text_of(r)));
    QVERIFY2(r.out.contains("wrote run 1 ('alpha') to " + file), qPrintable(r.out));
    QFile f(file);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray csv = f.readAll();
    const QStringList lines = QString::fromUtf8(csv).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 6);  // header + steps 1..5
    QCOMPARE(lines[0],
             QString("step,grad norm,learning rate,lm loss,validation lm loss,"
                     "memory rank 0 weights,memory rank 0 grads,memory rank 0 optimizer_state,"
                     "memory rank 0 activations,memory rank 0 workspace,memory rank 0 peak,"
                     "memory rank 1 weights,memory rank 1 grads,memory rank 1 optimizer_state,"
                     "memory rank 1 activations,memory rank 1 workspace,memory rank 1 peak"));
    const QString no_memory = QString(12, ',');
    QCOMPARE(lines[1], "1,2,0.001,2.875," + no_memory);  // validation not logged at step 1
    QCOMPARE(lines[2], "2,3,0.001,2.75,2.5" + no_memory);
    QCOMPARE(lines[3], "3,nan,0.001,2.625," + no_memory);  // a logged NaN
    QCOMPARE(lines[5], QString("5,6,0.001,2.375,,1000,0,0,0,0,9000,1001,0,0,0,0,9001"));
    Run to_stdout = lattice_cli({"runs", "export", "1", "--format", "csv", "--db", db_});
    QCOMPARE(to_stdout.exit_code, 0);
    QCOMPARE(to_stdout.out.toUtf8(), csv);
  }

  void export_json_holds_the_record_config_series_and_memory() {
    Run r = lattice_cli({"runs", "export", "alpha", "--format", "json", "--db", db_});
    QVERIFY2(r.exit_code == 0, qPrintable(text_of(r)));
    QJsonParseError error;
    const QJsonObject doc = QJsonDocument::fromJson(r.out.toUtf8(), &error).object();
    QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString() + r.out));
    const QJsonObject run = doc["run"].toObject();
    QCOMPARE(run["name"].toString(), QString("alpha"));
    QCOMPARE(run["status"].toString(), QString("finished"));
    QCOMPARE(run["tags"].toArray().at(0).toString(), QString("baseline"));
    QCOMPARE(run["config"].toObject()["optimizer"].toObject()["beta2"].toDouble(), 0.999);
    const QJsonObject metrics = doc["metrics"].toObject();
    QCOMPARE(metrics.keys(),
             (QStringList{"grad norm", "learning rate", "lm loss", "validation lm loss"}));
    const QJsonObject loss = metrics["lm loss"].toObject();
    QCOMPARE(loss["steps"].toArray(), (QJsonArray{1, 2, 3, 4, 5}));
    QCOMPARE(loss["values"].toArray().at(4).toDouble(), 2.375);
    QVERIFY2(metrics["grad norm"].toObject()["values"].toArray().at(2).isNull(),
             "a NaN is null in JSON");
    QCOMPARE(metrics["validation lm loss"].toObject()["steps"].toArray(), (QJsonArray{2, 4}));
    const QJsonArray memory = doc["memory"].toArray();
    QCOMPARE(memory.size(), 2);
    QCOMPARE(memory[0].toObject()["rank"].toInt(), 0);
    QCOMPARE(memory[1].toObject()["peak"].toInt(), 9001);
    QCOMPARE(memory[1].toObject()["step"].toInt(), 5);
    QCOMPARE(doc["checkpoints"].toArray().at(0).toObject()["path"].toString(),
             QString("/ckpt/alpha/5"));
  }

  void export_needs_csv_or_json() {
    Run none = lattice_cli({"runs", "export", "alpha", "--db", db_});
    QCOMPARE(none.exit_code, 2);
    QVERIFY2(none.err.contains("--format is required: csv or json"), qPrintable(none.err));
    Run xml = lattice_cli({"runs", "export", "alpha", "--format", "xml", "--db", db_});
    QCOMPARE(xml.exit_code, 2);
    QVERIFY2(xml.err.contains("--format 'xml' is not csv or json"), qPrintable(xml.err));
    Run nowhere = lattice_cli({"runs", "export", "alpha", "--format", "csv", "--output",
                               dir_.filePath("missing-dir/out.csv"), "--db", db_});
    QCOMPARE(nowhere.exit_code, 1);
    QVERIFY2(nowhere.err.contains("missing-dir/out.csv: cannot write"), qPrintable(nowhere.err));
  }

  void compare_shows_the_settings_that_differ_and_final_metrics() {
    Run r = lattice_cli({"runs", "compare", "alpha", "2", "--db", db_});
    QVERIFY2(r.exit_code == 0, qPrintable(text_of(r)));
    const QStringList lines = r.out.split('\n');
    auto row = [&](const QString& first) {
      for (const QString& line : lines) {
        const QStringList cells = line.split(' ', Qt::SkipEmptyParts);
        if (cells.join(' ').startsWith(first + ' ')) return cells;
      }
      return QStringList();
    };
    QVERIFY2(r.out.contains("settings that differ (4 of 5):"), qPrintable(r.out));
    QCOMPARE(row("setting"), (QStringList{"setting", "alpha", "beta"}));
    QCOMPARE(row("lr"), (QStringList{"lr", "0.001", "0.0003"}));
    QCOMPARE(row("optimizer.beta2"), (QStringList{"optimizer.beta2", "0.999", "0.95"}));
    QCOMPARE(row("extra"), (QStringList{"extra", "(unset)", "true"}));
    QCOMPARE(row("tag"), (QStringList{"tag", "[\"a\"]", "(unset)"}));
    QVERIFY2(row("layers").isEmpty(), "a setting both runs share is not listed");
    QCOMPARE(row("step"), (QStringList{"step", "5", "3"}));
    QCOMPARE(row("lm loss"), (QStringList{"lm", "loss", "2.375", "2.625"}));
    QCOMPARE(row("validation lm loss"), (QStringList{"validation", "lm", "loss", "3", "-"}));
    Run one = lattice_cli({"runs", "compare", "alpha", "--db", db_});
    QCOMPARE(one.exit_code, 2);
    QVERIFY2(one.err.contains("compare expects two or more RUNs"), qPrintable(one.err));
  }

  void tag_adds_and_removes_tags() {
    Run add = lattice_cli({"runs", "tag", "alpha", "lr-sweep", "cpu", "--db", db_});
    QVERIFY2(add.exit_code == 0, qPrintable(text_of(add)));
    QCOMPARE(add.out.trimmed(), QString("run 1 ('alpha') tags: baseline, cpu, lr-sweep"));
    Run listed = lattice_cli({"runs", "list", "--tag", "lr-sweep", "--db", db_});
    QVERIFY2(listed.out.contains("alpha") && !listed.out.contains("beta"), qPrintable(listed.out));
    Run removed = lattice_cli({"runs", "tag", "alpha", "baseline", "cpu", "--remove", "--db", db_});
    QVERIFY2(removed.exit_code == 0, qPrintable(text_of(removed)));
    QCOMPARE(removed.out.trimmed(), QString("run 1 ('alpha') tags: lr-sweep"));
    Run bare = lattice_cli({"runs", "tag", "alpha", "--db", db_});
    QCOMPARE(bare.exit_code, 2);
    QVERIFY2(bare.err.contains("tag expects a RUN and at least one TAG"), qPrintable(bare.err));
  }

  void rename_refuses_a_name_another_run_has() {
    Run taken = lattice_cli({"runs", "rename", "alpha", "beta", "--db", db_});
    QCOMPARE(taken.exit_code, 1);
    QVERIFY2(taken.err.contains("run 2 is already named 'beta'; run names are unique, choose "
                                "another name"),
             qPrintable(taken.err));
    QCOMPARE(lattice_cli({"runs", "show", "alpha", "--db", db_}).exit_code, 0);
    Run renamed = lattice_cli({"runs", "rename", "alpha", "alpha-lr1e-3", "--db", db_});
    QVERIFY2(renamed.exit_code == 0, qPrintable(text_of(renamed)));
    QCOMPARE(renamed.out.trimmed(), QString("renamed run 1 from 'alpha' to 'alpha-lr1e-3'"));
    QCOMPARE(lattice_cli({"runs", "show", "alpha", "--db", db_}).exit_code, 1);
    QVERIFY(lattice_cli({"runs", "show", "alpha-lr1e-3", "--db", db_}).out.contains("run 1:"));
  }

  void delete_with_yes_removes_every_row_of_the_run() {
    const auto before = rows_of_run(db(), 1), other = rows_of_run(db(), 2);
    for (const char* table : {"runs", "run_tags", "metrics", "metric_blocks", "latest_metrics",
                              "memory_samples", "timeline_events", "log_events", "checkpoints"}) {
      QVERIFY2(before.count(table), table);
    }
    for (const char* table : {"runs", "metrics", "latest_metrics", "memory_samples",
                              "timeline_events", "log_events", "checkpoints", "run_tags"}) {
      QVERIFY2(before.at(table) > 0, qPrintable(describe(before)));
    }
    Run r = lattice_cli({"runs", "delete", "alpha", "--yes", "--db", db_});
    QVERIFY2(r.exit_code == 0, qPrintable(text_of(r)));
    QCOMPARE(r.out.trimmed(), QString("deleted run 1 ('alpha') (5 steps)"));
    const auto after = rows_of_run(db(), 1);
    for (const auto& [table, rows] : after) {
      QVERIFY2(rows == 0, qPrintable(QString::fromStdString(table) +
                                     " still holds rows of the deleted run: " + describe(after)));
    }
    QVERIFY2(rows_of_run(db(), 2) == other, "the other run lost rows");
    QCOMPARE(lattice_cli({"runs", "show", "alpha", "--db", db_}).exit_code, 1);
  }

  void delete_without_a_terminal_or_yes_refuses_and_deletes_nothing() {
    const auto alpha = rows_of_run(db(), 1), beta = rows_of_run(db(), 2);
    Run r = lattice_cli({"runs", "delete", "alpha", "beta", "--db", db_});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.err.contains("not deleting run 1 ('alpha') with 5 steps, run 2 ('beta') with 3 "
                            "steps: standard input is not a terminal to ask on; pass --yes"),
             qPrintable(r.err));
    QVERIFY2(rows_of_run(db(), 1) == alpha && rows_of_run(db(), 2) == beta,
             "a refused delete must leave every row");
  }

  void delete_asks_on_a_terminal() {
    const auto alpha = rows_of_run(db(), 1);
    Run no = lattice_on_terminal({"runs", "delete", "alpha", "--db", db_}, "n\n");
    QVERIFY2(no.exit_code == 0, qPrintable(text_of(no)));
    QVERIFY2(no.out.contains("delete run 1 ('alpha') (5 steps)? [y/N]"), qPrintable(no.out));
    QVERIFY2(no.out.contains("kept run 1 ('alpha') (5 steps)"), qPrintable(no.out));
    QVERIFY(rows_of_run(db(), 1) == alpha);
    Run yes = lattice_on_terminal({"runs", "delete", "alpha", "--db", db_}, "y\n");
    QVERIFY2(yes.exit_code == 0, qPrintable(text_of(yes)));
    QVERIFY2(yes.out.contains("deleted run 1 ('alpha') (5 steps)"), qPrintable(yes.out));
    QCOMPARE(rows_of_run(db(), 1).at("metrics"), 0);
  }

  void an_unknown_run_is_named_with_how_to_list_runs() {
    const QStringList db = {"--db", db_};
    for (const QStringList& command :
         {QStringList{"show", "nope"}, QStringList{"export", "nope", "--format", "csv"},
          QStringList{"compare", "alpha", "nope"}, QStringList{"tag", "nope", "t"},
          QStringList{"rename", "nope", "other"}, QStringList{"delete", "beta", "nope", "--yes"}}) {
      Run r = lattice_cli(QStringList{"runs"} + command + db);
      QVERIFY2(r.exit_code == 1, qPrintable(command.join(' ') + ": " + text_of(r)));
      QVERIFY2(r.err.contains("no run has the id or name 'nope'") &&
                   r.err.contains("`lattice runs list --db " + db_ + "` lists the runs"),
               qPrintable(command.join(' ') + ": " + r.err));
    }
    QCOMPARE(rows_of_run(db_.toStdString(), 2).at("runs"), 1);  // delete stopped before beta
  }

  void a_missing_database_is_named_and_not_created() {
    const QString missing = dir_.filePath("typo/runs.sqlite");
    for (const QStringList& command :
         {QStringList{"list"}, QStringList{"show", "alpha"}, QStringList{"tag", "alpha", "t"},
          QStringList{"compare", "alpha", "beta"}}) {
      Run r = lattice_cli(QStringList{"runs"} + command + QStringList{"--db", missing});
      QVERIFY2(r.exit_code == 1, qPrintable(command.join(' ') + ": " + text_of(r)));
      QVERIFY2(r.err.contains("--db " + missing + ": no run database there yet"),
               qPrintable(command.join(' ') + ": " + r.err));
      QVERIFY2(!QFileInfo::exists(missing) && !QFileInfo::exists(dir_.filePath("typo")),
               qPrintable(command.join(' ') + " created " + missing));
    }
    Run imported = lattice_cli({"runs", "import", db_, "--db", missing});  // import creates it
    QVERIFY2(imported.exit_code == 0, qPrintable(text_of(imported)));
    QVERIFY(QFileInfo::exists(missing));
  }

  void digits_that_are_one_runs_id_and_anothers_name_are_refused() {
    QCOMPARE(lattice_cli({"runs", "rename", "beta", "1", "--db", db_}).exit_code, 0);
    Run r = lattice_cli({"runs", "show", "1", "--db", db_});
    QCOMPARE(r.exit_code, 1);
    QVERIFY2(r.err.contains("'1' is both the id of run 'alpha' and the name of run 2; say "
                            "'alpha' or 2 instead"),
             qPrintable(r.err));
  }

  void a_training_run_exports_every_step_validation_point_and_memory() {
    const QStringList tiny = {"--num-layers",          "2",   "--hidden-size", "64",
                              "--num-attention-heads", "4",   "--seq-length",  "64",
                              "--vocab-size",          "512", "--threads",     "2"};
    Run train = lattice_cli(QStringList{"train", "--mock-data", "--train-iters", "4",
                                        "--log-interval", "1", "--eval-interval", "2",
                                        "--eval-iters", "1", "--db", db_, "--run-name", "trained"} +
                            tiny);
    QVERIFY2(train.exit_code == 0, qPrintable(text_of(train)));
    Run csv = lattice_cli({"runs", "export", "trained", "--format", "csv", "--db", db_});
    QVERIFY2(csv.exit_code == 0, qPrintable(text_of(csv)));
    const QStringList lines = csv.out.split('\n', Qt::SkipEmptyParts);
    const QStringList header = lines[0].split(',');
    const int loss = header.indexOf("lm loss"), validation = header.indexOf("validation lm loss");
    QVERIFY2(loss > 0 && validation > 0 && header.contains("memory rank 0 peak"),
             qPrintable(lines[0]));
    QMap<int, QStringList> rows;
    for (const QString& line : lines.mid(1)) rows[line.split(',')[0].toInt()] = line.split(',');
    for (int step = 1; step <= 4; ++step) {
      QVERIFY2(rows.contains(step) && !rows[step][loss].isEmpty(), qPrintable(csv.out));
    }
    QVERIFY2(!rows[2][validation].isEmpty() && !rows[4][validation].isEmpty() &&
                 rows[1][validation].isEmpty(),
             qPrintable(csv.out));
    Run json = lattice_cli({"runs", "export", "trained", "--format", "json", "--db", db_});
    const QJsonObject run = QJsonDocument::fromJson(json.out.toUtf8()).object()["run"].toObject();
    QCOMPARE(run["config"].toObject()["train-iters"].toInt(), 4);
  }

  // Issue 26, item 1: `show` sets each category's planned bytes (what `lattice plan` says for
  // the run's flags) beside the measured peak and names a gap over 10 % and 4 MiB. The CPU
  // engine holds what the planner counts to the byte (it counts the model's buffers), so the
  // real run has no gap; a record of the same configuration whose activations came out 30 %
  // over (as a device allocator's slack or another engine's buffers would) has it named.
  void show_sets_the_planned_memory_beside_the_measured_peak_and_names_the_gap() {
    const QStringList model = {"--num-layers",
                               "2",
                               "--hidden-size",
                               "128",
                               "--num-attention-heads",
                               "4",
                               "--seq-length",
                               "256",
                               "--max-position-embeddings",
                               "256",
                               "--micro-batch-size",
                               "4"};
    Run train =
        lattice_cli(QStringList{"train", "--mock-data", "--train-iters", "3", "--log-interval", "1",
                                "--threads", "2", "--db", db_, "--run-name", "sized"} +
                    model);
    QVERIFY2(train.exit_code == 0, qPrintable(text_of(train)));
    Run plan = lattice_cli(
        QStringList{"plan", "--json", "--world-size", "1", "--peak-gflops", "1"} + model);
    QVERIFY2(plan.exit_code == 0, qPrintable(text_of(plan)));
    const QJsonObject stage = QJsonDocument::fromJson(plan.out.toUtf8())
                                  .object()["memory"]
                                  .toObject()["stages"]
                                  .toArray()[0]
                                  .toObject();
    const double planned = stage["activation_bytes"].toDouble();
    auto store = std::move(lattice::storage::RunStore::open(db_.toStdString()).value());
    const auto run = store->find_run("sized").value();
    const auto peaks = store->memory_peaks(run.id).value();
    QCOMPARE(peaks.size(), size_t{1});
    QCOMPARE(static_cast<double>(peaks[0].sample.activations), planned);
    Run exact = lattice_cli({"runs", "show", "sized", "--db", db_});
    QVERIFY2(exact.exit_code == 0, qPrintable(text_of(exact)));
    QVERIFY2(exact.out.contains("no category off the estimate by both 10 % and 4 MiB"),
             qPrintable(exact.out));

    const double measured = std::round(1.3 * planned);
    {
      lattice::storage::NewRun over;
      over.name = "sized-over";
      over.config_json = run.config_json;
      over.layout = run.layout;
      over.world_size = run.world_size;
      const std::int64_t id = store->create_run(over).value();
      QVERIFY(store->mark_running(id));
      lattice::storage::MemorySample m = peaks[0].sample;
      m.activations = static_cast<std::int64_t>(measured);
      QVERIFY(store->log_step(id, 1, {{"lm loss", 3.0}}, {m}));
      QVERIFY(store->finish(id, lattice::storage::RunStatus::kFinished));
    }
    Run show = lattice_cli({"runs", "show", "sized-over", "--db", db_});
    QVERIFY2(show.exit_code == 0, qPrintable(text_of(show)));
    QVERIFY2(QRegularExpression("rank +pp +category +planned +measured peak +gap")
                 .match(show.out)
                 .hasMatch(),
             qPrintable(show.out));
    const QString sentence =
        QString(
            "activations %1 % %2 the estimate on pp 0 (rank 0: %3 MiB measured, %4 MiB "
            "planned)")
            .arg(std::round(std::abs(measured - planned) / planned * 100))
            .arg(measured > planned ? "over" : "under")
            .arg(measured / (1024 * 1024), 0, 'f', 1)
            .arg(planned / (1024 * 1024), 0, 'f', 1);
    QVERIFY2(show.out.contains(sentence), qPrintable(sentence + "\nnot in:\n" + show.out));
    // Weights, grads and optimizer state are counted the same way on both sides: no gap.
    for (const char* category : {"weights", "grads", "optimizer state"}) {
      const QRegularExpression named(
          QString("\\n    %1 \\d+ % (over|under) the estimate").arg(category));
      QVERIFY2(!named.match(show.out).hasMatch(), qPrintable(show.out));
    }
  }

  // A record without the flags that shape memory gets no estimate, and says which it lacks.
  void show_says_what_the_record_lacks_instead_of_guessing() {
    Run show = lattice_cli({"runs", "show", "alpha", "--db", db_});
    QVERIFY2(show.exit_code == 0, qPrintable(text_of(show)));
    QVERIFY2(show.out.contains("memory against the estimate: no estimate, the run's configuration "
                               "does not record --num-layers, --hidden-size"),
             qPrintable(show.out));
  }

  // Issue 26 item 6 on real runs. "first" trains to 10 saving at 5 and 10; "second" rolls back
  // to 5 (--ckpt-step) and trains to 12 saving at 8 and 12 into the same directory; "third" is
  // requeued from the latest (12, second's) to 14. A copy of the directory, and --finetune,
  // start lineages of their own.
  void a_rollback_and_a_requeue_by_load_form_one_lineage_with_the_discarded_tail() {
    const QStringList tiny = {"--num-layers",          "2",   "--hidden-size", "64",
                              "--num-attention-heads", "4",   "--seq-length",  "64",
                              "--vocab-size",          "512", "--threads",     "2"};
    const QString ckpt = dir_.filePath("lineage-ckpt");
    auto train = [&](const QString& name, const QStringList& flags) {
      Run r = lattice_cli(QStringList{"train", "--mock-data", "--log-interval", "1", "--db", db_,
                                      "--run-name", name} +
                          flags + tiny);
      if (r.exit_code != 0) qWarning("%s", qPrintable(text_of(r)));
      return r;
    };
    QCOMPARE(
        train("first", {"--train-iters", "10", "--save", ckpt, "--save-interval", "5"}).exit_code,
        0);
    Run second = train("second", {"--train-iters", "12", "--load", ckpt, "--ckpt-step", "5",
                                  "--save", ckpt, "--save-interval", "4"});
    QCOMPARE(second.exit_code, 0);
    QVERIFY2(second.out.contains("resumed from run 'first' at step 5"), qPrintable(second.out));
    Run third = train("third", {"--train-iters", "14", "--load", ckpt});
    QCOMPARE(third.exit_code, 0);
    QVERIFY2(third.out.contains("resumed from run 'second' at step 12"), qPrintable(third.out));
    // The same checkpoint through another spelling of the directory is the same parent.
    Run again =
        train("again", {"--train-iters", "11", "--load",
                        dir_.filePath("./lineage-ckpt/../lineage-ckpt"), "--ckpt-step", "10"});
    QCOMPARE(again.exit_code, 0);
    QVERIFY2(again.out.contains("resumed from run 'first' at step 10"), qPrintable(again.out));
    const QString copy = dir_.filePath("copied-ckpt");
    QVERIFY(QDir().mkpath(copy));
    QVERIFY(QFile::copy(ckpt + "/latest_checkpointed_iteration.txt",
                        copy + "/latest_checkpointed_iteration.txt"));
    std::filesystem::copy((ckpt + "/iter_0000012").toStdString(),
                          (copy + "/iter_0000012").toStdString(),
                          std::filesystem::copy_options::recursive);
    Run copied = train("copied", {"--train-iters", "13", "--load", copy});
    QCOMPARE(copied.exit_code, 0);
    QVERIFY2(copied.out.contains("a checkpoint no run of this database recorded"),
             qPrintable(copied.out));
    QCOMPARE(train("tuned", {"--train-iters", "2", "--load", ckpt, "--finetune"}).exit_code, 0);

    auto store = std::move(lattice::storage::RunStore::open(db()).value());
    auto id = [&](const char* name) { return store->find_run(name).value().id; };
    const auto lineage = store->run_lineage(id("third")).value();
    QCOMPARE(lineage.size(), std::size_t{3});
    QCOMPARE(lineage[0].name, std::string("first"));
    QVERIFY(!lineage[0].resumed_at);
    QCOMPARE(lineage[0].kept_until, std::optional<std::int64_t>(5));
    QCOMPARE(lineage[0].last_step, std::optional<std::int64_t>(10));  // 6..10 discarded
    QCOMPARE(lineage[1].name, std::string("second"));
    QCOMPARE(lineage[1].resumed_at, std::optional<std::int64_t>(5));
    QCOMPARE(lineage[1].kept_until, std::optional<std::int64_t>(12));
    QCOMPARE(lineage[1].last_step, std::optional<std::int64_t>(12));  // nothing discarded
    QCOMPARE(lineage[2].name, std::string("third"));
    QCOMPARE(lineage[2].resumed_at, std::optional<std::int64_t>(12));
    QVERIFY(!lineage[2].kept_until);
    // The discarded tail is what first logged after step 5: second logged those steps again.
    const auto tail = store->series(id("first"), "lm loss", 6, 10).value();
    QCOMPARE(tail.size(), std::size_t{5});
    QCOMPARE(store->series(id("second"), "lm loss", 0, 5).value().size(), std::size_t{0});
    QCOMPARE(store->series(id("second"), "lm loss", 6, 10).value().size(), std::size_t{5});
    QCOMPARE(store->find_run("again").value().parent_run_id,
             std::optional<std::int64_t>(id("first")));
    for (const char* alone : {"first", "copied", "tuned"})
      QVERIFY2(!store->find_run(alone).value().resume_step, alone);

    Run show = lattice_cli({"runs", "show", "third", "--db", db_});
    QVERIFY2(show.exit_code == 0, qPrintable(text_of(show)));
    const QString want = QString(
                             "  resumed:     from run %2 ('second') at step 12\n"
                             "  lineage:     3 runs, oldest first\n"
                             "    run %1 ('first'): steps up to 5, steps 6 to 10 discarded\n"
                             "    run %2 ('second'): steps 6 to 12\n"
                             "    run %3 ('third'): steps from 13\n")
                             .arg(id("first"))
                             .arg(id("second"))
                             .arg(id("third"));
    QVERIFY2(show.out.contains(want), qPrintable(show.out + "\nwanted:\n" + want));
    Run list = lattice_cli({"runs", "list", "--db", db_});
    QVERIFY2(list.exit_code == 0, qPrintable(text_of(list)));
    QVERIFY2(list.out.section('\n', 0, 0).contains(" from "), qPrintable(list.out));
    const QRegularExpression thirdRow(
        QString("\\n\\s*%1\\s+third\\s.*\\s%2@12\\s").arg(id("third")).arg(id("second")));
    QVERIFY2(thirdRow.match(list.out).hasMatch(), qPrintable(list.out));
  }
};

QTEST_GUILESS_MAIN(RunsCli)
#include "test_runs_cli.moc"
