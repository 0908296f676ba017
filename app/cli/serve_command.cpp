// lattice serve: the model behind HTTP (serve_api.h). Rank 0 runs the HTTP server on a
// background thread pool; its main thread is the one generation worker: it takes every request
// waiting in the queue, runs them as one batch (sampling settings are per sequence), and
// hands each caller its results. Under tensor parallelism the other ranks loop on
// broadcast_requests and generate alongside; an empty batch tells them to stop. All MPI calls
// stay on the main thread.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "commands.h"
#include "infer_setup.h"
#include "serve_api.h"
#include "serve_chat.h"
#include "serve_connections.h"
#include "serve_http.h"

namespace lattice::cli {

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}

struct ServeFlags {
  std::string host = "127.0.0.1";
  int port = 5000;
  int max_batch_size = 64;
  int max_queued_prompts = 1024;
  int shutdown_timeout_s = 30;
  std::string chat_template;  // --chat-template: instead of the tokenizer's
  ConnectionLimits connections;
};

constexpr const char* kUsage =
    "usage: lattice serve (--load DIR | --load-hf PATH [model flags]) [--host H] [--port P]\n\n"
    "Serves the model over HTTP: Megatron-LM's PUT /api ({\"prompts\": [...],\n"
    "\"tokens_to_generate\": N, ...}), OpenAI's POST /v1/completions and POST\n"
    "/v1/chat/completions (rendered with the tokenizer's chat template). Concurrent requests\n"
    "are batched. GET /health and GET /v1/models answer load balancers and clients. Under\n"
    "`mpirun -n T` with --tensor-model-parallel-size T, rank 0 serves.\n\n"
    "Past --max-connections or --max-queued-prompts a client hears 503 with Retry-After. Ctrl-C\n"
    "or SIGTERM stops listening, finishes the queued requests (at most --shutdown-timeout\n"
    "seconds, then cancels the rest with 503) and exits.\n\n";

// Called on the worker thread with each new token of the job's prompt `index` (streaming).
using JobTokens = std::function<void(size_t index, int32_t token, float logprob)>;

// One HTTP call's prompts, waiting for the worker.
struct Job {
  std::vector<GenerationRequest> requests;
  JobTokens on_token;  // empty unless the call streams
  // Set by the HTTP thread when a streaming client has gone: the job's unfinished sequences
  // are cancelled at the next decoding step (null: the call does not stream).
  std::shared_ptr<std::atomic<bool>> client_left;
  std::string id;  // the completion's id, for the log line of a cancelled stream
  std::promise<Result<std::vector<GenerationResult>>> done;
  // Set by the worker before `done` when the server stopped before the job was served.
  std::atomic<bool> cut_by_shutdown{false};
};

// What push() gives the HTTP thread: the job's future, or why it was not queued.
struct Ticket {
  std::optional<ApiError> refused;
  std::shared_ptr<Job> job;
  std::future<Result<std::vector<GenerationResult>>> result;
};

