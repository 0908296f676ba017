// What `lattice generate` and `lattice serve` share: their own flags picked out of the
// arguments (the rest are `lattice train`'s model, tokenizer and layout flags), the
// tokenizer (a checkpoint's recorded one by default), the MPI world as the tensor-parallel
// group, and the Generator loaded on every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lattice/comm.h"
#include "lattice/flags.h"
#include "lattice/infer.h"
#include "lattice/tokenizer.h"
#include "lattice/train_options.h"

namespace lattice::cli {

// Splits `args` into those `specs` name (assigned, or appended to `repeated` for the flags
// listed there: each occurrence adds one value) and the rest. Returns every problem.
std::vector<std::string> take_flags(
    const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
    const std::vector<std::pair<std::string, std::vector<std::string>*>>& repeated,
    std::vector<std::string>& rest);

struct InferenceSetup {
  std::unique_ptr<Comm> world;  // the tensor-parallel group (every rank of the job)
  std::unique_ptr<Tokenizer> tokenizer;
  TokenizerOptions tokenizer_options;  // how `tokenizer` was made (its chat template's source)
  std::unique_ptr<Generator> generator;
  bool rank0() const { return world->rank() == 0; }
};

// From the non-generation flags (`lattice train`'s): loads everything, collectively. On
// failure prints "lattice <command>: ..." on rank 0 and returns the exit code in *code.
std::unique_ptr<InferenceSetup> setup_inference(const std::string& command,
                                                const std::vector<std::string>& model_flags,
                                                int max_batch_size, int* code);

// The common part of both commands' --help.
extern const char* const kModelFlagsHelp;

}  // namespace lattice::cli
