// The launch library's common half: names, validation, time limits, hostfiles, and the argv
// of a local or hostfile mpirun. The Slurm batch script and Slurm's answers are in slurm.cpp.
#include "lattice/launch.h"

#include <cctype>
#include <fstream>
#include <sstream>

#include "lattice/layout.h"
#include "lattice/train_options.h"
#include "launch/launch_internal.h"

namespace lattice::launch {

const char* target_name(Target t) {
  switch (t) {
    case Target::kLocal:
      return "local";
    case Target::kHostfile:
      return "hostfile";
    case Target::kSlurm:
      return "slurm";
  }
  return "?";
}

const char* network_name(Network n) {
  return n == Network::kTcp ? "tcp" : "ib";
}

const char* launcher_name(Launcher l) {
  return l == Launcher::kSrun ? "srun" : "mpirun";
}

std::optional<Target> parse_target(const std::string& text) {
  for (Target t : {Target::kLocal, Target::kHostfile, Target::kSlurm})
    if (text == target_name(t)) return t;
  return std::nullopt;
}

std::optional<Network> parse_network(const std::string& text) {
  if (text == "tcp") return Network::kTcp;
  if (text == "ib" || text == "infiniband") return Network::kInfiniband;
  return std::nullopt;
}

std::optional<Launcher> parse_launcher(const std::string& text) {
  if (text == "srun") return Launcher::kSrun;
  if (text == "mpirun") return Launcher::kMpirun;
  return std::nullopt;
}

namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// "a:b:c" into its parts; each must be digits.
std::optional<std::vector<long>> colon_numbers(const std::string& s) {
  std::vector<long> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ':')) {
    if (!all_digits(part) || part.size() > 6) return std::nullopt;
    out.push_back(std::stol(part));
  }
  if (s.empty() || s.back() == ':') return std::nullopt;
  return out;
}

}  // namespace

Result<long> parse_time_limit(const std::string& text) {
  const Status bad = Status::invalid_argument(
      "--time '" + text +
      "' is not a Slurm time limit; write MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
      "(e.g. --time 02:00:00 for two hours)");
  std::string rest = text;
  long days = 0;
  const size_t dash = text.find('-');
  if (dash != std::string::npos) {
    const std::string d = text.substr(0, dash);
    if (!all_digits(d) || d.size() > 4) return bad;
    days = std::stol(d);
    rest = text.substr(dash + 1);
  }
  const std::optional<std::vector<long>> parts = colon_numbers(rest);
  if (!parts || parts->empty() || parts->size() > 3) return bad;
  const std::vector<long>& p = *parts;
  long seconds = 0;
  if (dash != std::string::npos) {  // D-HH, D-HH:MM, D-HH:MM:SS
    seconds = p[0] * 3600 + (p.size() > 1 ? p[1] * 60 : 0) + (p.size() > 2 ? p[2] : 0);
    if (p[0] > 23) return bad;
  } else if (p.size() == 1) {  // MM
    seconds = p[0] * 60;
  } else if (p.size() == 2) {  // MM:SS
    seconds = p[0] * 60 + p[1];
  } else {  // HH:MM:SS
    seconds = p[0] * 3600 + p[1] * 60 + p[2];
  }
  for (size_t i = 1; i < p.size(); ++i)
    if (p[i] > 59) return bad;
  seconds += days * 86400;
  if (seconds <= 0)
    return Status::invalid_argument("--time '" + text + "' must be longer than zero");
  return seconds;
}

Result<std::vector<HostfileEntry>> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return Status::invalid_argument("--hostfile " + path +
                                    ": cannot open the file (one host per line, "
                                    "e.g. \"node1 slots=8\")");
  std::vector<HostfileEntry> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    HostfileEntry entry;
    if (!(words >> entry.host)) continue;
    std::string word;
    while (words >> word) {
      const size_t eq = word.find('=');
      const std::string key = word.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
      if (key == "slots" || key == "max_slots" || key == "max-slots") {
        if (!all_digits(value) || std::stol(value) < 1)
          return Status::invalid_argument("--hostfile " + path + " line " + std::to_string(number) +
                                          ": '" + word + "' needs a positive number");
        if (key == "slots") entry.num_slots = std::stoi(value);
      } else {
        return Status::invalid_argument("--hostfile " + path + " line " + std::to_string(number) +
                                        ": unknown setting '" + word +
                                        "' (expected slots=N or max_slots=N)");
      }
    }
    hosts.push_back(entry);
  }
  if (hosts.empty()) return Status::invalid_argument("--hostfile " + path + " names no host");
  return hosts;
}