// The jobs waiting for the worker: at most `max_prompts` prompts, none once closed.
class JobQueue {
 public:
  explicit JobQueue(size_t max_prompts) : max_prompts_(max_prompts) {}
  Ticket push(std::vector<GenerationRequest> r, JobTokens on_token = {},
              std::shared_ptr<std::atomic<bool>> client_left = {}, std::string id = {}) {
    Ticket t;
    auto job = std::make_shared<Job>();
    job->requests = std::move(r);
    job->on_token = std::move(on_token);
    job->client_left = std::move(client_left);
    job->id = std::move(id);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_) {
        t.refused = stopping_error();
        return t;
      }
      if (prompts_ + job->requests.size() > max_prompts_) {
        t.refused = ApiError{503,
                             "the server has " + std::to_string(prompts_) +
                                 " prompts waiting, its limit (--max-queued-prompts " +
                                 std::to_string(max_prompts_) + "); retry after 1 s",
                             "", "server_error", "server_busy"};
        return t;
      }
      prompts_ += job->requests.size();
      t.result = job->done.get_future();
      t.job = job;
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
    return t;
  }
  // From now on push() refuses; the jobs already queued stay to be taken.
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  size_t prompts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return prompts_;
  }
  // Prompts of the batch being generated (taken, not yet answered).
  size_t generating() {
    std::lock_guard<std::mutex> lock(mutex_);
    return generating_;
  }
  // The worker answered the jobs it took last.
  void answered() {
    std::lock_guard<std::mutex> lock(mutex_);
    generating_ = 0;
  }
  static ApiError stopping_error() {
    return ApiError{503, "the server is stopping (SIGTERM or Ctrl-C) and takes no new requests", "",
                    "server_error", "server_stopping"};
  }
  // Waits up to `wait` for work; takes waiting jobs while their prompts fit `max_prompts`
  // (always at least one job).
  std::vector<std::shared_ptr<Job>> take(size_t max_prompts, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait_for(lock, wait, [&] { return !jobs_.empty(); });
    std::vector<std::shared_ptr<Job>> out;
    size_t prompts = 0;
    while (!jobs_.empty() &&
           (out.empty() || prompts + jobs_.front()->requests.size() <= max_prompts)) {
      prompts += jobs_.front()->requests.size();
      out.push_back(std::move(jobs_.front()));
      jobs_.pop_front();
    }
    prompts_ -= prompts;
    generating_ = prompts;
    return out;
  }

 private:
  const size_t max_prompts_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Job>> jobs_;
  size_t prompts_ = 0;     // in jobs_
  size_t generating_ = 0;  // taken by the worker, not yet answered
  bool closed_ = false;
};

// Seeds for requests that name none: fresh per call, as Megatron's random_seed -1.
uint64_t fresh_seed() {
  static std::mutex m;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(m);
  return rng() >> 1;
}

// A generation that failed after its request was accepted: the server's fault, not the
// client's.
ApiError generation_error(const Status& s) {
  return ApiError{500, "generation failed: " + s.message(), "", "server_error", ""};
}

// The answer to a job that failed: the server's fault, or cut short by its stopping.
ApiError job_error(const Job& job, const Status& s, int shutdown_timeout_s) {
  if (!job.cut_by_shutdown) return generation_error(s);
  return ApiError{503,
                  "the server stopped before this request was served (it finishes queued "
                  "requests for --shutdown-timeout " +
                      std::to_string(shutdown_timeout_s) + " s after SIGTERM)",
                  "", "server_error", "server_stopping"};
}

// Answers a refusal: 503s say when to come back, and a stopping server closes the connection.
void reply_refusal(httplib::Response& res, const ApiError& e) {
  const bool stopping = e.code == "server_stopping";
  reply_error(res, e, stopping);
  if (!stopping) res.set_header("Retry-After", "1");
}

// A stream=true call between the worker, which posts events as tokens come, and the HTTP
// thread, which writes them to the client.
class EventChannel {
 public:
  explicit EventChannel(std::unique_ptr<EventStream> stream) : stream_(std::move(stream)) {}
  // Worker thread.
  void token(size_t index, int32_t token, float logprob) {
    std::string e = stream_->token(index, token, logprob);
    if (e.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_ += e;
    }
    ready_.notify_one();
  }
  // HTTP thread: what was posted, waiting up to `wait` for something.
  std::string take(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait_for(lock, wait, [&] { return !events_.empty(); });
    return std::exchange(events_, {});
  }
  // HTTP thread, once the results are in (every token() happened before).
  EventStream& stream() { return *stream_; }

 private:
  std::unique_ptr<EventStream> stream_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::string events_;
};

