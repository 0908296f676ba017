// `lattice serve` under load and at its limits (issue 28): the listen backlog is the flag's, not
// the library's 5; a connection past --max-connections and a request past --max-queued-prompts
// hear 503 with Retry-After instead of a reset or a wait; a client that sends its head or body
// slowly, or nothing, is cut at its timeout with 408 and does not delay others; GET /health and
// GET /v1/models answer; SIGTERM finishes the queued requests (or, past --shutdown-timeout,
// answers them 503) and the server exits 0. Real processes over loopback.
#include <QtTest/QtTest>

#include <QProcess>
#include <QTemporaryDir>
#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "http_client.h"
#include "serve_fixture.h"

using json = nlohmann::json;
using lattice::testing::http_call;
using lattice::testing::HttpAnswer;
using lattice::testing::raw_body;
using lattice::testing::raw_status;
using lattice::testing::RawAnswer;

namespace {

using Clock = std::chrono::steady_clock;

std::string api_body(int prompts, int tokens) {
  json p = json::array();
  for (int i = 0; i < prompts; i++) p.push_back("1 2 3");
  return json{{"prompts", p}, {"tokens_to_generate", tokens}}.dump();
}

std::string error_code(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"]["code"].is_string()) return "";
  return j["error"]["code"].get<std::string>();
}

// `clients` threads each PUT /api once with `prompts` prompts of `tokens` tokens into
// `answers`, counting the answers in `answered`.
void call_concurrently(int port, int clients, int prompts, int tokens,
                       std::vector<HttpAnswer>& answers, std::atomic<int>& answered,
                       std::vector<std::thread>& threads) {
  answers.assign(static_cast<size_t>(clients), HttpAnswer{});
  for (int i = 0; i < clients; i++)
    threads.emplace_back([&answers, &answered, i, port, prompts, tokens] {
      answers[static_cast<size_t>(i)] = http_call(port, "PUT", "/api", api_body(prompts, tokens));
      answered++;
    });
}

// Polls GET /health until every one of `requests` requests of `prompts` prompts has been
// taken (answered, generating or queued) and some still wait in the queue; false when that
// was not seen within `timeout_ms`.
bool wait_until_all_taken_and_some_queued(int port, const std::atomic<int>& answered, int requests,
                                          int prompts, int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < end) {
    const int done = answered.load();
    const HttpAnswer h = http_call(port, "GET", "/health", "");
    const json j = json::parse(h.body, nullptr, false);
    if (j.is_discarded()) return false;
    const int queued = j.value("queued_prompts", 0);
    const int taken = done * prompts + j.value("generating_prompts", 0) + queued;
    if (queued > 0 && taken >= requests * prompts) return true;
    if (done == requests) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

}  // namespace

class ServeConnections : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString ckpt_;

  // Sends SIGTERM and waits for the server to exit; its whole output.
  static QString terminate_and_wait(QProcess& server, int timeout_ms) {
    server.terminate();
    [&] {
      QVERIFY2(server.waitForFinished(timeout_ms), "the server did not exit after SIGTERM");
    }();
    return QString::fromUtf8(server.readAll());
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    ckpt_ = lattice::testing::train_tiny(dir_, "ckpt", {});
    QVERIFY(!ckpt_.isEmpty());
  }

  // cpp-httplib 0.11.4 listens with a backlog of 5 (the issue saw 2 resets in 15,719 answers
  // under 64 clients); `ss` shows a listening socket's backlog as its Send-Q.
  void the_listen_backlog_is_the_flags() {
    QProcess server;
    const int port = lattice::testing::start_serve(server, ckpt_, {"--listen-backlog", "512"});
    QVERIFY(port > 0);
    QProcess ss;
    ss.start("ss", {"-Hltn", QString("sport = :%1").arg(port)});
    QVERIFY2(ss.waitForFinished(10000) && ss.exitCode() == 0, "ss (iproute2) did not run");
    const QStringList cols = QString::fromUtf8(ss.readAllStandardOutput()).simplified().split(' ');
    QVERIFY2(cols.size() >= 3, qPrintable(cols.join(' ')));
    QFile somaxconn("/proc/sys/net/core/somaxconn");
    QVERIFY(somaxconn.open(QIODevice::ReadOnly));
    const int cap = somaxconn.readAll().trimmed().toInt();
    QCOMPARE(cols[2].toInt(), std::min(512, cap));
    terminate_and_wait(server, 30000);
  }

