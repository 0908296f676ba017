// lattice train | eval: the training loop with Megatron's flags, and the run around it that
// `lattice demo` shares (run_training).
#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "commands.h"
#include "device/backends.h"
#include "lattice/comm.h"
#include "lattice/cpu_gemm.h"
#include "lattice/cpu_isa.h"
#include "lattice/data.h"
#include "lattice/layout.h"
#include "lattice/run_record.h"
#include "lattice/train.h"
#include "lattice/train_options.h"
#include "parallel/staged_comm.h"
#include "train_rollback.h"

namespace lattice::cli {

namespace {

// Note [stopping under mpirun]. A stop signal (SIGINT, SIGTERM, SIGUSR1) makes every rank stop
// at the next iteration boundary, save (with --save) and record the run as killed. Open MPI's
// mpirun forwards SIGUSR1 to every rank at once. On SIGINT or SIGTERM it instead sends the ranks
// SIGCONT, sleeps odls_base_sigkill_timeout seconds (1 by default), sends SIGTERM, sleeps
// again, then SIGKILL, and reads none of their output meanwhile: a rank that prints would block
// on its full stdout pipe and never reach the save. So under mpirun the handler makes stdout
// and stderr non-blocking (output that does not fit is dropped; the run store keeps it all).
// Once stopped, the ranks exit 0 under mpirun (130 elsewhere): mpirun takes a rank's non-zero
// exit for a failure, prints that it aborted the job and waits odls_base_sigkill_timeout twice
// before it ends, 60 s with the 30 s the launch library sets, for ranks already gone.
bool g_under_mpirun = false;

void on_signal(int) {
  const int saved_errno = errno;
  request_stop();
  if (g_under_mpirun)
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      const int flags = fcntl(fd, F_GETFL);  // async-signal-safe
      if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    }
  errno = saved_errno;
}

// Ranks see mpirun's MCA settings in their environment; srun and direct launches set no
// orte_hnp_uri. With mpirun's default kill timeout a SIGTERM or Ctrl-C leaves the ranks one
// second, too little for most saves.
std::string mpirun_kill_timeout_note(int world_size) {
  if (world_size < 2 || !g_under_mpirun) return {};
  const char* timeout = std::getenv("OMPI_MCA_odls_base_sigkill_timeout");
  if (timeout != nullptr && std::atoi(timeout) >= 10) return {};
  return "note: to stop this job with a last checkpoint, send mpirun SIGUSR1 (kill -USR1 " +
         std::to_string(getppid()) +
         "; it reaches every rank at once); SIGTERM and Ctrl-C give the ranks " +
         std::string(timeout ? timeout : "1") +
         " s unless mpirun has --mca odls_base_sigkill_timeout 30";
}

// The model's parameter count as the run record states it (a file tokenizer sets the vocabulary).
int64_t parameter_count(const TrainOptions& o) {
  ModelConfig m = o.model;
  if (o.tokenizer.type != "NullTokenizer")
    if (Result<std::unique_ptr<Tokenizer>> t = make_tokenizer(o.tokenizer); t)
      m.vocab_size = (*t)->vocab_size();
  return m.num_parameters();
}

// The settings as the run store records them: checkpoint directories made absolute, since
// their readers (the Studio's Playground, `lattice generate --load`) do not share this
// process's working directory, and --cpu-isa as the instruction set the kernels run (auto
// resolved: the record says which copy of the kernels produced its figures). The run itself
// uses the settings as given.
TrainOptions recorded(TrainOptions o) {
  o.cpu_isa = kernels::cpu_isa_name(kernels::cpu_isa());
  for (std::string* path : {&o.save, &o.load}) {
    std::error_code ec;
    if (!path->empty()) {
      const std::filesystem::path absolute = std::filesystem::absolute(*path, ec);
      if (!ec) *path = absolute.lexically_normal().string();
    }
  }
  return o;
}

// `--device cuda|auto` in the CPU-only `lattice`: replace this process by lattice-gpu from the
// same directory with the same arguments (docs/gpu.md#how-lattice-train-reaches-the-gpu).
// Before MPI is initialised, so under mpirun each rank becomes a lattice-gpu rank in place.
// Returns only when there is no lattice-gpu: 2 with a message when `required` (--device cuda),
// 0 (train on the CPU) for --device auto.
int exec_gpu_trainer(const std::vector<std::string>& args, bool required) {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  dir = dir.substr(0, dir.find_last_of('/') + 1);
  const std::string gpu = dir + "lattice-gpu";
  if (!dir.empty() && access(gpu.c_str(), X_OK) == 0) {
    std::vector<std::string> argv_strings = {gpu, "train"};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(gpu.c_str(), argv.data());
    print_error("train", "--device: could not start " + gpu + ": " + std::strerror(errno));
    return 1;
  }
  if (!required) return 0;
  print_error("train", "--device cuda: " + gpu +
                           " not found; this build has no GPU trainer (configure with "
                           "-DLATTICE_WITH_CUDA=ON where nvcc is installed; docs/gpu.md)");
  return 2;
}

}  // namespace

