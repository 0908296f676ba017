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
  int threads_http = 128;
};

constexpr const char* kUsage =
    "usage: lattice serve (--load DIR | --load-hf FILE [model flags]) [--host H] [--port P]\n\n"
    "Serves the model over HTTP: Megatron-LM's PUT /api ({\"prompts\": [...],\n"
    "\"tokens_to_generate\": N, ...}) and OpenAI's POST /v1/completions. Concurrent requests\n"
    "are batched. Under `mpirun -n T` with --tensor-model-parallel-size T, rank 0 serves.\n"
    "Stop it with Ctrl-C or SIGTERM.\n\n";

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
};

class JobQueue {
 public:
  std::future<Result<std::vector<GenerationResult>>> push(
      std::vector<GenerationRequest> r, JobTokens on_token = {},
      std::shared_ptr<std::atomic<bool>> client_left = {}, std::string id = {}) {
    auto job = std::make_shared<Job>();
    job->requests = std::move(r);
    job->on_token = std::move(on_token);
    job->client_left = std::move(client_left);
    job->id = std::move(id);
    auto f = job->done.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
    return f;
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
    return out;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Job>> jobs_;
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

// A stream=true call between the worker, which posts events as tokens come, and the HTTP
// thread, which writes them to the client.
class EventChannel {
 public:
  explicit EventChannel(CompletionStream stream) : stream_(std::move(stream)) {}
  // Worker thread.
  void token(size_t index, int32_t token, float logprob) {
    std::string e = stream_.token(index, token, logprob);
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
  CompletionStream& stream() { return stream_; }

 private:
  CompletionStream stream_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::string events_;
};

// Answers a stream=true call: events while the worker generates, then each choice's end. A
// client that leaves (its connection is no longer writable, or a write fails) has its
// unfinished sequences cancelled, so the batch does not go on generating for nobody.
void stream_reply(httplib::Response& res, JobQueue& queue, const ApiCall& call,
                  std::shared_ptr<EventChannel> channel, const std::string& id) {
  auto left = std::make_shared<std::atomic<bool>>(false);
  auto results = std::make_shared<std::shared_future<Result<std::vector<GenerationResult>>>>(
      queue
          .push(
              call.requests,
              [channel](size_t i, int32_t token, float lp) { channel->token(i, token, lp); }, left,
              id)
          .share());
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [channel, results, left](size_t, httplib::DataSink& sink) {
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
        const std::string end = r ? channel->stream().finish(r.value())
                                  : CompletionStream::error(generation_error(r.status()));
        if (!sink.write(end.data(), end.size())) return false;
        sink.done();
        return true;
      });
}

// Rank 0's worker loop: batches from the queue until a stop signal.
void serve_batches(Comm& comm, Generator& gen, JobQueue& queue, size_t max_prompts) {
  while (!g_stop) {
    std::vector<std::shared_ptr<Job>> jobs =
        queue.take(max_prompts, std::chrono::milliseconds(100));
    if (jobs.empty()) continue;
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
    Generator::Cancel cancel;
    if (streaming) {
      on_token = [&](int index, int32_t token, float logprob) {
        const size_t j = job_of(index);
        if (jobs[j]->on_token) jobs[j]->on_token(index - first[j], token, logprob);
      };
      cancel = [&](int index) {
        const Job& job = *jobs[job_of(index)];
        return job.client_left && job.client_left->load();
      };
    }
    Result<std::vector<GenerationResult>> results = gen.generate(batch, on_token, cancel);
    if (results)
      for (size_t j = 0; j < jobs.size(); j++) {
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
    size_t at = 0;
    for (const auto& j : jobs) {
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
      {"http-threads", "connections served at once", &f.threads_http},
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
  if (f.threads_http < 1) errors.push_back("--http-threads must be 1 or more");
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

  JobQueue queue;
  httplib::Server server;
  const int http_threads = f.threads_http;
  server.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  // Clients wait for a whole batch to generate: generous timeouts, and keep-alive connections
  // that are not closed every few requests (cpp-httplib's default is 5 requests, 5 s).
  server.set_keep_alive_max_count(100000);
  server.set_keep_alive_timeout(120);
  server.set_read_timeout(120, 0);
  server.set_write_timeout(120, 0);
  std::atomic<uint64_t> counter{0};
  server.Put("/api", [&](const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader) {
    const std::optional<std::string> body = read_body(req, reader, res, kMaxBodyBytes);
    if (!body) return;
    ApiCall call = parse_megatron_api(*body, tok, gen, fresh_seed());
    if (!call.ok) return reply_error(res, call.error);
    Result<std::vector<GenerationResult>> r = queue.push(call.requests).get();
    if (!r) return reply_error(res, generation_error(r.status()));
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
      return stream_reply(
          res, queue, call,
          std::make_shared<EventChannel>(CompletionStream(call, tok, gen.eod(), id, created)), id);
    Result<std::vector<GenerationResult>> r = queue.push(call.requests).get();
    if (!r) return reply_error(res, generation_error(r.status()));
    reply_json(res, 200, completions_response(call, *r, tok, id, created));
  });
  HttpGuardOptions guards;
  guards.max_body = kMaxBodyBytes;
  guards.write_timeout_s = 120;
  guards.stopping = [] { return g_stop.load(); };
  guards.not_found = [](const httplib::Request& req) {
    return ApiError{404,
                    "no route " + req.method + " " + req.path +
                        "; the API is PUT /api and POST /v1/completions",
                    "", "invalid_request_error", "unknown_url"};
  };
  install_http_guards(server, std::move(guards));
  int port = f.port;
  if (port == 0) {
    port = server.bind_to_any_port(f.host);
  } else if (!server.bind_to_port(f.host, port)) {
    port = -1;
  }
  if (port < 0) {
    print_error("serve", "cannot listen on " + f.host + ":" + std::to_string(f.port) +
                             " (--host / --port: in use, or not an address of this machine)");
    g_stop = true;
    serve_batches(comm, gen, queue, kMaxPrompts);  // releases the other ranks
    setup.reset();
    finalize_comm();
    return 1;
  }
  std::thread http([&] { server.listen_after_bind(); });
  const ModelConfig& m = gen.config();
  std::printf(
      "serving %d layers, hidden %d, vocab %d (%s) on http://%s:%d  (PUT /api, POST "
      "/v1/completions; TP %d)\n",
      m.num_layers, m.hidden_size, m.vocab_size, tok.type().c_str(), f.host.c_str(), port,
      comm.size());
  std::fflush(stdout);
  serve_batches(comm, gen, queue, std::max<size_t>(kMaxPrompts, f.max_batch_size));
  server.stop();
  http.join();
  std::printf("stopped\n");
  setup.reset();
  finalize_comm();
  return 0;
}

}  // namespace lattice::cli
