// Shared set-up of `lattice generate` and `lattice serve` (infer_setup.h).
#include "infer_setup.h"

#include <algorithm>
#include <iostream>
#include <thread>

#include "commands.h"
#include "lattice/kernels.h"

namespace lattice::cli {

const char* const kModelFlagsHelp =
    "model (as `lattice train`):\n"
    "  --load DIR                      a checkpoint: a --save directory (its latest) or an\n"
    "                                  iter_NNNNNNN directory; any training layout loads\n"
    "  --ckpt-step N                   iteration N of --load instead of the latest\n"
    "  --load-hf PATH                  a Hugging Face GPT-2 model (a directory, or a\n"
    "                                  safetensors file with config.json beside it); the\n"
    "                                  architecture comes from it; model flags given must agree\n"
    "  --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model, --vocab-size\n"
    "                                  the tokenizer (default: the one the checkpoint recorded)\n"
    "  --tensor-model-parallel-size T  split the model over T MPI ranks (mpirun -n T)\n"
    "  --threads N                     threads per rank (default: cores / local ranks)\n";

std::vector<std::string> take_flags(
    const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
    const std::vector<std::pair<std::string, std::vector<std::string>*>>& repeated,
    std::vector<std::string>& rest) {
  std::vector<std::string> errors;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      rest.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::vector<std::string>* list = nullptr;
    for (const auto& [n, target] : repeated)
      if (n == name) list = target;
    const FlagSpec* spec = find_flag(specs, name);
    if (!list && !spec) {
      rest.push_back(a);
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (spec && is_switch(*spec)) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      errors.push_back("--" + name + " needs a value");
      continue;
    }
    if (list) {
      list->push_back(value);
    } else if (std::string e = assign_flag_text(*spec, value); !e.empty()) {
      errors.push_back(e);
    }
  }
  return errors;
}

std::unique_ptr<InferenceSetup> setup_inference(const std::string& command,
                                                const std::vector<std::string>& model_flags,
                                                int max_batch_size, int* code) {
  auto setup = std::make_unique<InferenceSetup>();
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    print_error(command, world.status().message());
    *code = 2;
    return nullptr;
  }
  setup->world = std::move(*world);
  Comm& comm = *setup->world;
  auto fail = [&](int exit_code, const std::string& message) -> std::unique_ptr<InferenceSetup> {
    if (comm.rank() == 0) print_error(command, message);
    *code = exit_code;
    return nullptr;
  };
  Result<TrainOptions> o = parse_train_flags(model_flags);
  if (!o) return fail(2, o.status().message());
  const int tp = o->model.tensor_model_parallel_size;
  if (tp < 1) return fail(2, "--tensor-model-parallel-size must be 1 or more");
  if (comm.size() != tp)
    return fail(2, "--tensor-model-parallel-size " + std::to_string(tp) + " needs " +
                       std::to_string(tp) + " ranks (mpirun -n " + std::to_string(tp) +
                       "); this job has " + std::to_string(comm.size()) +
                       " (generation splits the model by tensor parallelism only)");
  const int local = std::max(1, comm.node_local_size());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  kernels::set_num_threads(o->threads > 0 ? o->threads : std::max(1, cores / local));

  TokenizerOptions tok = o->tokenizer;
  if (!o->load.empty() && !o->given("tokenizer-type")) {
    Result<TokenizerOptions> recorded = checkpoint_tokenizer(o->load, o->ckpt_step);
    if (!recorded) return fail(1, recorded.status().message());
    tok = *recorded;
  }
  Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(tok);
  if (!tokenizer) return fail(1, tokenizer.status().message());
  setup->tokenizer = std::move(*tokenizer);
  setup->tokenizer_options = tok;

  InferenceOptions io;
  io.load = o->load;
  io.ckpt_step = o->ckpt_step;
  io.load_hf = o->load_hf;
  io.model = o->model;
  io.model.vocab_size = setup->tokenizer->vocab_size();
  io.max_batch_size = max_batch_size;
  Result<std::unique_ptr<Generator>> generator = Generator::load(io, tp > 1 ? &comm : nullptr);
  // Every rank met the same files; still, agree before anyone starts a collective.
  int failed = generator ? 0 : 1;
  if (comm.size() > 1 && !comm.all_reduce(&failed, 1, DType::kInt32, ReduceOp::kMax).is_ok())
    comm.abort("could not load the model", 1);
  if (!generator) return fail(1, generator.status().message());
  if (failed) return fail(1, "another rank could not load the model");
  setup->generator = std::move(*generator);
  const int model_vocab = setup->generator->config().vocab_size;
  if (setup->tokenizer->vocab_size() > model_vocab)
    return fail(2, "the tokenizer (" + setup->tokenizer->type() + ") has " +
                       std::to_string(setup->tokenizer->vocab_size()) +
                       " ids; the model's vocabulary has " + std::to_string(model_vocab) +
                       " (--tokenizer-type / --vocab-size)");
  setup->generator->set_tokenizer(setup->tokenizer.get());
  return setup;
}

}  // namespace lattice::cli
