// The `lattice` subcommands; each takes its arguments after the subcommand name and
// returns the process exit code (0 ok, 1 failed, 2 bad usage).
#pragma once

#include <string>
#include <vector>

namespace lattice::cli {

int train_command(const std::vector<std::string>& args);
int demo_command(const std::vector<std::string>& args);
int eval_command(const std::vector<std::string>& args);
int data_command(const std::vector<std::string>& args);
int runs_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);
int ckpt_command(const std::vector<std::string>& args);
int generate_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int launch_command(const std::vector<std::string>& args);

// Prints "lattice <command>: <message>" for each line of `message` to stderr.
void print_error(const std::string& command, const std::string& message);

}  // namespace lattice::cli
