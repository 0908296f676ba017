// `lattice serve` over loopback HTTP: both APIs answer with the documented shapes; OpenAI's
// stream=true adds up to the plain answer; every bad request gets a 400 (404 for an unknown
// route) with OpenAI's error object and the server keeps serving (test_serve_input: field
// ranges and the transport); concurrent requests are batched
// without changing any answer; a streaming client that leaves has its sequences cancelled;
// SIGTERM stops it.
#include <QtTest/QtTest>

#include <QProcess>
#include <QTemporaryDir>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>

#include "http_client.h"
#include "serve_fixture.h"
#include "text_stream.h"

using json = nlohmann::json;

class Serve : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QProcess server_;
  int port_ = 0;

  // Answers as a pointer-like optional: null when the connection failed.
  std::optional<lattice::testing::HttpAnswer> call(const std::string& method,
                                                   const std::string& path,
                                                   const std::string& body) {
    lattice::testing::HttpAnswer a = lattice::testing::http_call(port_, method, path, body);
    if (a.status < 0) return std::nullopt;
    return a;
  }

  // A good request still works: the server survived whatever came before.
  void expect_alive() {
    auto r = call("PUT", "/api", R"({"prompts": ["1 2"], "tokens_to_generate": 2, "top_k": 1})");
    QVERIFY(r);
    QCOMPARE(r->status, 200);
  }

  int train_and_serve(QProcess& server, const QString& name, const QStringList& extra) {
    return lattice::testing::train_and_serve(server, dir_, name, extra);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    port_ = train_and_serve(server_, "ckpt", {});
    QVERIFY(port_ > 0);
  }

  void megatron_api_shapes() {
    auto r = call("PUT", "/api",
                  R"({"prompts": ["1 2 3", "7"], "tokens_to_generate": 4, "logprobs": true,
                      "temperature": 1.0, "top_k": 1, "random_seed": 3})");
    QVERIFY(r);
    QCOMPARE(r->status, 200);
    const json j = json::parse(r->body);
    QCOMPARE(j["text"].size(), size_t{2});
    QCOMPARE(j["segments"].size(), size_t{2});
    QCOMPARE(j["logprobs"].size(), size_t{2});
    // Prompt + 4 generated tokens (EOD is unlikely to be greedy here; if it were, fewer).
    QCOMPARE(j["segments"][0].size(), size_t{7});
    QCOMPARE(j["segments"][1].size(), size_t{5});
    QCOMPARE(j["logprobs"][0].size(), j["segments"][0].size() - 1);
    QCOMPARE(j["logprobs"][1].size(), j["segments"][1].size() - 1);
    QVERIFY(j["text"][0].get<std::string>().rfind("1 2 3 ", 0) == 0);
    for (const json& v : j["logprobs"][0]) QVERIFY(v.get<double>() <= 0.0);
    // Without logprobs the field is null (as Megatron).
    auto plain = call("PUT", "/api", R"({"prompts": ["1"], "tokens_to_generate": 1})");
    QVERIFY(json::parse(plain->body)["logprobs"].is_null());
  }

  void openai_completions_shapes() {
    auto r = call("POST", "/v1/completions",
                  R"({"model": "tiny", "prompt": "1 2 3", "max_tokens": 5, "temperature": 0,
                      "logprobs": 1})");
    QVERIFY(r);
    QCOMPARE(r->status, 200);
    const json j = json::parse(r->body);
    QCOMPARE(j["object"], "text_completion");
    QCOMPARE(j["model"], "tiny");
    QVERIFY(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
    QCOMPARE(j["choices"].size(), size_t{1});
    const json& c = j["choices"][0];
    QCOMPARE(c["index"], 0);
    QVERIFY(c["finish_reason"] == "length" || c["finish_reason"] == "stop");
    QVERIFY(c["text"].is_string());
    QCOMPARE(c["logprobs"]["tokens"].size(), c["logprobs"]["token_logprobs"].size());
    QCOMPARE(j["usage"]["prompt_tokens"], 3);
    QCOMPARE(j["usage"]["total_tokens"].get<int>(), 3 + j["usage"]["completion_tokens"].get<int>());
    auto list = call("POST", "/v1/completions",
                     R"({"prompt": ["1", "2 3", "4 5 6"], "max_tokens": 2, "top_p": 0.5})");
    QCOMPARE(list->status, 200);
    const json l = json::parse(list->body);
    QCOMPARE(l["choices"].size(), size_t{3});
    QCOMPARE(l["choices"][2]["index"], 2);
    QVERIFY(l["choices"][0]["logprobs"].is_null());
  }

  // The pieces a client is shown: never a tail that may still become a stop string, never
  // half of a UTF-8 character, and together exactly the final text.
  void text_stream_holds_back_partial_stops_and_characters() {
    const std::vector<std::string> pieces = {"Hello",         " wo", "rld", " \xC3",
                                             "\xA9t\xC3\xA9", " E",  "N",   "D!"};
    auto text_of = [&](const std::vector<int32_t>& ids) {
      std::string t;
      for (int32_t id : ids) t += pieces[static_cast<size_t>(id)];
      return t;
    };
    lattice::cli::TextStream s(text_of, {" END"});
    std::vector<std::string> shown;
    for (int32_t id = 0; id < int32_t(pieces.size()); id++) shown.push_back(s.push(id));
    const std::vector<std::string> want = {"Hello", " wo", "rld", " ", "\xC3\xA9t\xC3\xA9",
                                           "",      "",    ""};
    for (size_t i = 0; i < want.size(); i++)
      QVERIFY2(shown[i] == want[i], qPrintable(QString("piece %1: '%2', want '%3'")
                                                   .arg(i)
                                                   .arg(QString::fromStdString(shown[i]),
                                                        QString::fromStdString(want[i]))));
    QVERIFY(s.stopped());
    QCOMPARE(s.finish("Hello world \xC3\xA9t\xC3\xA9"), std::string());
    // Without a stop: the held-back " E" comes out at the end.
    lattice::cli::TextStream open(text_of, {" EX"});
    std::string all;
    for (int32_t id = 0; id < 6; id++) all += open.push(id);
    QCOMPARE(all, std::string("Hello world \xC3\xA9t\xC3\xA9"));
    all += open.finish(text_of({0, 1, 2, 3, 4, 5}));
    QCOMPARE(all, text_of({0, 1, 2, 3, 4, 5}));
  }

  // stream=true sends server-sent events whose pieces add up, choice by choice, to what
  // stream=false answers (same seed), with the same finish reasons and logprobs; streamed and
  // plain calls are batched together without changing either.
  void openai_stream_adds_up_to_the_plain_answer() {
    const std::vector<json> bodies = {
        {{"prompt", {"1 2 3", "4", "5 6"}}, {"max_tokens", 6}, {"temperature", 0}},
        {{"prompt", "7 8"}, {"max_tokens", 8}, {"temperature", 0.9}, {"seed", 11}, {"logprobs", 0}},
        {{"prompt", "1 2 3"}, {"max_tokens", 8}, {"temperature", 0}, {"stop", " 3"}},
    };
    for (const json& body : bodies) {
      json streamed = body;
      streamed["stream"] = true;
      auto plain_call = std::async(std::launch::async,
                                   [&] { return call("POST", "/v1/completions", body.dump()); });
      auto s = call("POST", "/v1/completions", streamed.dump());
      auto p = plain_call.get();
      QVERIFY(s && p);
      QCOMPARE(s->status, 200);
      QCOMPARE(p->status, 200);
      QCOMPARE(QString::fromStdString(s->content_type), QString("text/event-stream"));
      const json plain = json::parse(p->body);
      const size_t n = plain["choices"].size();
      std::vector<std::string> text(n);
      std::vector<json> finish(n), tokens(n, json::array()), logprobs(n, json::array());
      std::vector<std::string> events;
      for (size_t at = 0; at < s->body.size();) {
        const size_t end = s->body.find("\n\n", at);
        QVERIFY2(end != std::string::npos, "an event without its blank line");
        events.push_back(s->body.substr(at, end - at));
        at = end + 2;
      }
      QVERIFY(!events.empty());
      QCOMPARE(QString::fromStdString(events.back()), QString("data: [DONE]"));
      for (size_t e = 0; e + 1 < events.size(); e++) {
        QVERIFY2(events[e].rfind("data: ", 0) == 0, events[e].c_str());
        const json chunk = json::parse(events[e].substr(6));
        QCOMPARE(chunk["object"], "text_completion");
        QCOMPARE(chunk["choices"].size(), size_t{1});
        const json& c = chunk["choices"][0];
        const size_t i = c["index"].get<size_t>();
        QVERIFY(i < n);
        QVERIFY2(finish[i].is_null(), "a piece after the choice's finish_reason");
        text[i] += c["text"].get<std::string>();
        finish[i] = c["finish_reason"];
        if (c["logprobs"].is_object()) {
          tokens[i].push_back(c["logprobs"]["tokens"][0]);
          logprobs[i].push_back(c["logprobs"]["token_logprobs"][0]);
        }
      }
      for (size_t i = 0; i < n; i++) {
        const json& want = plain["choices"][i];
        QCOMPARE(QString::fromStdString(text[i]), QString::fromStdString(want["text"]));
        QCOMPARE(finish[i], want["finish_reason"]);
        if (want["logprobs"].is_object()) {
          QCOMPARE(tokens[i], want["logprobs"]["tokens"]);
          QCOMPARE(logprobs[i], want["logprobs"]["token_logprobs"]);
        }
      }
    }
  }

  void bad_requests_get_400_and_the_server_keeps_serving() {
    json many = {{"prompts", json::array()}};
    for (int i = 0; i < 129; i++) many["prompts"].push_back("1");
    std::string long_prompt;
    for (int i = 0; i < 40; i++) {
      if (i > 0) long_prompt += ' ';
      long_prompt += std::to_string(i % 9 + 1);
    }
    const struct {
      const char* method;
      const char* path;
      std::string body;
      int status;
      const char* says;
    } cases[] = {
        {"PUT", "/api", "{not json", 400, "not a JSON object"},
        {"PUT", "/api", "[1, 2]", 400, "not a JSON object"},
        {"PUT", "/api", R"({"prompt": ["1"]})", 400, "prompts argument required"},
        {"PUT", "/api", R"({"prompts": "1 2"})", 400, "not a list of strings"},
        {"PUT", "/api", R"({"prompts": [1, 2]})", 400, "not a list of strings"},
        {"PUT", "/api", R"({"prompts": ["1"], "tokens_to_generate": "5"})", 400,
         "tokens_to_generate"},
        {"PUT", "/api", R"({"prompts": ["1"], "temperature": "hot"})", 400, "temperature"},
        {"PUT", "/api", R"({"prompts": ["1"], "top_k": 1, "top_p": 0.5})", 400, "both"},
        {"PUT", "/api", R"({"prompts": ["1"], "logprobs": 1})", 400, "logprobs"},
        {"PUT", "/api", many.dump(), 400, "Maximum number of prompts is 128"},
        {"PUT", "/api", json{{"prompts", json::array({long_prompt})}}.dump(), 400, "context is 32"},
        {"POST", "/v1/completions", "{}", 400, "prompt is required"},
        {"POST", "/v1/completions", R"({"prompt": 5})", 400, "prompt must be"},
        {"POST", "/v1/completions", R"({"prompt": "1", "max_tokens": -1})", 400, "max_tokens"},
        {"POST", "/v1/completions", R"({"prompt": "1", "n": 2})", 400, "n must be 1"},
        {"POST", "/v1/completions", R"({"prompt": "1", "stream": "yes"})", 400, "stream"},
        {"POST", "/v1/completions", json{{"prompt", long_prompt}}.dump(), 400, "context is 32"},
        {"GET", "/nowhere", "", 404, "no route"},
        {"POST", "/api", "{}", 404, "no route"},
    };
    for (const auto& c : cases) {
      auto r = call(c.method, c.path, c.body);
      QVERIFY2(r, c.path);
      QVERIFY2(r->status == c.status,
               qPrintable(QString("%1 %2 %3: status %4 (%5)")
                              .arg(c.method, c.path, QString::fromStdString(c.body.substr(0, 60)))
                              .arg(r->status)
                              .arg(QString::fromStdString(r->body))));
      // Every error, /api's and the 404s too, carries OpenAI's error object (and the
      // top-level message Megatron's client reads).
      const json j = json::parse(r->body, nullptr, false);
      QVERIFY2(!j.is_discarded() && j.contains("message") && j.contains("error"), r->body.c_str());
      QCOMPARE(j["error"]["message"], j["message"]);
      QVERIFY2(j["error"]["type"].is_string() && j["error"].contains("param") &&
                   j["error"].contains("code"),
               r->body.c_str());
      QVERIFY2(j["message"].get<std::string>().find(c.says) != std::string::npos,
               qPrintable(QString("%1: %2").arg(c.says, QString::fromStdString(r->body))));
      expect_alive();
    }
  }

  // Sixteen callers at once get exactly what each gets alone (greedy and seeded sampling).
  void concurrent_requests_are_batched_without_changing_answers() {
    std::vector<std::string> bodies, alone;
    for (int i = 0; i < 16; i++) {
      json b = {{"prompts", {std::to_string(i + 1) + " " + std::to_string(2 * i + 1)}},
                {"tokens_to_generate", 3 + i % 5},
                {"random_seed", i}};
      if (i % 2) b["top_k"] = 1;
      bodies.push_back(b.dump());
    }
    for (const std::string& b : bodies) {
      auto r = call("PUT", "/api", b);
      QVERIFY(r && r->status == 200);
      alone.push_back(r->body);
    }
    std::vector<std::future<std::pair<int, std::string>>> futures;
    for (const std::string& b : bodies)
      futures.push_back(std::async(std::launch::async, [this, b] {
        auto r = call("PUT", "/api", b);
        return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
      }));
    for (size_t i = 0; i < futures.size(); i++) {
      auto [status, body] = futures[i].get();
      QCOMPARE(status, 200);
      QCOMPARE(QString::fromStdString(body), QString::fromStdString(alone[i]));
    }
  }

  // A streaming client that leaves: its sequences are cancelled within a few decoding steps
  // instead of generating max_tokens for nobody, the server's log says so, and it goes on
  // serving. A second server, on a model with a 4096-token context: 16 greedy copies of a
  // prompt that never meets EOD on this model, 4000 tokens each (several seconds of work).
  void a_streaming_client_that_leaves_is_cancelled() {
    QProcess server;
    const int port = train_and_serve(server, "long", {"--max-position-embeddings", "4096"});
    QVERIFY(port > 0);
    const json body = {{"prompt", std::vector<std::string>(16, "1 2")},
                       {"max_tokens", 4000},
                       {"temperature", 0},
                       {"stream", true}};
    const std::string first =
        lattice::testing::http_post_and_leave(port, "/v1/completions", body.dump());
    QVERIFY2(first.rfind("data: ", 0) == 0, first.c_str());
    QString log;
    QRegularExpressionMatch cancelled;
    const QRegularExpression line(
        "cmpl-1: the client left; (\\d+) sequence\\(s\\) cancelled after (\\d+) token");
    for (int waited = 0; waited < 60000 && !cancelled.hasMatch(); waited += 100) {
      server.waitForReadyRead(100);
      log += QString::fromUtf8(server.readAllStandardOutput());
      cancelled = line.match(log);
    }
    QVERIFY2(cancelled.hasMatch(), qPrintable("no cancellation in the server's log: " + log));
    QCOMPARE(cancelled.captured(1).toInt(), 16);
    QVERIFY2(cancelled.captured(2).toInt() < 16 * 4000, qPrintable(cancelled.captured(0)));
    const lattice::testing::HttpAnswer after = lattice::testing::http_call(
        port, "POST", "/v1/completions", R"({"prompt": "1 2", "max_tokens": 3})");
    QCOMPARE(after.status, 200);
    server.terminate();
    QVERIFY(server.waitForFinished(30000));
    QCOMPARE(server.exitCode(), 0);
  }

  void cleanupTestCase() {
    server_.terminate();
    QVERIFY(server_.waitForFinished(30000));
    QCOMPARE(server_.exitCode(), 0);
    QVERIFY(server_.readAllStandardOutput().contains("stopped"));
  }
};

QTEST_GUILESS_MAIN(Serve)
#include "test_serve.moc"
