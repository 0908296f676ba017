// The `lattice` subcommands; each takes its arguments after the subcommand name and
// returns the process exit code (0 ok, 1 failed, 2 bad usage).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lattice/status.h"
#include "lattice/train_options.h"

namespace lattice::cli {

int train_command(const std::vector<std::string>& args);
int demo_command(const std::vector<std::string>& args);
int eval_command(const std::vector<std::string>& args);
// `lattice eval --task FILE`: multiple-choice accuracy (eval_task_command.cpp).
int eval_task_command(const std::vector<std::string>& args);
int data_command(const std::vector<std::string>& args);
int runs_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);
int ckpt_command(const std::vector<std::string>& args);
// lattice ckpt merge-lora (ckpt_merge_lora.cpp).
int merge_lora_command(const std::vector<std::string>& args);
int generate_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int launch_command(const std::vector<std::string>& args);

// Prints "lattice <command>: <message>" for each line of `message` to stderr.
void print_error(const std::string& command, const std::string& message);

// What `lattice train` and `lattice demo` share (train_command.cpp).
bool wants_help(const std::vector<std::string>& args);
std::string join_command_line(const std::string& command, const std::vector<std::string>& args);
// Trains as `options` say on every rank of the job: rank 0 records the run and prints; the
// others train silently. A failure every rank sees alike (a bad flag or layout) exits normally
// on all of them; one met by a single rank (a bad file on its node, a crashed peer) ends the
// whole job with that rank's message, so no rank waits forever. After a successful run rank 0
// calls `after` (may be empty) before the job ends. Returns the exit code.
int run_training(const std::string& command, Result<TrainOptions> options,
                 const std::string& command_line, const std::function<void()>& after);

}  // namespace lattice::cli