  // Two connections that send nothing fill --max-connections 2: a third is answered 503 with
  // Retry-After and closed (not reset, not left waiting). The idle ones are cut at
  // --header-timeout with 408, and then a request is served.
  void a_connection_past_the_limit_hears_503_and_idle_ones_are_cut() {
    QProcess server;
    const int port = lattice::testing::start_serve(
        server, ckpt_, {"--max-connections", "2", "--header-timeout", "2"});
    QVERIFY(port > 0);
    const int idle1 = lattice::testing::open_idle_connection(port);
    const int idle2 = lattice::testing::open_idle_connection(port);
    QVERIFY(idle1 >= 0 && idle2 >= 0);
    QTest::qWait(300);  // both are being served (waiting for their heads)
    const RawAnswer third = lattice::testing::raw_exchange(
        port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", false, 10000, true);
    QVERIFY2(raw_status(third.bytes) == 503, third.bytes.c_str());
    QVERIFY2(third.bytes.find("\r\nRetry-After: 1\r\n") != std::string::npos, third.bytes.c_str());
    QCOMPARE(error_code(raw_body(third.bytes)), std::string("server_busy"));
    QVERIFY2(third.closed && !third.timed_out, "the refused connection was not closed");
    QVERIFY2(third.seconds < 3, qPrintable(QString("refused after %1 s").arg(third.seconds)));
    // The idle connections hear 408 at the header timeout (2 s), and their places are free.
    for (int fd : {idle1, idle2}) {
      const RawAnswer cut = lattice::testing::read_answer_on(fd, 6000);
      QVERIFY2(raw_status(cut.bytes) == 408, cut.bytes.c_str());
      QCOMPARE(error_code(raw_body(cut.bytes)), std::string("request_timeout"));
      lattice::testing::close_socket(fd);
    }
    // Their threads end as the library sees the shut-down sockets (microseconds to
    // milliseconds after the 408 left): within the second Retry-After asks for, a place is free.
    int status = -1;
    const auto end = Clock::now() + std::chrono::seconds(1);
    do {
      status = http_call(port, "PUT", "/api", api_body(1, 2)).status;
    } while (status == 503 && Clock::now() < end);
    QCOMPARE(status, 200);
    terminate_and_wait(server, 30000);
  }

  // A slowloris client (a byte of its head every 200 ms) is cut at --header-timeout 2 with 408;
  // meanwhile every other request is answered at once.
  void a_slow_head_is_cut_at_the_header_timeout_and_others_are_served() {
    QProcess server;
    const int port = lattice::testing::start_serve(server, ckpt_, {"--header-timeout", "2"});
    QVERIFY(port > 0);
    RawAnswer slow;
    std::thread slowloris([&] {
      slow = lattice::testing::dribble(
          port, "PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n", 200,
          15000);
    });
    double worst = 0;
    for (int i = 0; i < 20; i++) {
      const auto t0 = Clock::now();
      const HttpAnswer a = http_call(port, "PUT", "/api", api_body(1, 4));
      worst = std::max(worst, std::chrono::duration<double>(Clock::now() - t0).count());
      QCOMPARE(a.status, 200);
      QTest::qWait(50);
    }
    slowloris.join();
    QVERIFY2(raw_status(slow.bytes) == 408, slow.bytes.c_str());
    QVERIFY2(raw_body(slow.bytes).find("line and headers") != std::string::npos,
             slow.bytes.c_str());
    QVERIFY2(slow.closed && slow.seconds >= 1.9 && slow.seconds < 5,
             qPrintable(QString("cut after %1 s").arg(slow.seconds)));
    // Each other request took a decode of 4 tokens, not the slow client's time.
    QVERIFY2(worst < 1.5, qPrintable(QString("slowest other request %1 s").arg(worst)));
    qInfo("slow head cut after %.2f s; slowest of 20 other requests %.3f s", slow.seconds, worst);
    terminate_and_wait(server, 30000);
  }

  // The body has its own clock: a head that announces 200 bytes and then sends a byte every
  // 200 ms is cut at --body-timeout 2.
  void a_slow_body_is_cut_at_the_body_timeout() {
    QProcess server;
    const int port = lattice::testing::start_serve(server, ckpt_, {"--body-timeout", "2"});
    QVERIFY(port > 0);
    const std::string head =
        "PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 200\r\n\r\n";
    const RawAnswer slow =
        lattice::testing::send_then_dribble(port, head, std::string(200, ' '), 200, 15000);
    QVERIFY2(raw_status(slow.bytes) == 408, slow.bytes.c_str());
    QVERIFY2(raw_body(slow.bytes).find("body") != std::string::npos, slow.bytes.c_str());
    QVERIFY2(slow.closed && slow.seconds >= 1.9 && slow.seconds < 5,
             qPrintable(QString("cut after %1 s").arg(slow.seconds)));
    terminate_and_wait(server, 30000);
  }

  void health_and_models_answer() {
    QProcess server;
    const int port = lattice::testing::start_serve(server, ckpt_);
    QVERIFY(port > 0);
    const HttpAnswer h = http_call(port, "GET", "/health", "");
    QCOMPARE(h.status, 200);
    const json hj = json::parse(h.body);
    QCOMPARE(hj["status"], "ok");
    QCOMPARE(hj["queued_prompts"], 0);
    QVERIFY(hj["connections"].get<int>() >= 1);
    const HttpAnswer m = http_call(port, "GET", "/v1/models", "");
    QCOMPARE(m.status, 200);
    const json mj = json::parse(m.body);
    QCOMPARE(mj["object"], "list");
    QCOMPARE(mj["data"].size(), size_t{1});
    QCOMPARE(mj["data"][0]["id"], "lattice");
    QCOMPARE(mj["data"][0]["object"], "model");
    QCOMPARE(mj["data"][0]["max_model_len"], 32);
    terminate_and_wait(server, 30000);
  }

  // --max-queued-prompts 1: of 16 concurrent one-prompt requests, those that find the queue
  // full hear 503 with Retry-After; none fails otherwise.
  void a_full_queue_answers_503_with_retry_after() {
    QProcess server;
    const int port = lattice::testing::start_serve(
        server, ckpt_, {"--max-queued-prompts", "1", "--max-batch-size", "1"});
    QVERIFY(port > 0);
    std::vector<std::thread> threads;
    std::vector<HttpAnswer> answers;
    std::atomic<int> answered{0};
    call_concurrently(port, 16, 1, 24, answers, answered, threads);
    for (std::thread& t : threads) t.join();
    int ok = 0, busy = 0;
    for (const HttpAnswer& a : answers) {
      if (a.status == 200) {
        ok++;
        continue;
      }
      QVERIFY2(a.status == 503, qPrintable(QString("%1 %2").arg(a.status).arg(a.body.c_str())));
      QCOMPARE(a.retry_after, std::string("1"));
      QCOMPARE(error_code(a.body), std::string("server_busy"));
      busy++;
    }
    QVERIFY2(ok >= 1 && busy >= 1, qPrintable(QString("%1 answered, %2 busy").arg(ok).arg(busy)));
    terminate_and_wait(server, 30000);
  }

  // SIGTERM while prompts wait: the server stops taking requests, answers every queued one in
  // full, and exits 0.
  void sigterm_finishes_the_queued_requests() {
    QProcess server;
    server.setProcessChannelMode(QProcess::MergedChannels);
    const int port = lattice::testing::start_serve(server, ckpt_);
    QVERIFY(port > 0);
    std::vector<std::thread> threads;
    std::vector<HttpAnswer> answers;
    std::atomic<int> answered{0};
    call_concurrently(port, 8, 128, 24, answers, answered, threads);
    const bool queued = wait_until_all_taken_and_some_queued(port, answered, 8, 128, 20000);
    const QString out = terminate_and_wait(server, 60000);
    for (std::thread& t : threads) t.join();
    QVERIFY2(queued, "the 8 requests were not all seen taken, with some waiting, before SIGTERM");
    for (const HttpAnswer& a : answers) {
      QVERIFY2(a.status == 200, qPrintable(QString("%1 %2").arg(a.status).arg(a.body.c_str())));
      QCOMPARE(json::parse(a.body)["text"].size(), size_t{128});
    }
    QCOMPARE(server.exitStatus(), QProcess::NormalExit);
    QCOMPARE(server.exitCode(), 0);
    QVERIFY2(out.contains("stopping: no new requests") && out.contains("stopped"), qPrintable(out));
  }

  // --shutdown-timeout 0: what is still queued or generating at SIGTERM is answered 503
  // (server_stopping), never dropped, and the server exits 0.
  void sigterm_past_the_shutdown_timeout_answers_503() {
    QProcess server;
    server.setProcessChannelMode(QProcess::MergedChannels);
    const int port = lattice::testing::start_serve(server, ckpt_, {"--shutdown-timeout", "0"});
    QVERIFY(port > 0);
    std::vector<std::thread> threads;
    std::vector<HttpAnswer> answers;
    std::atomic<int> answered{0};
    call_concurrently(port, 8, 128, 24, answers, answered, threads);
    const bool queued = wait_until_all_taken_and_some_queued(port, answered, 8, 128, 20000);
    terminate_and_wait(server, 60000);
    for (std::thread& t : threads) t.join();
    QVERIFY2(queued, "the 8 requests were not all seen taken, with some waiting, before SIGTERM");
    int stopped = 0;
    for (const HttpAnswer& a : answers) {
      if (a.status == 200) continue;
      QVERIFY2(a.status == 503, qPrintable(QString("%1 %2").arg(a.status).arg(a.body.c_str())));
      QCOMPARE(error_code(a.body), std::string("server_stopping"));
      stopped++;
    }
    QVERIFY(stopped >= 1);
    QCOMPARE(server.exitCode(), 0);
  }
};

QTEST_GUILESS_MAIN(ServeConnections)
#include "test_serve_connections.moc"