// Answers a stream=true call: events while the worker generates, then each choice's end. A
// client that leaves (its connection is no longer writable, or a write fails) has its
// unfinished sequences cancelled, so the batch does not go on generating for nobody.
void stream_reply(httplib::Response& res, JobQueue& queue, const ApiCall& call,
                  std::shared_ptr<EventChannel> channel, const std::string& id,
                  int shutdown_timeout_s) {
  auto left = std::make_shared<std::atomic<bool>>(false);
  Ticket t = queue.push(
      call.requests, [channel](size_t i, int32_t token, float lp) { channel->token(i, token, lp); },
      left, id);
  if (t.refused) return reply_refusal(res, *t.refused);
  auto results =
      std::make_shared<std::shared_future<Result<std::vector<GenerationResult>>>>(t.result.share());
  std::shared_ptr<Job> job = t.job;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [channel, results, left, job, shutdown_timeout_s](size_t, httplib::DataSink& sink) {
        // Ready first: every event was posted before the results were set.
        const bool ready = results->wait_for(std::chrono::seconds(0)) == std::future_status::ready;
        const std::string events = channel->take(std::chrono::milliseconds(ready ? 0 : 100));
        if ((sink.is_writable && !sink.is_writable()) ||
            (!events.empty() && !sink.write(events.data(), events.size()))) {
          left->store(true);
          return false;
        }
        if (!ready) return true;
        const Result<std::vector<GenerationResult>>& r = results->get();
        const std::string end =
            r ? channel->stream().finish(r.value())
              : CompletionStream::error(job_error(*job, r.status(), shutdown_timeout_s));
        if (!sink.write(end.data(), end.size())) return false;
        sink.done();
        return true;
      });
}

// How rank 0's worker stops (SIGTERM or Ctrl-C): `on_stop` runs once (the HTTP side stops
// listening and closes idle connections), the queue takes no new jobs, the queued ones are
// served for `timeout_s`; then what is generating is cancelled and what waits is answered 503.
struct Shutdown {
  std::function<void()> on_stop;
  int timeout_s = 30;
};