std::string join_command_line(const std::string& command, const std::vector<std::string>& args) {
  std::string line = "lattice " + command;
  for (const std::string& a : args) line += " " + a;
  return line;
}

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

int run_training(const std::string& command, Result<TrainOptions> options,
                 const std::string& command_line, const std::function<void()>& after) {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    print_error(command, world.status().message());
    return 2;
  }
  Comm& comm = **world;
  const bool rank0 = comm.rank() == 0;
  auto finish = [&](int code) {
    finalize_comm();
    return code;
  };
  if (!options) {
    if (rank0) print_error(command, options.status().message());
    return finish(2);
  }
  *options = with_default_global_batch(*options, comm.size());
  if (Result<ParallelLayout> layout = make_layout(*options, comm.size()); !layout) {
    if (rank0) print_error(command, layout.status().message());
    return finish(2);
  }
  if (std::string error = kernels::select_cpu_isa(options->cpu_isa); !error.empty()) {
    if (rank0) print_error(command, error);
    return finish(2);
  }
  if (std::string error = kernels::cpu_gemm_env_error(); !error.empty()) {  // LATTICE_CPU_GEMM
    if (rank0) print_error(command, error);
    return finish(2);
  }
  if (Result<bool> staged = device_comm_through_host(); !staged) {  // LATTICE_DEVICE_COMM
    if (rank0) print_error(command, staged.status().message());
    return finish(2);
  }
  char timeout[96];
  std::snprintf(timeout, sizeof timeout, "--distributed-timeout-minutes %g",
                options->distributed_timeout_minutes);
  set_comm_timeout(options->distributed_timeout_minutes * 60, timeout);
  g_under_mpirun = std::getenv("OMPI_MCA_orte_hnp_uri") != nullptr;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGUSR1, on_signal);
  const bool recording = !options->no_db && options->db != "none";
  const std::string db = options->db.empty() ? default_run_db() : options->db;
  const std::string first_name = options->run_name.empty() ? default_run_name() : options->run_name;
  std::string name = first_name, segment_line = command_line;
  // One pass per run segment: a single one unless --on-spike rollback sends the run back to a
  // checkpoint (Note [rollback]); each segment is a run of its own in the store, its lineage
  // continuing the one before.
  for (int rollbacks = 0;; rollbacks++) {
    std::unique_ptr<RunRecorder> recorder;
    Status opened = Status::ok();
    if (rank0 && recording) {
      RecorderOptions how;
      how.journal_mode = options->db_journal_mode;
      how.heartbeat_seconds = options->db_heartbeat_interval;
      how.required = options->db_required;
      how.report = [command](const std::string& line) { print_error(command, line); };
      // The checkpoint the trainer will load (the same lookup; its errors are the trainer's to
      // report), so that the record names the run it continues. --finetune starts afresh.
      if (!options->load.empty() && !options->finetune)
        if (Result<CheckpointRef> ref = find_checkpoint(options->load, options->ckpt_step); ref) {
          how.resumed_from = ref->path;
          how.resumed_step = ref->iteration;
        }
      Result<std::unique_ptr<RunRecorder>> r = RunRecorder::open(
          db, name, options->tags, segment_line, train_options_json(recorded(*options)),
          parameter_count(*options), comm.size(), options->model.tensor_model_parallel_size,
          options->parallel.pipeline_model_parallel_size,
          comm.size() / (options->model.tensor_model_parallel_size *
                         options->parallel.pipeline_model_parallel_size),
          std::move(how));
      if (r)
        recorder = std::move(*r);
      else
        opened = r.status();
    }
    // A rank that ends the job (a failure, a hung or dead peer) records why on rank 0 first.
    struct AbortHook {
      explicit AbortHook(RunRecorder* r) {
        if (r) set_abort_hook([r](const std::string& message) { r->fail(message); });
      }
      ~AbortHook() { set_abort_hook({}); }
    } abort_hook(recorder.get());
    // Every rank learns whether rank 0 could open the record, so that its failure stops every
    // rank here instead of leaving the others in the job's first collective.
    int failed = opened.is_ok() ? 0 : 1;
    if (comm.size() > 1 && !comm.all_reduce(&failed, 1, DType::kInt32, ReduceOp::kMax).is_ok())
      comm.abort("could not start the job", 1);
    if (failed) {
      if (rank0) print_error(command, opened.message());
      return finish(2);
    }
    ConsoleSink console(std::cout, options->log_interval, options->profile, options->log_memory,
                        options->timing_log_level);
    MetricsSink silent;
    std::vector<MetricsSink*> sinks;
    if (rank0) {
      if (recorder)
        console.on_message(
            "recording run " + name + " in " + db +
            (recorder->lineage_note().empty() ? "" : "; " + recorder->lineage_note()));
      else
        console.on_message(std::string("not recording this run (") +
                           (options->no_db ? "--no-db" : "--db none") + ")");
      if (const std::string note = mpirun_kill_timeout_note(comm.size()); !note.empty())
        console.on_message(note);
      sinks = {&console};
      if (recorder) sinks.push_back(recorder.get());
    }
    TeeSink tee(sinks);
    Result<TrainSummary> result =
        train(*options, comm, rank0 ? static_cast<MetricsSink&>(tee) : silent);
    // --db-required: a run database that cannot be written stopped training as a signal does
    // (Note [recording through a full disk] in lattice/run_record.h).
    const bool store_stopped = recorder && recorder->stopped_training();
    if (!result) {
      if (recorder) {
        if (store_stopped)
          recorder->fail("stopped because the run database could not be written (--db-required)");
        else if (stop_requested())
          recorder->killed();
        else
          recorder->fail(result.status().message());
      }
      if (stop_requested()) {
        // Every rank stopped at the same iteration; none may exit (non-zero, which makes mpirun
        // end the others) before rank 0 has marked the run. Rank 0 tells them why they stopped.
        int why = store_stopped ? 1 : 0;
        if (comm.size() > 1) (void)comm.all_reduce(&why, 1, DType::kInt32, ReduceOp::kMax);
        if (why == 1) {
          if (rank0)
            print_error(command,
                        "stopped: the run database " + db +
                            " could not be written and --db-required is set" +
                            (recorder->status() ? "" : "; " + recorder->status().message()));
          return finish(1);
        }
        if (rank0) print_error(command, result.status().message());
        return finish(g_under_mpirun ? 0 : 130);  // Note [stopping under mpirun]
      }
      if (comm.size() > 1) comm.abort(result.status().message(), 1);
      print_error(command, result.status().message());
      return finish(1);
    }
    if (result->rollback_at > 0) {  // Note [rollback]
      if (rollbacks == kMaxRollbacks) {
        const std::string why = result->rollback_reason + "; --on-spike rollback gave up after " +
                                std::to_string(kMaxRollbacks) + " rollbacks in this run";
        if (recorder) recorder->fail(why);
        if (rank0) print_error(command, why);
        return finish(1);
      }
      Result<Rollback> back = plan_rollback(*options, result->rollback_at);
      if (!back) {
        const std::string why = result->rollback_reason + "; " + back.status().message();
        if (recorder) recorder->fail(why);
        if (rank0) print_error(command, why);
        return finish(1);
      }
      name = rollback_run_name(first_name, rollbacks + 1);
      if (recorder)
        recorder->fail(result->rollback_reason + "; " + back->sentence + " (run " + name +
                       " goes on)");
      if (rank0) console.on_message(back->sentence);
      segment_line = command_line + back->flags;
      *options = std::move(back->options);
      continue;
    }
    if (recorder && !recorder->status()) {
      print_error(command, "the run record is incomplete: " + recorder->status().message());
      if (options->db_required) return finish(1);
    }
    break;
  }
  if (rank0 && after) after();
  return finish(0);
}

