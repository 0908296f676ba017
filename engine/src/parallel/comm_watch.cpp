// The MPI-free half of waiting (comm_watch.h): settings, the abort hook, pacing, and the
// other ranks' processes as /proc shows them.
#include "parallel/comm_watch.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "lattice/comm.h"

namespace lattice {
namespace {

std::mutex g_mutex;  // guards the strings and the hook below
std::atomic<double> g_timeout_seconds{0};
std::string g_timeout_setting;
std::string g_activity;
std::function<void(const std::string&)> g_abort_hook;
std::atomic<bool> g_abort_hook_ran{false};

// A watched process: its pid and the start time /proc gave it when the world was made, so
// that a pid reused by a new process is not taken for the rank.
struct Watched {
  int pid = 0;
  std::string host;
  bool visible = false;
  uint64_t start_time = 0;
};
std::vector<Watched> g_peers;  // world order; written once before any wait
int g_my_rank = -1;

// /proc/<pid>/stat's state letter and start time (field 22), or false when unreadable.
bool read_stat(int pid, char& state, uint64_t& start_time) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; i++) {
    if (i == 3) state = field.empty() ? '?' : field[0];
    if (i == 22) {
      start_time = std::strtoull(field.c_str(), nullptr, 10);
      return true;
    }
  }
  return false;
}

}  // namespace

void set_comm_timeout(double seconds, const std::string& setting) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_timeout_seconds = seconds > 0 ? seconds : 0;
  g_timeout_setting = setting;
}

void set_comm_activity(const std::string& activity) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_activity = activity;
}

void set_abort_hook(std::function<void(const std::string& message)> hook) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_abort_hook = std::move(hook);
}

double comm_timeout_seconds() {
  return g_timeout_seconds;
}

std::string comm_timeout_setting() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_timeout_setting.empty()) return g_timeout_setting;
  return "a timeout of " + duration_phrase(g_timeout_seconds);
}

std::string comm_activity() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_activity;
}

void run_abort_hook(const std::string& message) {
  if (g_abort_hook_ran.exchange(true)) return;
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    hook = g_abort_hook;
  }
  if (hook) hook(message);
}

void WaitPacer::pause() const {
  const double t = elapsed();
  if (t < 1e-3) return;  // Note [pacing a wait]
  std::this_thread::sleep_for(std::chrono::microseconds(t < 10 ? 50 : 1000));
}

void set_peer_processes(const std::vector<PeerProcess>& peers, int my_world_rank) {
  g_my_rank = my_world_rank;
  g_peers.assign(peers.size(), Watched{});
  const std::string& mine = peers[my_world_rank].node;
  for (size_t r = 0; r < peers.size(); r++) {
    Watched& w = g_peers[r];
    w.pid = peers[r].pid;
    w.host = peers[r].host;
    char state = 0;
    // Every rank is alive now (it has just taken part in the exchange), so a process this one
    // cannot read is one it cannot watch.
    w.visible = static_cast<int>(r) != my_world_rank && peers[r].node == mine &&
                read_stat(w.pid, state, w.start_time);
  }
}

PeerState peer_state(int world_rank) {
  if (world_rank < 0 || world_rank >= static_cast<int>(g_peers.size())) return PeerState::kUnknown;
  const Watched& w = g_peers[world_rank];
  if (!w.visible) return PeerState::kUnknown;
  char state = 0;
  uint64_t start_time = 0;
  if (!read_stat(w.pid, state, start_time) || start_time != w.start_time) return PeerState::kEnded;
  if (state == 'Z' || state == 'X' || state == 'x') return PeerState::kEnded;
  if (state == 'T' || state == 't') return PeerState::kStopped;
  return PeerState::kRunning;
}

int ended_peer() {
  for (int r = 0; r < static_cast<int>(g_peers.size()); r++)
    if (g_peers[r].visible && peer_state(r) == PeerState::kEnded) return r;
  return -1;
}

std::string describe_peer(int world_rank) {
  if (world_rank < 0 || world_rank >= static_cast<int>(g_peers.size())) return "";
  const Watched& w = g_peers[world_rank];
  if (!w.visible) return w.host.empty() ? "" : "on host " + w.host;
  return "pid " + std::to_string(w.pid) + " on this machine";
}

std::string peer_ended_message(int peer, int me, double waited, const std::string& what,
                               const std::string& group) {
  const std::string where = describe_peer(peer);
  return "rank " + std::to_string(peer) + (where.empty() ? "" : " (" + where + ")") +
         " has ended (killed, crashed, or stopped by an error of its own printed above) while "
         "rank " +
         std::to_string(me) + " waited " + duration_phrase(waited) + " in " + what +
         " (group: " + group + "); the job is ended";
}

std::string stopped_or_ended_notes(const std::vector<int>& world_ranks) {
  std::string notes;
  for (int r : world_ranks) {
    const PeerState state = peer_state(r);
    if (state == PeerState::kStopped)
      notes += "; rank " + std::to_string(r) + " is stopped (SIGSTOP or a debugger; " +
               describe_peer(r) + ")";
    else if (state == PeerState::kEnded)
      notes += "; rank " + std::to_string(r) + " has ended (" + describe_peer(r) + ")";
  }
  return notes;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string s = "ranks ";
  for (size_t i = 0; i < ranks.size(); i++) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

std::string group_phrase(const std::string& name, const std::vector<int>& world_ranks) {
  std::string s = (name.empty() ? std::string("a group of ranks") : name) + " [";
  const size_t shown = world_ranks.size() > 16 ? 3 : world_ranks.size();
  for (size_t i = 0; i < shown; i++) {
    if (i > 0) s += ',';
    s += std::to_string(world_ranks[i]);
  }
  if (shown < world_ranks.size())
    s += ",...," + std::to_string(world_ranks.back()) + "] (" + std::to_string(world_ranks.size()) +
         " ranks)";
  else
    s += "]";
  return s;
}

std::string duration_phrase(double seconds) {
  char text[32];
  if (seconds < 60)
    std::snprintf(text, sizeof text, "%.3g s", seconds);
  else
    std::snprintf(text, sizeof text, "%.3g min", seconds / 60);
  return text;
}

std::string activity_suffix() {
  const std::string a = comm_activity();
  return a.empty() ? "" : " of " + a;
}

}  // namespace lattice