// Rank 0's worker loop: batches from the queue until a stop signal, then until the queue is
// empty (Shutdown).
void serve_batches(Comm& comm, Generator& gen, JobQueue& queue, size_t max_prompts,
                   const Shutdown& shutdown) {
  using Clock = std::chrono::steady_clock;
  bool stopping = false;
  Clock::time_point give_up = Clock::time_point::max();
  auto notice_stop = [&] {
    if (!g_stop || stopping) return;
    stopping = true;
    give_up = Clock::now() + std::chrono::seconds(shutdown.timeout_s);
    queue.close();
    if (shutdown.on_stop) shutdown.on_stop();
    std::printf("stopping: no new requests; finishing the queued ones within %d s\n",
                shutdown.timeout_s);
    std::fflush(stdout);
  };
  auto cut = [&] {
    notice_stop();
    return stopping && Clock::now() >= give_up;
  };
  for (;;) {
    notice_stop();
    std::vector<std::shared_ptr<Job>> jobs =
        queue.take(max_prompts, std::chrono::milliseconds(100));
    if (jobs.empty()) {
      if (stopping) break;
      continue;
    }
    if (cut()) {
      queue.answered();
      for (const auto& j : jobs) {
        j->cut_by_shutdown = true;
        j->done.set_value(Status::internal("stopped"));
      }
      continue;
    }
    std::vector<GenerationRequest> batch;
    std::vector<size_t> first;  // each job's first sequence in the batch
    bool streaming = false;
    for (const auto& j : jobs) {
      first.push_back(batch.size());
      batch.insert(batch.end(), j->requests.begin(), j->requests.end());
      streaming = streaming || bool(j->on_token);
    }
    if (comm.size() > 1)
      if (Status s = broadcast_requests(comm, batch, 0); !s) comm.abort(s.message(), 1);
    auto job_of = [&](int index) {
      const size_t i = static_cast<size_t>(index);
      return static_cast<size_t>(std::upper_bound(first.begin(), first.end(), i) - first.begin() -
                                 1);
    };
    Generator::OnToken on_token;
    if (streaming)
      on_token = [&](int index, int32_t token, float logprob) {
        const size_t j = job_of(index);
        if (jobs[j]->on_token) jobs[j]->on_token(index - first[j], token, logprob);
      };
    bool cut_short = false;  // the shutdown's time ran out during this batch
    const Generator::Cancel cancel = [&](int index) {
      const Job& job = *jobs[job_of(index)];
      if (job.client_left && job.client_left->load()) return true;
      cut_short = cut_short || cut();
      return cut_short;
    };
    Result<std::vector<GenerationResult>> results = gen.generate(batch, on_token, cancel);
    // A job whose sequences the shutdown cancelled (not its client) gets 503, not a part.
    auto was_cut = [&](size_t j) {
      if (!cut_short || !results || (jobs[j]->client_left && jobs[j]->client_left->load()))
        return false;
      for (size_t i = first[j]; i < first[j] + jobs[j]->requests.size(); i++)
        if ((*results)[i].finish == FinishReason::kCancelled) return true;
      return false;
    };
    if (results)
      for (size_t j = 0; j < jobs.size(); j++) {
        if (!jobs[j]->client_left || !jobs[j]->client_left->load()) continue;
        int ended = 0, tokens = 0;
        for (size_t i = first[j]; i < first[j] + jobs[j]->requests.size(); i++)
          if ((*results)[i].finish == FinishReason::kCancelled) {
            ended++;
            tokens += static_cast<int>((*results)[i].tokens.size());
          }
        if (ended > 0) {
          std::printf("%s: the client left; %d sequence(s) cancelled after %d token(s)\n",
                      jobs[j]->id.c_str(), ended, tokens);
          std::fflush(stdout);
        }
      }
    queue.answered();  // before the answers: a client never sees its prompts counted twice
    size_t at = 0;
    for (size_t k = 0; k < jobs.size(); k++) {
      const std::shared_ptr<Job>& j = jobs[k];
      if (was_cut(k)) {
        at += j->requests.size();
        j->cut_by_shutdown = true;
        j->done.set_value(Status::internal("stopped"));
        continue;
      }
      if (!results) {
        j->done.set_value(results.status());
        continue;
      }
      std::vector<GenerationResult> mine(
          std::make_move_iterator(results->begin() + at),
          std::make_move_iterator(results->begin() + at + j->requests.size()));
      at += j->requests.size();
      j->done.set_value(std::move(mine));
    }
  }
  if (comm.size() > 1) {
    std::vector<GenerationRequest> none;
    (void)broadcast_requests(comm, none, 0);
  }
}

// The other tensor-parallel ranks: generate whatever rank 0 sends until it sends nothing.
void follow_batches(Comm& comm, Generator& gen) {
  for (;;) {
    std::vector<GenerationRequest> batch;
    if (Status s = broadcast_requests(comm, batch, 0); !s) comm.abort(s.message(), 1);
    if (batch.empty()) return;
    (void)gen.generate(batch);
  }
}

}  // namespace

