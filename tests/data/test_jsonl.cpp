// Specification of jsonl_field: the string under a key of one JSONL line, as Megatron's
// preprocess_data.py reads json.loads(line)[key], and a message naming the key or the column
// for every line it cannot use; and read_jsonl_batch's batches of non-blank lines.
#include <QTest>

#include <sstream>
#include <string>
#include <vector>

#include "data/jsonl.h"

using lattice::jsonl_field;

class TestJsonl : public QObject {
  Q_OBJECT

 private slots:
  void extractsTheString_data() {
    QTest::addColumn<QByteArray>("line");
    QTest::addColumn<QByteArray>("text");
    QTest::newRow("plain") << QByteArray("{\"text\": \"Hello, world.\"}")
                           << QByteArray("Hello, world.");
    QTest::newRow("other members around it")
        << QByteArray(
               "{\"id\": 3, \"text\": \"x\", \"meta\": {\"text\": 5, \"a\": [1, {\"text\": 2}]}}")
        << QByteArray("x");
    QTest::newRow("escapes") << QByteArray(
                                    "{\"text\": \"a\\\"b\\\\c\\nd\\t\\u00e9\\ud83d\\ude00\"}")
                             << QByteArray("a\"b\\c\nd\t\xc3\xa9\xf0\x9f\x98\x80");
    QTest::newRow("raw UTF-8") << QByteArray("{\"text\": \"\xe4\xb8\xad\"}")
                               << QByteArray("\xe4\xb8\xad");
    QTest::newRow("empty string") << QByteArray("{\"text\": \"\"}") << QByteArray("");
    QTest::newRow("last of a repeated key wins, as in Python")
        << QByteArray("{\"text\": \"first\", \"text\": \"second\"}") << QByteArray("second");
    QTest::newRow("CRLF line") << QByteArray("{\"text\": \"w\"}\r") << QByteArray("w");
    QTest::newRow("surrounding spaces") << QByteArray("  {\"text\":\"s\"}  ") << QByteArray("s");
  }

  void extractsTheString() {
    QFETCH(QByteArray, line);
    QFETCH(QByteArray, text);
    auto result = jsonl_field(line.toStdString(), "text");
    QVERIFY2(result.is_ok(), result.status().message().c_str());
    QCOMPARE(*result, text.toStdString());
  }

  void refusesWithAMessage_data() {
    QTest::addColumn<QByteArray>("line");
    QTest::addColumn<QString>("message");
    QTest::newRow("missing key") << QByteArray("{\"content\": \"x\", \"meta\": {\"text\": \"y\"}}")
                                 << QString("the line's JSON object has no \"text\" key");
    QTest::newRow("a number") << QByteArray("{\"text\": 5}")
                              << QString("\"text\" holds a JSON number, not a string");
    QTest::newRow("a list of sentences") << QByteArray("{\"text\": [\"a.\", \"b.\"]}")
                                         << QString("\"text\" holds a JSON array, not a string");
    QTest::newRow("null") << QByteArray("{\"text\": null}")
                          << QString("\"text\" holds a JSON null, not a string");
    QTest::newRow("repeated key, last not a string")
        << QByteArray("{\"text\": \"a\", \"text\": {}}")
        << QString("\"text\" holds a JSON object, not a string");
    QTest::newRow("an array")
        << QByteArray("[{\"text\": \"x\"}]")
        << QString("the line holds a JSON array, not an object with a \"text\" key");
    QTest::newRow("a string")
        << QByteArray("\"text\"")
        << QString("the line holds a JSON string, not an object with a \"text\" key");
    QTest::newRow("unterminated string")
        << QByteArray("{\"text\": \"abc")
        << QString(
               "invalid JSON at column 14: syntax error while parsing value - invalid string: "
               "missing closing quote; last read: '\"abc'");
    QTest::newRow("trailing data")
        << QByteArray("{\"text\": \"a\"} x")
        << QString(
               "invalid JSON at column 15: syntax error while parsing value - invalid literal; "
               "last read: '\"a\"} x'; expected end of input");
    QTest::newRow("empty line") << QByteArray("")
                                << QString(
                                       "invalid JSON at column 1: syntax error while parsing "
                                       "value - unexpected end of input; expected '[', '{', or "
                                       "a literal");
    // Found by fuzz_jsonl: nlohmann reports a double overflow as out_of_range, not parse_error,
    // and jsonl_field let that exception escape.
    QTest::newRow("number too large for a double")
        << QByteArray("{\"text\": \"x\", \"score\": 55555555555555E+555}")
        << QString("invalid JSON at column 42: number overflow parsing '55555555555555E+555'");
    QTest::newRow("invalid UTF-8, shown as hex")
        << QByteArray("{\"text\": \"\xff\"}")
        << QString(
               "invalid JSON at column 11: syntax error while parsing value - invalid string: "
               "ill-formed UTF-8 byte; last read: '\"<FF>'");
    // The reason is cut at 200 characters: nlohmann quotes the whole unterminated string.
    const QString reason =
        "syntax error while parsing value - invalid string: missing closing "
        "quote; last read: '\"";
    QTest::newRow("long unterminated string, cut")
        << (QByteArray("{\"text\": \"") + QByteArray(1000, 'a'))
        << "invalid JSON at column 1011: " + reason + QString(200 - reason.size(), 'a') + "...";
  }

  void refusesWithAMessage() {
    QFETCH(QByteArray, line);
    QFETCH(QString, message);
    auto result = jsonl_field(line.toStdString(), "text");
    QVERIFY2(!result.is_ok(), "the line was accepted");
    QCOMPARE(QString::fromStdString(result.status().message()), message);
  }

  // read_jsonl_batch: batches of non-blank lines with their numbers in the file; blank and
  // whitespace-only lines are counted, skipped, and their bytes added.
  void readsBatchesOfNonBlankLines() {
    std::istringstream in("{\"a\": 1}\n\n \t\r\n{\"b\": 2}\n{\"c\": 3}\n\n{\"d\": 4}");
    lattice::JsonlBatch batch;
    size_t number = 0, bytes = 0;
    QVERIFY(lattice::read_jsonl_batch(in, 2, number, bytes, batch));
    QCOMPARE(batch.lines, (std::vector<std::string>{"{\"a\": 1}", "{\"b\": 2}"}));
    QCOMPARE(batch.numbers, (std::vector<size_t>{1, 4}));
    QCOMPARE(bytes, size_t(9 + 1 + 4 + 9));
    QVERIFY(!lattice::read_jsonl_batch(in, 3, number, bytes, batch));  // ends the stream
    QCOMPARE(batch.lines, (std::vector<std::string>{"{\"c\": 3}", "{\"d\": 4}"}));
    QCOMPARE(batch.numbers, (std::vector<size_t>{5, 7}));
    QCOMPARE(number, size_t(7));
  }
};

QTEST_GUILESS_MAIN(TestJsonl)
#include "test_jsonl.moc"
