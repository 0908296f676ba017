// The linear layers' fp32 GEMM on each way (lattice/cpu_gemm.h; Note [fp32 GEMM choice],
// kernels/cpu/README.md):
// - kernels::gemm_f32 forced onto each way (OpenBLAS, oneDNN, each whole and split over the
//   threads), every transpose, alpha and beta, padded leading dimensions, against a double
//   product within fp32's summation bound, and nothing outside C's window written;
// - the matmul ops (forward, dinput, dweight, dbias) in float on each way against the double
//   ops on the same values;
// - the automatic mode: a shape is timed once on every way (one table entry, also when two
//   threads meet it at once), the fastest chosen where it beats OpenBLAS by 5 %, the timing
//   leaves C alone (beta 1 adds the product once) or is overwritten (beta 0), the result is bit
//   for bit the chosen way's, small shapes and accumulating ones with a large C are not timed;
// - the choices file (Note [GEMM choices file]): a timed shape is written once and read back
//   instead of timed, a row naming any way is obeyed bit for bit, another machine's
//   file, malformed lines and a row cut short are reported and never lose a result, and two
//   `lattice train` processes on one data folder time each shape once between them;
// - LATTICE_CPU_GEMM's values and errors; `lattice train` refuses an unusable one before
//   training, `lattice version` names the library.
// The oneDNN cases are skipped, by name, in a build without oneDNN. test_torch_parity runs again
// with LATTICE_CPU_GEMM set to each other way (test_torch_parity_onednn, test_torch_parity_*_split,
// tests/train/CMakeLists.txt).
#include <QtTest/QtTest>

#include <QFile>
#include <QTemporaryDir>

#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "common/process.h"
#include "lattice/cpu_gemm.h"
#include "lattice/cpu_isa.h"
#include "lattice/kernels.h"

namespace k = lattice::kernels;
using k::CpuGemm;

namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// One GEMM problem with padded leading dimensions (3 extra columns each) and a C whose padding
// holds a sentinel.
struct Problem {
  bool ta, tb;
  int M, N, K, lda, ldb, ldc;
  float alpha, beta;
  std::vector<float> A, B, C0;
  Problem(bool ta_, bool tb_, int M_, int N_, int K_, float alpha_, float beta_, unsigned seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), alpha(alpha_), beta(beta_) {
    const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    lda = a_cols + 3, ldb = b_cols + 3, ldc = N + 3;
    A = random_floats(static_cast<size_t>(a_rows) * lda, seed);
    B = random_floats(static_cast<size_t>(b_rows) * ldb, seed + 1);
    C0 = random_floats(static_cast<size_t>(M) * ldc, seed + 2);
  }
  float a(int m, int kk) const { return ta ? A[size_t(kk) * lda + m] : A[size_t(m) * lda + kk]; }
  float b(int kk, int n) const { return tb ? B[size_t(n) * ldb + kk] : B[size_t(kk) * ldb + n]; }
  std::vector<float> run() const {
    std::vector<float> C = C0;
    k::gemm_f32(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
    return C;
  }
  // Every element within the bound of a K-term fp32 sum (and the alpha and beta products):
  // |error| <= (K + 2) u (sum |alpha a b| + |beta c|), u = 2^-24; the padding untouched.
  QString check(const std::vector<float>& C) const {
    const double u = std::ldexp(1.0, -24);
    for (int m = 0; m < M; m++) {
      for (int n = 0; n < N; n++) {
        double want = beta * double(C0[size_t(m) * ldc + n]), scale = std::abs(want);
        for (int kk = 0; kk < K; kk++) {
          const double p = double(alpha) * a(m, kk) * b(kk, n);
          want += p, scale += std::abs(p);
        }
        const double got = C[size_t(m) * ldc + n], tol = (K + 2) * u * scale;
        if (!(std::abs(got - want) <= tol))
          return QString("C[%1, %2] = %3, want %4 within %5")
              .arg(m)
              .arg(n)
              .arg(got)
              .arg(want)
              .arg(tol);
      }
      for (int n = N; n < ldc; n++)
        if (C[size_t(m) * ldc + n] != C0[size_t(m) * ldc + n])
          return QString("padding C[%1, %2] was written").arg(m).arg(n);
    }
    return {};
  }
};

QString read_text(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}
void write_text(const QString& path, const QString& text) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(text.toUtf8());
}
// The rows of a choices file (lines not starting with '#').
QStringList rows_of(const QString& text) {
  QStringList rows;
  for (const QString& line : text.split('\n', Qt::SkipEmptyParts))
    if (!line.startsWith('#')) rows << line;
  return rows;
}