int serve_command(const std::vector<std::string>& args) {
  ServeFlags f;
  const std::vector<FlagSpec> specs = {
      {"host", "address to listen on", &f.host},
      {"port", "port to listen on", &f.port},
      {"max-batch-size", "sequences decoded together", &f.max_batch_size},
      {"max-queued-prompts", "prompts waiting for the model; past it 503", &f.max_queued_prompts},
      {"max-connections", "connections served at once; past it 503",
       &f.connections.max_connections},
      {"http-threads", "the former name of --max-connections", &f.connections.max_connections},
      {"listen-backlog", "connections the kernel holds before they are served",
       &f.connections.backlog},
      {"header-timeout", "seconds a request's line and headers may take to arrive",
       &f.connections.head_timeout_s},
      {"body-timeout", "seconds a request's body may take to arrive",
       &f.connections.body_timeout_s},
      {"keep-alive-timeout", "seconds an idle keep-alive connection is kept",
       &f.connections.idle_timeout_s},
      {"shutdown-timeout", "seconds to finish queued requests after SIGTERM",
       &f.shutdown_timeout_s},
      {"chat-template", "chat template for /v1/chat/completions instead of the tokenizer's",
       &f.chat_template},
  };
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << kUsage << flags_help(specs) << "\n" << kModelFlagsHelp;
      return 0;
    }
  std::vector<std::string> rest;
  std::vector<std::string> errors = take_flags(args, specs, {}, rest);
  if (f.port < 0 || f.port > 65535) errors.push_back("--port must lie in [0, 65535]");
  if (f.max_batch_size < 1) errors.push_back("--max-batch-size must be 1 or more");
  if (f.max_queued_prompts < 1) errors.push_back("--max-queued-prompts must be 1 or more");
  if (f.shutdown_timeout_s < 0) errors.push_back("--shutdown-timeout must be 0 or more");
  if (errors.empty())
    if (std::string e = check_connection_limits(f.connections); !e.empty()) errors.push_back(e);
  if (!errors.empty()) {
    std::string all;
    for (const std::string& e : errors) all += (all.empty() ? "" : "\n") + e;
    print_error("serve", all);
    return 2;
  }
  int code = 0;
  std::unique_ptr<InferenceSetup> setup = setup_inference("serve", rest, f.max_batch_size, &code);
  if (!setup) {
    finalize_comm();
    return code;
  }
  Comm& comm = *setup->world;
  Generator& gen = *setup->generator;
  const Tokenizer& tok = *setup->tokenizer;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (!setup->rank0()) {
    follow_batches(comm, gen);
    setup.reset();
    finalize_comm();
    return 0;
  }

  JobQueue queue(static_cast<size_t>(f.max_queued_prompts));
  // The served tokenizer's chat template, for /v1/chat/completions. Without one the server
  // still serves the other routes; chat requests hear why.
  const Result<ChatPrompter> prompter =
      chat_prompter_for(setup->tokenizer_options, tok, f.chat_template, &gen.config());
  if (!prompter)
    std::fprintf(stderr, "lattice serve: /v1/chat/completions is off: %s\n",
                 prompter.status().message().c_str());
  // Connections, their limits and clocks: serve_connections.h. Keep-alive connections are not
  // closed every few requests (cpp-httplib's default is 5 requests); a client slower than this
  // to read an answer is gone.
  ServeServer server(f.connections);
  server.set_keep_alive_max_count(100000);
  server.set_write_timeout(120, 0);
  std::atomic<uint64_t> counter{0};
  const int shutdown_timeout_s = f.shutdown_timeout_s;
  // Waits for a queued job; its results, or nothing when `res` holds the error.
  auto wait_for = [&](Ticket& t,
                      httplib::Response& res) -> std::optional<std::vector<GenerationResult>> {
    if (t.refused) {
      reply_refusal(res, *t.refused);
      return std::nullopt;
    }
    Result<std::vector<GenerationResult>> r = t.result.get();
    if (!r) {
      reply_error(res, job_error(*t.job, r.status(), shutdown_timeout_s));
      return std::nullopt;
    }
    return std::move(r.value());
  };
  server.Put("/api", [&](const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader) {
    const std::optional<std::string> body = read_body(req, reader, res, kMaxBodyBytes);
    if (!body) return;
    ApiCall call = parse_megatron_api(*body, tok, gen, fresh_seed());
    if (!call.ok) return reply_error(res, call.error);
    Ticket t = queue.push(call.requests);
    if (std::optional<std::vector<GenerationResult>> r = wait_for(t, res))
      reply_json(res, 200, megatron_response(call, *r, tok));
  });
  server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader) {
    const std::optional<std::string> body = read_body(req, reader, res, kMaxBodyBytes);
    if (!body) return;
    ApiCall call = parse_completions(*body, tok, gen, fresh_seed());
    if (!call.ok) return reply_error(res, call.error);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    const std::string id = "cmpl-" + std::to_string(++counter);
    if (call.stream)
      return stream_reply(res, queue, call,
                          std::make_shared<EventChannel>(std::make_unique<CompletionStream>(
                              call, tok, gen.eod(), id, created)),
                          id, shutdown_timeout_s);
    Ticket t = queue.push(call.requests);
    if (std::optional<std::vector<GenerationResult>> r = wait_for(t, res))
      reply_json(res, 200, completions_response(call, *r, tok, id, created));
  });
  server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res,
                                          const httplib::ContentReader& reader) {
    const std::optional<std::string> body = read_body(req, reader, res, kMaxBodyBytes);
    if (!body) return;
    if (!prompter)
      return reply_error(res, ApiError{400,
                                       "this server has no chat template: " +
                                           prompter.status().message() + " (--chat-template)",
                                       "messages", "invalid_request_error", ""});
    ApiCall call = parse_chat_completions(*body, gen, fresh_seed(), prompter.value());
    if (!call.ok) return reply_error(res, call.error);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    const std::string id = "chatcmpl-" + std::to_string(++counter);
    if (call.stream)
      return stream_reply(res, queue, call,
                          std::make_shared<EventChannel>(
                              std::make_unique<ChatStream>(call, tok, gen.eod(), id, created)),
                          id, shutdown_timeout_s);
    Ticket t = queue.push(call.requests);
    if (std::optional<std::vector<GenerationResult>> r = wait_for(t, res))
      reply_json(res, 200, chat_response(call, *r, tok, id, created));
  });
  const int64_t started = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  const ModelConfig& m = gen.config();
  // For load balancers: 200 while requests are taken, 503 once the server is stopping.
  server.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    const bool stopping = g_stop.load();
    reply_json(res, stopping ? 503 : 200,
               health_body(stopping, queue.prompts(), queue.generating(), server.connections()));
  });
  server.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    reply_json(res, 200, models_body(started, m.max_positions()));
  });
  HttpGuardOptions guards;
  guards.max_body = kMaxBodyBytes;
  guards.write_timeout_s = 120;
  guards.stopping = [] { return g_stop.load(); };
  guards.not_found = [](const httplib::Request& req) {
    return ApiError{404,
                    "no route " + req.method + " " + req.path +
                        "; the API is PUT /api, POST /v1/completions, POST "
                        "/v1/chat/completions, GET /v1/models and "
                        "GET /health",
                    "", "invalid_request_error", "unknown_url"};
  };
  install_http_guards(server, std::move(guards));
  int port = f.port;
  if (port == 0) {
    port = server.bind_to_any_port(f.host);
  } else if (!server.bind_to_port(f.host, port)) {
    port = -1;
  }
  if (port >= 0 && !server.apply_backlog()) {
    print_error("serve", "cannot set the listen backlog to " +
                             std::to_string(f.connections.backlog) + " (--listen-backlog)");
    server.stop();
    port = -1;
  }
  if (port < 0) {
    print_error("serve", "cannot listen on " + f.host + ":" + std::to_string(f.port) +
                             " (--host / --port: in use, or not an address of this machine)");
    g_stop = true;
    serve_batches(comm, gen, queue, kMaxPrompts, {});  // releases the other ranks
    setup.reset();
    finalize_comm();
    return 1;
  }
  std::thread http([&] { server.listen_after_bind(); });
  std::printf(
      "serving %d layers, hidden %d, vocab %d (%s) on http://%s:%d  (PUT /api, POST "
      "/v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health; TP %d)\n",
      m.num_layers, m.hidden_size, m.vocab_size, tok.type().c_str(), f.host.c_str(), port,
      comm.size());
  std::fflush(stdout);
  Shutdown shutdown;
  shutdown.timeout_s = f.shutdown_timeout_s;
  shutdown.on_stop = [&] {
    server.stop();  // the listening socket closes; connections finish their requests
    server.close_idle();
  };
  serve_batches(comm, gen, queue, std::max<size_t>(kMaxPrompts, f.max_batch_size), shutdown);
  server.stop();
  server.close_idle();
  http.join();
  std::printf("stopped\n");
  setup.reset();
  finalize_comm();
  return 0;
}

}  // namespace lattice::cli
