// One way to read --flags: a table of FlagSpecs with typed destinations. `lattice train`,
// `lattice data ...` and `lattice eval` all parse through it, so every command reports
// unknown flags (with a suggestion) and malformed values the same way.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace lattice {

using FlagTarget = std::variant<int*, int64_t*, float*, double*, uint64_t*, std::string*, bool*,
                                std::vector<std::string>*>;

struct FlagSpec {
  const char* name;  // without the leading "--"
  const char* help;
  FlagTarget target;
};

// A bool target is a switch: `--flag` sets it (`--flag=false` clears it). A list target takes
// every following argument up to the next --flag. `--name=value` and `--name value` both work.
// Arguments that are not flags go to `positional` when it is non-null, else are errors.
// Returns every problem, one sentence each; `command` (e.g. "lattice train") names the
// command whose --help lists the flags. When `given` is non-null, the name of every flag that
// was set (without "--") is added to it: callers tell a flag the user gave from a default.
std::vector<std::string> parse_flags(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs,
                                     std::vector<std::string>* positional,
                                     const std::string& command,
                                     std::set<std::string>* given = nullptr);

const FlagSpec* find_flag(const std::vector<FlagSpec>& specs, const std::string& name);
bool is_switch(const FlagSpec& spec);
// "unknown flag --num-layer (did you mean --num-layers?); `lattice train --help` lists ..."
std::string unknown_flag_message(const std::string& what, const std::string& name,
                                 const std::vector<FlagSpec>& specs, const std::string& command);
// Sets the destination from text; returns an error sentence naming the flag, or "".
std::string assign_flag_text(const FlagSpec& spec, const std::string& text);
// The current value as text ("0.1", "\"cosine\"", "[]"): the defaults column of --help.
std::string flag_value_text(const FlagSpec& spec);
// Aligned "  --name V    help  (default X)" lines; empty defaults are left out.
std::string flags_help(const std::vector<FlagSpec>& specs);

}  // namespace lattice
