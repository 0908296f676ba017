// The benchmarks' machine line (bench_machine.h) names what the kernel reports in
// /proc/cpuinfo: the SIMD set found with cpuid is the widest among /proc/cpuinfo's flags, and
// the model is its model name, with x86's family and model numbers.
#include <QtTest/QtTest>

#include <QFile>
#include <QRegularExpression>

#include "bench/bench_machine.h"

namespace {

// The value of the first "key\t: value" line of /proc/cpuinfo.
QString cpuinfo(const QString& key) {
  QFile f("/proc/cpuinfo");
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) return {};
  const QRegularExpression line("^" + QRegularExpression::escape(key) + "\\s*: ?(.*)$",
                                QRegularExpression::MultilineOption);
  return line.match(QString::fromUtf8(f.readAll())).captured(1).trimmed();
}

}  // namespace

class TestBenchMachine : public QObject {
  Q_OBJECT
 private slots:
  void isa_is_the_widest_that_proc_cpuinfo_lists() {
    const QString flags_line = cpuinfo("flags");
    if (flags_line.isEmpty()) QSKIP("/proc/cpuinfo has no flags line (not x86)");
    const QStringList flags = flags_line.split(' ', Qt::SkipEmptyParts);
    const struct {
      const char* flag;
      const char* isa;
    } widest_first[] = {
        {"avx512f", "AVX-512"}, {"avx2", "AVX2"}, {"avx", "AVX"}, {"sse4_2", "SSE4.2"}};
    QString expected = "SSE2";
    for (const auto& level : widest_first)
      if (flags.contains(level.flag)) {
        expected = level.isa;
        break;
      }
    const lattice::bench::Machine m = lattice::bench::this_machine();
    QCOMPARE(QString::fromStdString(m.isa), expected);
    QVERIFY2(QString::fromStdString(lattice::bench::machine_line()).contains(", " + expected + ","),
             lattice::bench::machine_line().c_str());
  }

  void cpu_is_the_model_name_and_cores_are_counted() {
    const QString model = cpuinfo("model name");
    if (model.isEmpty()) QSKIP("/proc/cpuinfo has no model name");
    const lattice::bench::Machine m = lattice::bench::this_machine();
    QCOMPARE(QString::fromStdString(m.cpu).simplified(), model.simplified());
    QVERIFY(m.cores >= 1);
    QVERIFY(m.cores <= QThread::idealThreadCount());
    // x86's family and model tell CPU generations apart where the model name does not.
    const QString family = cpuinfo("cpu family"), number = cpuinfo("model");
    const QString generation =
        family.isEmpty() || number.isEmpty() ? QString() : "family " + family + " model " + number;
    QCOMPARE(QString::fromStdString(m.family), generation);
    const QString expected =
        QString("machine: %1%2, %3, %4 core")
            .arg(model.simplified(), generation.isEmpty() ? QString() : " (" + generation + ")",
                 QString::fromStdString(m.isa))
            .arg(m.cores);
    QVERIFY2(QString::fromStdString(lattice::bench::machine_line()).startsWith(expected),
             lattice::bench::machine_line().c_str());
  }
};

QTEST_APPLESS_MAIN(TestBenchMachine)
#include "test_bench_machine.moc"