std::vector<McaSetting> network_settings(Network network, const std::string& interface) {
  std::vector<McaSetting> out;
  if (network == Network::kTcp) {
    out.push_back({{"--mca", "pml", "ob1", "--mca", "btl", "tcp,vader,self"},
                   "point-to-point over TCP between nodes, shared memory (vader) within one"});
    if (!interface.empty())
      out.push_back(
          {{"--mca", "btl_tcp_if_include", interface, "--mca", "oob_tcp_if_include", interface},
           "only the network that joins the nodes; without it Open MPI may try a "
           "docker or virtual bridge address the other nodes cannot reach and hang"});
  } else {
    out.push_back({{"--mca", "pml", "ucx", "--mca", "osc", "ucx"},
                   "InfiniBand through UCX (RDMA), the transport Open MPI 4 and 5 use for IB"});
    out.push_back({{"--mca", "btl", "^openib"},
                   "not the old openib transport, which warns and competes with UCX"});
    if (!interface.empty())
      out.push_back({{"-x", "UCX_NET_DEVICES=" + interface},
                     "the HCA port UCX uses (e.g. mlx5_0:1); every port when unset"});
  }
  out.push_back({{"--mca", "odls_base_sigkill_timeout", "30"},
                 "30 s between mpirun's SIGTERM to the ranks and its SIGKILL, so that a stopped "
                 "job can save its checkpoint (Note [stopping under mpirun])"});
  out.push_back({{"-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "OMP_NUM_THREADS"},
                 "this shell's PATH, libraries and thread count on every node"});
  return out;
}

std::vector<std::string> validate(const LaunchSpec& spec) {
  std::vector<std::string> errors;
  if (spec.world_size < 1) errors.push_back("--world-size must be positive");
  if (spec.nodes < 1) errors.push_back("--nodes must be positive");
  if (spec.gpus_per_node < 0) errors.push_back("--gpus-per-node must not be negative");
  if (spec.cpus_per_task < 0) errors.push_back("--cpus-per-task must not be negative");
  if (spec.world_size >= 1 && spec.nodes >= 1 && spec.world_size % spec.nodes != 0)
    errors.push_back("--world-size " + std::to_string(spec.world_size) +
                     " is not divisible by --nodes " + std::to_string(spec.nodes) +
                     ": every node runs the same number of ranks");
  const int per_node = spec.nodes >= 1 ? spec.world_size / spec.nodes : 0;
  if (spec.gpus_per_node > 0 && per_node > spec.gpus_per_node)
    errors.push_back(std::to_string(per_node) + " ranks per node (--world-size " +
                     std::to_string(spec.world_size) + " / --nodes " + std::to_string(spec.nodes) +
                     ") exceed --gpus-per-node " + std::to_string(spec.gpus_per_node) +
                     ": one rank drives one GPU");
  if (spec.target == Target::kLocal && spec.nodes != 1)
    errors.push_back("--target local runs on this machine only; --nodes " +
                     std::to_string(spec.nodes) + " needs --target hostfile or slurm");
  if (spec.target == Target::kHostfile) {
    if (spec.hostfile.empty()) {
      errors.push_back("--target hostfile needs --hostfile FILE (\"host slots=N\" lines)");
    } else if (Result<std::vector<HostfileEntry>> hosts = read_hostfile(spec.hostfile); !hosts) {
      errors.push_back(hosts.status().message());
    } else {
      if (static_cast<int>(hosts->size()) < spec.nodes)
        errors.push_back("--nodes " + std::to_string(spec.nodes) + " but --hostfile " +
                         spec.hostfile + " names " + std::to_string(hosts->size()) + " host(s)");
      for (int i = 0; i < spec.nodes && i < static_cast<int>(hosts->size()); ++i)
        if ((*hosts)[i].num_slots < per_node)
          errors.push_back("--hostfile " + spec.hostfile + ": host " + (*hosts)[i].host +
                           " has slots=" + std::to_string((*hosts)[i].num_slots) + " but " +
                           std::to_string(per_node) + " ranks per node are placed on it");
    }
  }
  if (spec.target == Target::kSlurm) {
    if (!spec.time.empty())
      if (Result<long> t = parse_time_limit(spec.time); !t) errors.push_back(t.status().message());
    if (spec.output_dir.empty() || spec.output_dir[0] != '/')
      errors.push_back("--output-dir '" + spec.output_dir +
                       "' must be an absolute path on storage every node sees");
    if (spec.signal_seconds < 0) errors.push_back("--signal-seconds must not be negative");
    for (char c : spec.job_name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
        errors.push_back("--job-name '" + spec.job_name +
                         "' may hold only letters, digits, '-', '_' and '.'");
  }
  // The engine's own verdict on the train flags and the layout at this world size.
  Result<TrainOptions> options = parse_train_flags(spec.train_args);
  if (!options) {
    std::istringstream lines(options.status().message());
    for (std::string line; std::getline(lines, line);) errors.push_back(line);
    return errors;
  }
  for (const std::string& e : options->validate(/*require_data=*/true)) errors.push_back(e);
  if (spec.world_size >= 1)
    for (const std::string& e :
         layout_errors(with_default_global_batch(*options, spec.world_size), spec.world_size))
      errors.push_back(e);
  for (const std::string& e : trainer_layout_refusals(*options)) errors.push_back(e);
  return errors;
}

namespace internal {

std::optional<std::string> flag_value(const std::vector<std::string>& args,
                                      const std::string& name) {
  std::optional<std::string> value;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--" + name && i + 1 < args.size()) value = args[i + 1];
    if (args[i].rfind("--" + name + "=", 0) == 0) value = args[i].substr(name.size() + 3);
  }
  return value;
}

std::vector<std::string> without_flag(const std::vector<std::string>& args,
                                      const std::string& name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--" + name) {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--" + name + "=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

}  // namespace internal

namespace {

LaunchPlan local_plan(const LaunchSpec& spec) {
  LaunchPlan plan;
  plan.tasks_per_node = spec.world_size;
  plan.db_path = internal::flag_value(spec.train_args, "db").value_or("");
  plan.save_dir = internal::flag_value(spec.train_args, "save").value_or("");
  std::vector<std::string> lattice = {spec.lattice, "train"};
  lattice.insert(lattice.end(), spec.train_args.begin(), spec.train_args.end());
  if (spec.world_size == 1) {
    plan.argv = lattice;
    return plan;
  }
  plan.argv = {spec.mpirun};
  if (spec.allow_run_as_root) plan.argv.push_back("--allow-run-as-root");
  if (spec.local_cores > 0 && spec.world_size > spec.local_cores) {
    plan.argv.push_back("--oversubscribe");
    plan.notes.push_back(std::to_string(spec.world_size) + " ranks on " +
                         std::to_string(spec.local_cores) +
                         " cores: mpirun oversubscribes them and each rank gets one thread");
  }
  for (const char* w : {"--mca", "odls_base_sigkill_timeout", "30", "--bind-to", "none", "-n"})
    plan.argv.push_back(w);
  plan.argv.push_back(std::to_string(spec.world_size));
  plan.argv.insert(plan.argv.end(), lattice.begin(), lattice.end());
  return plan;
}

LaunchPlan hostfile_plan(const LaunchSpec& spec) {
  LaunchPlan plan;
  plan.tasks_per_node = spec.world_size / spec.nodes;
  plan.db_path = internal::flag_value(spec.train_args, "db").value_or("");
  plan.save_dir = internal::flag_value(spec.train_args, "save").value_or("");
  plan.argv = {spec.mpirun};
  if (spec.allow_run_as_root) plan.argv.push_back("--allow-run-as-root");
  for (const std::string& w : {std::string("--hostfile"), spec.hostfile, std::string("-n"),
                               std::to_string(spec.world_size), std::string("--map-by"),
                               "ppr:" + std::to_string(plan.tasks_per_node) + ":node",
                               std::string("--bind-to"), std::string("none")})
    plan.argv.push_back(w);
  for (const McaSetting& m : network_settings(spec.network, spec.network_interface)) {
    plan.argv.insert(plan.argv.end(), m.args.begin(), m.args.end());
    plan.notes.push_back(shell_command(m.args) + ": " + m.why);
  }
  if (spec.network == Network::kTcp && spec.network_interface.empty())
    plan.notes.push_back(
        "no --network-interface: Open MPI uses every interface; name the one that joins the "
        "nodes (e.g. --network-interface eth0) if the job hangs at start");
  plan.notes.push_back(
      "every host must reach the others by ssh without a password and see the same paths "
      "(the lattice program, the data, --save and --db on shared storage)");
  plan.argv.push_back(spec.lattice);
  plan.argv.push_back("train");
  plan.argv.insert(plan.argv.end(), spec.train_args.begin(), spec.train_args.end());
  return plan;
}

}  // namespace

Result<LaunchPlan> plan_launch(const LaunchSpec& spec) {
  const std::vector<std::string> errors = validate(spec);
  if (!errors.empty()) {
    std::string message;
    for (const std::string& e : errors) {
      if (!message.empty()) message += '\n';
      message += e;
    }
    return Status::invalid_argument(message);
  }
  switch (spec.target) {
    case Target::kLocal:
      return local_plan(spec);
    case Target::kHostfile:
      return hostfile_plan(spec);
    case Target::kSlurm:
      return internal::slurm_plan(spec);
  }
  return Status::internal("unknown launch target");
}

std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789_@%+=:,./-") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string shell_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& w : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

}  // namespace lattice::launch