void print_error(const std::string& command, const std::string& message) {
  size_t start = 0;
  while (start <= message.size()) {
    size_t end = message.find('\n', start);
    if (end == std::string::npos) end = message.size();
    std::cerr << "lattice " << command << ": " << message.substr(start, end - start) << "\n";
    start = end + 1;
  }
}

int train_command(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << train_options_help();
    return 0;
  }
  Result<TrainOptions> options = parse_train_options(args);
  if (options && options->device != "cpu" && device_backend() == nullptr)
    if (int code = exec_gpu_trainer(args, options->device == "cuda"); code != 0) return code;
  return run_training("train", std::move(options), join_command_line("train", args), {});
}

int eval_command(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << "usage: lattice eval --data-path PREFIX --eval-iters K [--load DIR | --load-hf "
                 "PATH] [--seq-length S] [model and tokenizer flags]\n\n"
                 "Scores a model on the first K samples of PREFIX in document order and prints\n"
                 "the mean loss and perplexity. Text data: sample i is tokens [i*S, i*S+S] of the\n"
                 "documents concatenated. Image-text data (lattice data preprocess --images) with\n"
                 "a vision-language model: sample i is document i as training samples it, its\n"
                 "images spliced in, the loss averaged over its loss targets. --load takes the\n"
                 "checkpoint's architecture (--seq-length, when given, within its positions);\n"
                 "otherwise `lattice train`'s model and tokenizer flags.\n"
                 "lattice eval --task FILE.jsonl: multiple-choice accuracy (--task --help).\n";
    return 0;
  }
  Result<TrainOptions> options = parse_train_options(args);
  if (!options) {
    print_error("eval", options.status().message());
    return 2;
  }
  Result<EvalResult> r = evaluate_sequential(*options, options->eval_iters);
  if (!r) {
    print_error("eval", r.status().message());
    return 1;
  }
  if (!r->note.empty()) std::cerr << r->note << "\n";
  std::printf("evaluated %lld samples (%lld tokens) of %s | lm loss: %.6E | lm loss PPL: %.6E |\n",
              static_cast<long long>(r->samples), static_cast<long long>(r->tokens),
              options->data_path[0].c_str(), r->lm_loss, r->perplexity);
  return 0;
}

}  // namespace lattice::cli