// Makes the linear layers run `mode`; the reason it cannot here, else empty.
QString use(CpuGemm mode) {
  if (!k::set_cpu_gemm(mode)) return QString::fromStdString(k::onednn_sgemm_missing());
  return {};
}

}  // namespace

class CpuGemmTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { k::set_num_threads(2); }
  void cleanup() {
    k::set_cpu_gemm(CpuGemm::automatic);
    k::set_cpu_gemm_choices_dir("");
  }

  void forced_library_data() {
    QTest::addColumn<int>("mode");
    QTest::newRow("openblas") << int(CpuGemm::openblas);
    QTest::newRow("onednn") << int(CpuGemm::onednn);
    QTest::newRow("openblas-split") << int(CpuGemm::openblas_split);
    QTest::newRow("onednn-split") << int(CpuGemm::onednn_split);
  }
  void forced_library() {
    QFETCH(int, mode);
    if (QString why = use(CpuGemm(mode)); !why.isEmpty()) QSKIP(qPrintable(why));
    // 37 rows: two bands on the split ways (at 2 threads), of 16 and 21 rows.
    unsigned seed = 1;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f})
          for (float alpha : {1.0f, 0.5f}) {
            const Problem p(ta, tb, 37, 29, 53, alpha, beta, seed += 3);
            const QString error = p.check(p.run());
            QVERIFY2(error.isEmpty(), qPrintable(QString("ta %1 tb %2 alpha %3 beta %4: %5")
                                                     .arg(ta)
                                                     .arg(tb)
                                                     .arg(alpha)
                                                     .arg(beta)
                                                     .arg(error)));
          }
    // An empty sum: C = beta C on every library.
    const Problem empty(false, true, 5, 7, 0, 1.0f, 1.0f, 99);
    QVERIFY2(empty.check(empty.run()).isEmpty(), "K = 0");
  }

  void matmul_ops_on_each_library_data() { forced_library_data(); }
  void matmul_ops_on_each_library() {
    QFETCH(int, mode);
    if (QString why = use(CpuGemm(mode)); !why.isEmpty()) QSKIP(qPrintable(why));
    const int N = 24, C = 40, OC = 56;
    const auto inp = random_floats(size_t(N) * C, 5), w = random_floats(size_t(OC) * C, 6),
               bias = random_floats(OC, 7), dout = random_floats(size_t(N) * OC, 8),
               dw0 = random_floats(size_t(OC) * C, 9), db0 = random_floats(OC, 10);
    auto widen = [](const std::vector<float>& v) {
      return std::vector<double>(v.begin(), v.end());
    };
    const auto inp_d = widen(inp), w_d = widen(w), bias_d = widen(bias), dout_d = widen(dout);
    std::vector<float> out(size_t(N) * OC), dinp(size_t(N) * C), dw = dw0, db = db0;
    std::vector<double> out_d(out.size()), dinp_d(dinp.size()), dw_d = widen(dw0),
                                                                db_d = widen(db0);
    k::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    k::matmul_forward(out_d.data(), inp_d.data(), w_d.data(), bias_d.data(), N, C, OC);
    k::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
    k::matmul_backward(dinp_d.data(), dw_d.data(), db_d.data(), dout_d.data(), inp_d.data(),
                       w_d.data(), N, C, OC);
    // Inputs in [-1, 1]: each sum of K products is within (K + 2) u K of the double one.
    auto compare = [](const char* name, const std::vector<float>& got,
                      const std::vector<double>& want, int terms) {
      const double tol = (terms + 3) * std::ldexp(1.0, -24) * (terms + 1);
      for (size_t i = 0; i < got.size(); i++)
        if (!(std::abs(got[i] - want[i]) <= tol))
          return QString("%1[%2] = %3, want %4 within %5")
              .arg(name)
              .arg(i)
              .arg(got[i])
              .arg(want[i])
              .arg(tol);
      return QString();
    };
    for (const QString& e : {compare("out", out, out_d, C), compare("dinp", dinp, dinp_d, OC),
                             compare("dweight", dw, dw_d, N), compare("dbias", db, db_d, N)})
      QVERIFY2(e.isEmpty(), qPrintable(e));
  }

  void automatic_times_a_shape_once() {
    if (QString why = use(CpuGemm::onednn); !why.isEmpty()) QSKIP(qPrintable(why));
    QVERIFY(k::set_cpu_gemm(CpuGemm::automatic));
    k::clear_cpu_gemm_choices();
    // 160 x 192 x 576 = 17.7 M multiply-adds: above kMinTimedGemmWork, quick to check.
    const Problem p(false, true, 160, 192, 576, 1.0f, 1.0f, 40);
    QVERIFY(double(p.M) * p.N * p.K >= k::kMinTimedGemmWork);
    const std::vector<float> first = p.run();
    // Timing ran on a copy of C: beta 1 added the product once.
    const QString error = p.check(first);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    const std::vector<float> second = p.run();
    std::vector<k::GemmChoice> choices = k::cpu_gemm_choices();
    QCOMPARE(choices.size(), size_t(1));
    const k::GemmChoice& c = choices[0];
    QVERIFY(!c.trans_a && c.trans_b && c.M == p.M && c.N == p.N && c.K == p.K && c.accumulate);
    QVERIFY2(c.openblas_gflops > 0 && c.onednn_gflops > 0 && c.openblas_split_gflops > 0 &&
                 c.onednn_split_gflops > 0,
             "every way timed");
    // The fastest way, where it beats one OpenBLAS call by 5 %.
    const std::pair<CpuGemm, double> ways[] = {{CpuGemm::onednn, c.onednn_gflops},
                                               {CpuGemm::openblas_split, c.openblas_split_gflops},
                                               {CpuGemm::onednn_split, c.onednn_split_gflops}};
    CpuGemm want = CpuGemm::openblas;
    double best = c.openblas_gflops;
    for (auto [way, rate] : ways)
      if (rate > 1.05 * c.openblas_gflops && rate > best) want = way, best = rate;
    QCOMPARE(int(c.library), int(want));
    // Both calls ran the chosen library: bit for bit what forcing it gives.
    QVERIFY(k::set_cpu_gemm(c.library));
    const std::vector<float> forced = p.run();
    QVERIFY2(first == forced && second == forced,
             qPrintable(QString("differs from %1 forced").arg(k::cpu_gemm_name(c.library))));
    // A small shape is not timed; a transposed one of the same size is a new entry.
    QVERIFY(k::set_cpu_gemm(CpuGemm::automatic));
    const Problem small(false, false, 64, 64, 64, 1.0f, 0.0f, 50);
    QVERIFY(small.check(small.run()).isEmpty());
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(1));
    const Problem transposed(true, false, 160, 192, 576, 1.0f, 0.0f, 60);
    QVERIFY(transposed.check(transposed.run()).isEmpty());
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(2));
  }

  void large_accumulating_shapes_are_not_timed() {
    if (QString why = use(CpuGemm::onednn); !why.isEmpty()) QSKIP(qPrintable(why));
    QVERIFY(k::set_cpu_gemm(CpuGemm::automatic));
    k::clear_cpu_gemm_choices();
    // C is 2100 x 2048 floats, 16.4 MiB: over kMaxTimedCopyBytes.
    const Problem accumulating(false, false, 2100, 2048, 4, 1.0f, 1.0f, 80);
    QVERIFY(2100.0 * 2048 * sizeof(float) > k::kMaxTimedCopyBytes);
    QVERIFY(accumulating.check(accumulating.run()).isEmpty());
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(0));
    // With beta 0 the timing writes into C itself, which the chosen library then overwrites.
    const Problem overwriting(false, false, 2100, 2048, 4, 1.0f, 0.0f, 90);
    const QString error = overwriting.check(overwriting.run());
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(1));
  }

  void threads_meeting_a_new_shape_time_it_once() {
    if (QString why = use(CpuGemm::onednn); !why.isEmpty()) QSKIP(qPrintable(why));
    QVERIFY(k::set_cpu_gemm(CpuGemm::automatic));
    k::clear_cpu_gemm_choices();
    const Problem p(false, false, 192, 160, 576, 1.0f, 0.0f, 70);
    std::vector<float> results[2];
    std::thread t0([&] { results[0] = p.run(); }), t1([&] { results[1] = p.run(); });
    t0.join(), t1.join();
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(1));
    for (const std::vector<float>& r : results) QVERIFY(p.check(r).isEmpty());
  }

  void choices_file_keeps_a_shape_for_later_processes() {
    if (QString why = use(CpuGemm::onednn); !why.isEmpty()) QSKIP(qPrintable(why));
    // K 1000: on a Zen 4 machine (OpenBLAS's Cooperlake kernel) both libraries summed K 576
    // in the same order, bit for bit, which left the check below blind.
    const Problem p(false, true, 160, 192, 1000, 1.0f, 0.0f, 40);
    const std::vector<float> by_onednn = p.run();
    QVERIFY(k::set_cpu_gemm(CpuGemm::openblas));
    const std::vector<float> by_openblas = p.run();
    QVERIFY2(by_onednn != by_openblas, "the libraries sum alike here: the check below is blind");
    QTemporaryDir dir;
    k::set_cpu_gemm_choices_dir(dir.path().toStdString());
    const QString file = QString::fromStdString(k::cpu_gemm_choices_file());
    QVERIFY(file.startsWith(dir.path() + "/gemm-choices/") && file.endsWith(".tsv"));
    QVERIFY(k::set_cpu_gemm(CpuGemm::automatic));
    k::clear_cpu_gemm_choices();
    p.run();  // timed, written
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(1));
    QVERIFY(!k::cpu_gemm_choices()[0].remembered);
    const QString text = read_text(file);
    QVERIFY2(text.startsWith("# lattice fp32 GEMM choices for "), qPrintable(text));
    QVERIFY2(text.contains(QString::fromStdString(k::cpu_isa_label(k::cpu_isa()))),
             qPrintable(text));
    QCOMPARE(rows_of(text).size(), 1);
    const QStringList row = rows_of(text)[0].split('\t');
    QCOMPARE(row.mid(0, 7),
             (QStringList{QString::number(k::num_threads()), "NT", "160", "192", "1000", "0",
                          k::cpu_gemm_name(k::cpu_gemm_choices()[0].library)}));
    // A later process (the table forgotten) reads the row instead of timing the shape again.
    k::clear_cpu_gemm_choices();
    p.run();
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(1));
    QVERIFY(k::cpu_gemm_choices()[0].remembered);
    QCOMPARE(read_text(file), text);
    // The file decides: a row naming any way is obeyed bit for bit.
    for (CpuGemm way :
         {CpuGemm::onednn, CpuGemm::openblas, CpuGemm::onednn_split, CpuGemm::openblas_split}) {
      QVERIFY(k::set_cpu_gemm(way));
      const std::vector<float> forced = p.run();
      QVERIFY(k::set_cpu_gemm(CpuGemm::automatic));
      QStringList edited = row;
      edited[6] = k::cpu_gemm_name(way);
      write_text(file, text.section('\n', 0, 1) + "\n" + edited.join('\t') + "\n");
      k::clear_cpu_gemm_choices();
      const std::vector<float> got = p.run();
      QVERIFY2(got == forced, k::cpu_gemm_name(way));
      QCOMPARE(int(k::cpu_gemm_choices()[0].library), int(way));
    }
  }

  void choices_file_problems_lose_nothing() {
    if (QString why = use(CpuGemm::onednn); !why.isEmpty()) QSKIP(qPrintable(why));
    QVERIFY(k::set_cpu_gemm(CpuGemm::automatic));
    QTemporaryDir dir;
    k::set_cpu_gemm_choices_dir(dir.path().toStdString());
    const QString file = QString::fromStdString(k::cpu_gemm_choices_file());
    QVERIFY(QDir().mkpath(QFileInfo(file).path()));
    const Problem p(false, false, 192, 160, 576, 1.0f, 1.0f, 50);
    // Another machine's file (its first line differs): not read, not written, shapes timed here.
    const QString foreign =
        "# lattice fp32 GEMM choices for another CPU\n"
        "2\tNN\t192\t160\t576\t1\tonednn\t1\t2\t3\t4\n";
    write_text(file, foreign);
    k::clear_cpu_gemm_choices();
    QVERIFY(p.check(p.run()).isEmpty());
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(1));
    QVERIFY(!k::cpu_gemm_choices()[0].remembered);
    QCOMPARE(read_text(file), foreign);
    // A malformed row is skipped and a row cut short by a writer that died is ended before the
    // next one is appended: the file reads back whole.
    QFile::remove(file);
    k::clear_cpu_gemm_choices();
    const Problem other(true, false, 160, 192, 576, 1.0f, 0.0f, 60);
    other.run();  // writes the header and one row
    const QString good = read_text(file);
    QCOMPARE(rows_of(good).size(), 1);
    write_text(file, good + "2\tXY\t1\t2\t3\t0\tonednn\t1\t2\t3\t4\n2\tNN\t19");
    k::clear_cpu_gemm_choices();
    QVERIFY(p.check(p.run()).isEmpty());  // reads `other`, skips two lines, times p, appends
    const QStringList rows = rows_of(read_text(file));
    QCOMPARE(rows.size(), 4);
    QVERIFY2(rows[3].startsWith(QString::number(k::num_threads()) + "\tNN\t192\t160\t576\t1\t"),
             qPrintable(rows.join(" | ")));
    k::clear_cpu_gemm_choices();
    other.run(), p.run();
    QCOMPARE(k::cpu_gemm_choices().size(), size_t(2));
    for (const k::GemmChoice& c : k::cpu_gemm_choices()) QVERIFY(c.remembered);
  }

  void two_processes_time_a_shape_once() {
    if (!k::onednn_sgemm_missing().empty())
      QSKIP(qPrintable(QString::fromStdString(k::onednn_sgemm_missing())));
    using lattice::testing::run_process;
    QTemporaryDir dir;
    // Hidden 256 over 8 x 128 tokens: the linear layers' shapes are timed (above
    // kMinTimedGemmWork).
    const QStringList run = {"train",
                             "--mock-data",
                             "--train-iters",
                             "2",
                             "--num-layers",
                             "1",
                             "--hidden-size",
                             "256",
                             "--seq-length",
                             "128",
                             "--num-attention-heads",
                             "4",
                             "--micro-batch-size",
                             "8",
                             "--vocab-size",
                             "512",
                             "--threads",
                             "2",
                             "--eval-iters",
                             "0",
                             "--no-db"};
    const QStringList env = {"LATTICE_CPU_GEMM=auto", "LATTICE_DATA_DIR=" + dir.path()};
    lattice::testing::Run r = run_process(LATTICE_CLI_PATH, run, {}, 120000, env);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const QDir folder(dir.path() + "/gemm-choices");
    const QStringList files = folder.entryList({"*.tsv"});
    QCOMPARE(files.size(), 1);
    const QString first = read_text(folder.filePath(files[0]));
    QVERIFY2(rows_of(first).size() >= 6, qPrintable(first));  // forward, dinput, dweight shapes
    r = run_process(LATTICE_CLI_PATH, run, {}, 120000, env);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QCOMPARE(read_text(folder.filePath(files[0])), first);  // nothing timed the second time
    r = run_process(LATTICE_CLI_PATH, {"version"}, {}, 60000, env);
    QVERIFY2(r.out.contains("fp32 GEMMs OpenBLAS or oneDNN, whole or split over the threads, per "
                            "shape, measured on this machine: " +
                            folder.filePath(files[0]) + ")"),
             qPrintable(r.out));
  }

  void environment_variable() {
    const char* saved = std::getenv("LATTICE_CPU_GEMM");
    const std::string restore = saved ? saved : "";
    setenv("LATTICE_CPU_GEMM", "openblas", 1);
    QCOMPARE(k::cpu_gemm_env_error(), std::string());
    setenv("LATTICE_CPU_GEMM", "auto", 1);
    QCOMPARE(k::cpu_gemm_env_error(), std::string());
    setenv("LATTICE_CPU_GEMM", "mkl", 1);
    QCOMPARE(k::cpu_gemm_env_error(),
             std::string("LATTICE_CPU_GEMM=mkl is not auto, openblas, onednn, openblas-split or "
                         "onednn-split"));
    setenv("LATTICE_CPU_GEMM", "openblas-split", 1);
    QCOMPARE(k::cpu_gemm_env_error(), std::string());
    const std::string missing = k::onednn_sgemm_missing();
    for (const char* value : {"onednn", "onednn-split"}) {
      setenv("LATTICE_CPU_GEMM", value, 1);
      QCOMPARE(k::cpu_gemm_env_error(),
               missing.empty() ? std::string()
                               : std::string("LATTICE_CPU_GEMM=") + value + ": " + missing);
    }
    QCOMPARE(k::set_cpu_gemm(CpuGemm::onednn), missing.empty());
    QCOMPARE(k::set_cpu_gemm(CpuGemm::onednn_split), missing.empty());
    if (saved)
      setenv("LATTICE_CPU_GEMM", restore.c_str(), 1);
    else
      unsetenv("LATTICE_CPU_GEMM");
  }

  void lattice_train_and_version_read_the_variable() {
    using lattice::testing::run_process;
    const QStringList one_step = {
        "train",         "--mock-data", "--train-iters", "1",  "--num-layers",          "1",
        "--hidden-size", "32",          "--seq-length",  "16", "--num-attention-heads", "2",
        "--vocab-size",  "64",          "--threads",     "1",  "--eval-iters",          "0",
        "--no-db"};
    lattice::testing::Run r =
        run_process(LATTICE_CLI_PATH, one_step, {}, 120000, {"LATTICE_CPU_GEMM=mkl"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("LATTICE_CPU_GEMM=mkl is not auto, openblas, onednn, openblas-split or "
                            "onednn-split"),
             qPrintable(r.err));
    QVERIFY(!r.out.contains("iteration"));
    const bool onednn = k::onednn_sgemm_missing().empty();
    r = run_process(LATTICE_CLI_PATH, one_step, {}, 120000, {"LATTICE_CPU_GEMM=onednn"});
    QCOMPARE(r.exit_code, onednn ? 0 : 2);
    if (!onednn)
      QVERIFY2(r.err.contains("LATTICE_CPU_GEMM=onednn: this build has no oneDNN"),
               qPrintable(r.err));
    const char* automatic =
        onednn ? "fp32 GEMMs OpenBLAS or oneDNN, whole or split over the threads, per shape, "
                 "measured on this machine: "
               : "fp32 GEMMs OpenBLAS, whole or split over the threads, per shape, measured on "
                 "this machine: ";
    for (auto [value, label] :
         {std::pair{"", automatic},
          {"openblas", "fp32 GEMMs OpenBLAS)"},
          {"auto", automatic},
          {"openblas-split", "fp32 GEMMs OpenBLAS split over the threads)"}}) {
      r = run_process(LATTICE_CLI_PATH, {"version"}, {}, 60000,
                      {QString("LATTICE_CPU_GEMM=") + value});
      QVERIFY2(r.exit_code == 0 && r.out.contains(label), qPrintable(r.out + r.err));
    }
  }
};

QTEST_GUILESS_MAIN(CpuGemmTest)
#include "test_cpu_gemm.moc"
