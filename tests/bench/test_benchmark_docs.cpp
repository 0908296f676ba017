// A lint of the figures in docs/benchmarks.md and README.md: every table of measured figures
// sits under a paragraph or heading that names the machine they were measured on (CPU model,
// SIMD set, cores), and the nearest such one names one SIMD set, so that figures of different
// machine kinds never share a table. The same config runs 3.5x slower on an AVX2 EPYC than on an
// AVX-512 one (issue 20).
#include <QtTest/QtTest>

#include <QFile>
#include <QRegularExpression>

namespace {

struct Line {
  int number;  // 1-based
  QString text;
};

// The file's lines outside ``` code blocks (a table or heading there is an example).
QList<Line> prose_lines(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) return {};
  QList<Line> out;
  bool code = false;
  int number = 0;
  for (const QString& text : QString::fromUtf8(f.readAll()).split('\n')) {
    number++;
    if (text.trimmed().startsWith("```")) {
      code = !code;
      continue;
    }
    if (!code) out.append({number, text});
  }
  return out;
}

bool is_table_row(const QString& text) {
  return text.trimmed().startsWith('|');
}

// A body cell holding a number ("8,384", "**4.8×**", "69.5 %"): the table reports figures.
bool has_figures(const QList<Line>& table) {
  static const QRegularExpression number(R"(^[~≈<>]?\s*[0-9])");
  for (int i = 2; i < table.size(); i++)  // after the header and its |---| line
    for (QString cell : table[i].text.split('|')) {
      cell.remove('*').remove('`');
      if (number.match(cell.trimmed()).hasMatch()) return true;
    }
  return false;
}

// "AMD EPYC, AVX-512, 2 cores": a CPU model, a SIMD set and a core count on one line.
QStringList isas_named(const QString& text) {
  static const QRegularExpression model(
      R"(\b(AMD|Intel|EPYC|Xeon|Ryzen|Core i\d|Graviton|Neoverse|Ampere)\b)");
  static const QRegularExpression cores(R"(\b\d+[ -]cores?\b)");
  static const QRegularExpression isa(R"((AVX-512|AVX2|AVX(?![-0-9])|SSE4\.2|NEON))");
  if (!model.match(text).hasMatch() || !cores.match(text).hasMatch()) return {};
  QStringList found;
  for (auto it = isa.globalMatch(text); it.hasNext();) {
    const QString name = it.next().captured(1);
    if (!found.contains(name)) found << name;
  }
  return found;
}

struct Problem {
  int line;
  QString what;
};

// Every figure table whose paragraphs above it, up to its section's heading (included) or the
// table before it, name no machine, or whose nearest naming paragraph names two SIMD sets.
QList<Problem> unnamed_tables(const QList<Line>& lines, int* figure_tables) {
  QList<Problem> problems;
  for (int i = 0; i < lines.size();) {
    if (!is_table_row(lines[i].text)) {
      i++;
      continue;
    }
    QList<Line> table;
    const int first = i;
    while (i < lines.size() && is_table_row(lines[i].text)) table.append(lines[i++]);
    if (!has_figures(table)) continue;
    ++*figure_tables;
    // Paragraph by paragraph upwards (lines joined: a name may wrap), the nearest first.
    QStringList isas;
    QString paragraph;
    for (int j = first - 1; j >= 0 && !is_table_row(lines[j].text); j--) {
      const QString text = lines[j].text.trimmed();
      const bool heading = text.startsWith('#');
      if (!text.isEmpty() && !heading) paragraph = text + ' ' + paragraph;
      if (text.isEmpty() || heading || j == 0) {
        isas = isas_named(heading ? text : paragraph);
        if (heading && isas.isEmpty()) isas = isas_named(paragraph);
        paragraph.clear();
        if (!isas.isEmpty() || heading) break;
      }
    }
    if (isas.isEmpty())
      problems.append({table[0].number, "names no machine (CPU model, SIMD set, cores) above it"});
    else if (isas.size() > 1)
      problems.append({table[0].number, "sits under a line naming " + isas.join(" and ") +
                                            ": one table per machine kind"});
  }
  return problems;
}

QString report(const QString& file, const QList<Problem>& problems) {
  QString out;
  for (const Problem& p : problems)
    out += QString("%1:%2: the figure table %3\n").arg(file).arg(p.line).arg(p.what);
  return out;
}

}  // namespace

class TestBenchmarkDocs : public QObject {
  Q_OBJECT
 private slots:
  void every_figure_table_names_its_machine_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("at_least");  // figure tables expected, so the lint never passes empty
    QTest::newRow("docs/benchmarks.md") << "docs/benchmarks.md" << 9;
    QTest::newRow("README.md") << "README.md" << 0;
  }
  void every_figure_table_names_its_machine() {
    QFETCH(QString, file);
    QFETCH(int, at_least);
    const QList<Line> lines = prose_lines(QStringLiteral(LATTICE_SOURCE_DIR "/") + file);
    QVERIFY2(!lines.isEmpty(), qPrintable(file + " cannot be read"));
    int tables = 0;
    const QList<Problem> problems = unnamed_tables(lines, &tables);
    QVERIFY2(problems.isEmpty(), qPrintable(report(file, problems)));
    QVERIFY2(tables >= at_least, qPrintable(QString("%1 figure tables in %2, expected at least %3")
                                                .arg(tables)
                                                .arg(file)
                                                .arg(at_least)));
  }

  void the_lint_finds_a_table_without_its_machine() {
    const QList<Line> bare = {{1, "## Throughput"},
                              {2, "Measured on the development machine:"},
                              {3, "| config | tok/s |"},
                              {4, "|---|---|"},
                              {5, "| A | 8,384 |"}};
    int tables = 0;
    QCOMPARE(unnamed_tables(bare, &tables).size(), 1);
    QList<Line> named = bare;
    named[1].text = "Measured on the AMD EPYC, AVX-512, 2 cores:";
    QVERIFY(unnamed_tables(named, &tables).isEmpty());
    named[0].text = "## Throughput (AMD EPYC, 2 cores, AVX2)";  // a heading names it too
    named[1].text = "Measured on the development machine:";
    QVERIFY(unnamed_tables(named, &tables).isEmpty());
    QList<Line> mixed = bare;
    mixed[1].text = "AMD EPYC, 2 cores, AVX-512 and AVX2 machines:";
    QCOMPARE(unnamed_tables(mixed, &tables).size(), 1);
    QList<Line> words = bare;  // a table of words, not figures, needs no machine
    words[4].text = "| A | fast |";
    QVERIFY(unnamed_tables(words, &tables).isEmpty());
  }
};

QTEST_APPLESS_MAIN(TestBenchmarkDocs)
#include "test_benchmark_docs.moc"
