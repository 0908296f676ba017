#include "lattice/flags.h"

#include <algorithm>
#include <charconv>
#include <type_traits>

namespace lattice {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

template <typename N>
bool parse_number(const std::string& text, N& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

const FlagSpec* find_flag(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const FlagSpec& s : specs)
    if (name == s.name) return &s;
  return nullptr;
}

bool is_switch(const FlagSpec& spec) {
  return std::holds_alternative<bool*>(spec.target);
}

std::string unknown_flag_message(const std::string& what, const std::string& name,
                                 const std::vector<FlagSpec>& specs, const std::string& command) {
  std::string best;
  size_t best_distance = 4;
  for (const FlagSpec& s : specs) {
    const size_t d = edit_distance(name, s.name);
    if (d < best_distance) best_distance = d, best = s.name;
  }
  std::string msg = what + " --" + name;
  if (!best.empty()) msg += " (did you mean --" + best + "?)";
  return msg + "; `" + command + " --help` lists every flag";
}

std::string assign_flag_text(const FlagSpec& s, const std::string& text) {
  const std::string flag = std::string("--") + s.name;
  return std::visit(
      [&](auto* target) -> std::string {
        using V = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          target->push_back(text);
        } else if constexpr (std::is_same_v<V, std::string>) {
          *target = text;
        } else if constexpr (std::is_same_v<V, bool>) {
          if (text == "true" || text == "1")
            *target = true;
          else if (text == "false" || text == "0")
            *target = false;
          else
            return flag + " expects true or false, got '" + text + "'";
        } else if constexpr (std::is_same_v<V, int> || std::is_same_v<V, int64_t>) {
          if (!parse_number(text, *target)) return flag + " expects an integer, got '" + text + "'";
        } else if constexpr (std::is_same_v<V, uint64_t>) {
          if (!parse_number(text, *target))
            return flag + " expects a non-negative integer, got '" + text + "'";
        } else {
          if (!parse_number(text, *target)) return flag + " expects a number, got '" + text + "'";
        }
        return "";
      },
      s.target);
}

std::vector<std::string> parse_flags(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs,
                                     std::vector<std::string>* positional,
                                     const std::string& command, std::set<std::string>* given) {
  std::vector<std::string> errors;
  std::vector<std::vector<std::string>*> lists_seen;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      if (positional)
        positional->push_back(arg);
      else
        errors.push_back("unexpected argument '" + arg + "': every setting is a --flag");
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* s = find_flag(specs, name);
    if (!s) {
      errors.push_back(unknown_flag_message("unknown flag", name, specs, command));
      if (!has_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) i++;
      continue;
    }
    if (given) given->insert(s->name);
    if (is_switch(*s) && !has_value) {
      *std::get<bool*>(s->target) = true;
      continue;
    }
    if (auto* list = std::get_if<std::vector<std::string>*>(&s->target)) {
      // The command line replaces a config file's list; repeating the flag adds to it
      // (`--tag a --tag b` is `--tag a b`).
      if (std::find(lists_seen.begin(), lists_seen.end(), *list) == lists_seen.end()) {
        (*list)->clear();
        lists_seen.push_back(*list);
      }
      if (has_value) (*list)->push_back(value);
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) (*list)->push_back(args[++i]);
      if ((*list)->empty()) errors.push_back("--" + name + " expects at least one value");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        errors.push_back("--" + name + " expects a value");
        continue;
      }
      value = args[++i];
    }
    if (std::string e = assign_flag_text(*s, value); !e.empty()) errors.push_back(e);
  }
  return errors;
}

std::string flag_value_text(const FlagSpec& spec) {
  return std::visit(
      [](auto* target) -> std::string {
        using V = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          std::string out = "[";
          for (size_t i = 0; i < target->size(); i++)
            out += (i ? ", \"" : "\"") + (*target)[i] + "\"";
          return out + "]";
        } else if constexpr (std::is_same_v<V, std::string>) {
          return "\"" + *target + "\"";
        } else if constexpr (std::is_same_v<V, bool>) {
          return *target ? "true" : "false";
        } else {
          char buf[32];
          auto [end, ec] = std::to_chars(buf, buf + sizeof buf, *target);  // shortest form
          return std::string(buf, end);
        }
      },
      spec.target);
}

std::string flags_help(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    std::string left = std::string("  --") + s.name + (is_switch(s) ? "" : " V");
    left.resize(std::max<size_t>(left.size() + 1, 34), ' ');
    out += left + s.help;
    const std::string value = flag_value_text(s);
    if (!is_switch(s) && value != "\"\"" && value != "[]") out += "  (default " + value + ")";
    out += "\n";
  }
  return out;
}

}  // namespace lattice
