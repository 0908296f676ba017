// The pre-flight memory check (host_memory_check.h).
#include "train/host_memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "core/host_memory.h"
#include "lattice/kernels.h"
#include "lattice/plan.h"

namespace lattice {

namespace {

// A "Key:   123 kB" line of /proc/meminfo, in bytes; -1 when absent.
double meminfo_bytes(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(key + ":", 0) == 0) return std::atof(line.c_str() + key.size() + 1) * 1024;
  return -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The room under this process's cgroup v2 limit, or -1 (no cgroup v2, or no limit).
double cgroup_room(std::string* file) {
  std::istringstream groups(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(groups, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    const std::string max_text = read_text(dir + "/memory.max");
    if (max_text.empty() || max_text.rfind("max", 0) == 0) return -1;
    const double max = std::atof(max_text.c_str());
    const double current = std::atof(read_text(dir + "/memory.current").c_str());
    *file = dir + "/memory.max";
    return std::max(0.0, max - current);
  }
  return -1;
}

}  // namespace

HostMemory available_host_memory() {
  HostMemory m;
  const std::string meminfo = read_text("/proc/meminfo");
  const double available = meminfo_bytes(meminfo, "MemAvailable");
  if (available >= 0) {
    m.known = true;
    m.bytes = available + std::max(0.0, meminfo_bytes(meminfo, "SwapFree"));
    m.source = "MemAvailable + SwapFree in /proc/meminfo";
  }
  std::string file;
  const double room = cgroup_room(&file);
  if (room >= 0 && (!m.known || room < m.bytes)) {
    m.known = true;
    m.bytes = room;
    m.source = "the room left under " + file;
  }
  return m;
}

double host_id() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  uint64_t h = 1469598103934665603ull;
  for (const char* c = host; *c; c++) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return static_cast<double>(h & ((uint64_t{1} << 52) - 1));
}

std::string host_memory_refusal(int ranks, double need, const double largest[5], double available,
                                const std::string& source, bool one_machine) {
  const std::string breakdown =
      "weights " + binary_size(largest[0]) + ", grads " + binary_size(largest[1]) +
      ", optimizer state " + binary_size(largest[2]) + ", activations " + binary_size(largest[3]) +
      ", workspace and buffers " + binary_size(largest[4]);
  const std::string who =
      ranks == 1 ? "this run needs an estimated " + binary_size(need) + " of memory (" + breakdown
                 : "the " + std::to_string(ranks) + " ranks on one machine need an estimated " +
                       binary_size(need) + " of memory together (the largest: " + breakdown;
  return who + "; `lattice plan` with the same flags shows the estimate), more than the " +
         binary_size(available) + (one_machine ? " this machine" : " that machine") +
         " has available (" + source +
         "); use a smaller model, --micro-batch-size or --seq-length, more machines, or "
         "--skip-memory-check to try anyway";
}

int threads_per_rank(const TrainOptions& o, const Comm& world) {
  if (o.threads > 0) return o.threads;
  kernels::set_num_threads(0);  // all the cores this process may run on (its affinity)
  return std::min(std::max(1, kernels::num_threads()),
                  shared_cpu_threads(world.node_local_size()));
}

Status check_host_memory(const TrainOptions& options, const ParallelLayout& layout, Comm& world) {
  TrainOptions sized = options;  // the per-thread workspaces for the threads the rank will take
  sized.threads = threads_per_rank(options, world);
  const MemoryEstimate estimate = estimate_memory(sized, layout);
  const StageEstimate& mine = estimate.stages[layout.coord(world.rank()).pp];
  const size_t comm =
      mine.comm_buffer_bytes_of(static_cast<size_t>(world.rank() % (layout.world / layout.pp)));
  const HostMemory host = available_host_memory();
  // Per rank: machine, the five categories, available bytes (-1 unknown), source (0 meminfo,
  // 1 cgroup).
  constexpr size_t kFields = 8;
  const double sent[kFields] = {host_id(),
                                static_cast<double>(mine.weight_bytes),
                                static_cast<double>(mine.grad_bytes),
                                static_cast<double>(mine.optimizer_bytes),
                                static_cast<double>(mine.activation_bytes),
                                static_cast<double>(mine.all_workspace_bytes() + comm),
                                host.known ? host.bytes : -1.0,
                                host.source.rfind("MemAvailable", 0) == 0 ? 0.0 : 1.0};
  std::vector<double> all(kFields * world.size());
  if (world.size() > 1) {
    const std::vector<size_t> counts(world.size(), kFields);
    if (Status s = world.all_gather(sent, all.data(), counts, DType::kFloat64); !s) return s;
  } else {
    std::copy(std::begin(sent), std::end(sent), all.begin());
  }
  struct Machine {
    int ranks = 0;
    double need = 0, available = -1, source = 0;
    double largest[5] = {0, 0, 0, 0, 0}, largest_total = -1;
  };
  std::map<double, Machine> machines;
  for (int r = 0; r < world.size(); r++) {
    const double* x = all.data() + kFields * r;
    Machine& m = machines[x[0]];
    const double total = x[1] + x[2] + x[3] + x[4] + x[5];
    m.ranks++;
    m.need += total;
    if (total > m.largest_total) {
      m.largest_total = total;
      std::copy(x + 1, x + 6, m.largest);
    }
    if (x[6] >= 0 && (m.available < 0 || x[6] < m.available)) {
      m.available = x[6];
      m.source = x[7];
    }
  }
  for (const auto& [id, m] : machines) {
    if (m.available < 0 || m.need <= m.available) continue;
    const std::string source = m.source == 0 ? "MemAvailable + SwapFree in /proc/meminfo"
                                             : "its cgroup's memory.max less memory.current";
    return Status::resource_exhausted(
        host_memory_refusal(m.ranks, m.need, m.largest, m.available, source, machines.size() == 1));
  }
  return Status::ok();
}

}  // namespace lattice
