// The MPI half of waiting (mpi_watch.h).
//
// Note [collective timeout]. MPI cannot say which ranks a collective still waits for, and a
// stopped or hung rank answers nothing, so every rank answers questions while it waits: each
// keeps a receive posted on the watch's own duplicate of MPI_COMM_WORLD, and every poll of a
// wait (watch_wait, watch_test) answers what arrived with what this rank is doing: the
// operation it waits in, for how long, and how many collectives it has issued on the
// communicator asked about (a member that has issued more than the waited collective's index
// has reached it). When a wait passes the timeout, the rank asks the other members of the
// group (or the peer of a message), gives them kAnswerGrace to answer while it keeps polling,
// and ends the job with a message naming the ranks that have not arrived and what each is
// doing, or that it did not answer (then what /proc says of its process on this machine:
// stopped, running, gone). A rank other than 0 also asks rank 0 and, when rank 0 is itself
// waiting, leaves the ending to it for as long as rank 0's own timeout needs, so that rank 0,
// which holds the run record, is the one that records the failure. Independently of the
// timeout, every kPeerCheckPeriod of a wait the rank looks in /proc for the processes of the
// other ranks on this machine: one that has ended (SIGKILL, a crash, MPI_Abort) ends the job
// at once with its rank in the message.
#include "parallel/mpi_watch.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <list>

#include "parallel/comm_watch.h"

namespace lattice {
namespace {

constexpr int kQueryTag = 1, kAnswerTag = 2;
constexpr double kAnswerGrace = 2.0;      // seconds the asked ranks have to answer
constexpr double kPeerCheckPeriod = 0.1;  // seconds between looks in /proc
constexpr double kRankZeroMargin = 5.0;   // extra seconds left to rank 0 to end the job

struct Query {
  uint64_t serial;
  uint64_t comm_id;
};
struct Answer {
  uint64_t serial;
  int64_t issued;  // collectives issued on the asked communicator; -1: no such communicator
  double waited;   // seconds in the current wait
  int32_t waiting;
  char what[300];  // "is waiting in the pipeline-parallel recv from rank 5 of iteration 3 ..."
};

// A send in flight and its buffer.
struct Outgoing {
  Query query{};
  Answer answer{};
  MPI_Request request = MPI_REQUEST_NULL;
};

struct Watch {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::vector<WatchedComm*> comms;
  WatchedComm world_view;  // the watch's own communicator, for the final barrier
  Query incoming{};
  MPI_Request listening = MPI_REQUEST_NULL;
  std::list<Outgoing> outgoing;
  const WatchedOp* current = nullptr;  // the wait in progress, if any
  const WaitPacer* current_clock = nullptr;
  uint64_t serial = 0;
};
Watch g_watch;

bool active() {
  return g_watch.comm != MPI_COMM_NULL;
}

void listen() {
  if (MPI_Irecv(&g_watch.incoming, sizeof(Query), MPI_BYTE, MPI_ANY_SOURCE, kQueryTag, g_watch.comm,
                &g_watch.listening) != MPI_SUCCESS)
    g_watch.listening = MPI_REQUEST_NULL;
}

const WatchedComm* find_comm(uint64_t id) {
  for (const WatchedComm* c : g_watch.comms)
    if (c->id == id) return c;
  return nullptr;
}

std::string describe_op(const WatchedOp& op) {
  const std::string name = op.comm->owner ? op.comm->owner->name() : "world";
  std::string s = "the " + (name.empty() ? std::string() : name + " ") + op.kind;
  if (op.peer >= 0)
    s += (std::strcmp(op.kind, "send") == 0 ? " to rank " : " from rank ") +
         std::to_string(op.comm->world_ranks[op.peer]);
  return s + activity_suffix();
}

std::string group_of(const WatchedOp& op) {
  return group_phrase(op.comm->owner ? op.comm->owner->name() : "world", op.comm->world_ranks);
}

void send(Outgoing&& message, int to, int tag) {
  g_watch.outgoing.push_back(message);
  Outgoing& o = g_watch.outgoing.back();
  const void* data = tag == kQueryTag ? static_cast<const void*>(&o.query) : &o.answer;
  const int bytes = tag == kQueryTag ? sizeof(Query) : sizeof(Answer);
  if (MPI_Isend(data, bytes, MPI_BYTE, to, tag, g_watch.comm, &o.request) != MPI_SUCCESS)
    g_watch.outgoing.pop_back();
}

void reply(int to, const Query& q) {
  Outgoing o;
  Answer& a = o.answer;
  a.serial = q.serial;
  const WatchedComm* c = find_comm(q.comm_id);
  a.issued = c ? static_cast<int64_t>(c->collectives) : -1;
  std::string what;
  if (g_watch.current) {
    a.waiting = 1;
    a.waited = g_watch.current_clock->elapsed();
    what = "is waiting in " + describe_op(*g_watch.current) + " (for " + duration_phrase(a.waited) +
           ")";
  } else {
    const std::string activity = comm_activity();
    what = "is not waiting in any communication (busy" +
           (activity.empty() ? std::string() : " in " + activity) + ")";
  }
  std::snprintf(a.what, sizeof a.what, "%s", what.c_str());
  send(std::move(o), to, kAnswerTag);
}

// Completes finished sends and answers the questions that have arrived.
void answer_questions() {
  if (!active()) return;
  for (auto it = g_watch.outgoing.begin(); it != g_watch.outgoing.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? g_watch.outgoing.erase(it) : std::next(it);
  }
  for (int n = 0; n < 64 && g_watch.listening != MPI_REQUEST_NULL; n++) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&g_watch.listening, &arrived, &status) != MPI_SUCCESS || !arrived) return;
    const Query q = g_watch.incoming;
    listen();
    reply(status.MPI_SOURCE, q);
  }
}

// Sets the wait that answers describe, for the scope of one watch_wait.
class CurrentWait {
 public:
  CurrentWait(const WatchedOp& op, const WaitPacer& clock)
      : op_(g_watch.current), clock_(g_watch.current_clock) {
    g_watch.current = &op;
    g_watch.current_clock = &clock;
  }
  ~CurrentWait() {
    g_watch.current = op_;
    g_watch.current_clock = clock_;
  }
  CurrentWait(const CurrentWait&) = delete;
  CurrentWait& operator=(const CurrentWait&) = delete;

 private:
  const WatchedOp* op_;
  const WaitPacer* clock_;
};

// What asking around found.
struct Verdict {
  bool completed = false;  // the operation completed meanwhile
  int rc = MPI_SUCCESS;
  std::string message;
  double defer_seconds = 0;  // rank 0 is waiting too: leave the ending to it this long
};

std::string silent_peer(int rank) {
  const std::string where = describe_peer(rank);
  std::string s = "rank " + std::to_string(rank) + " did not arrive and did not answer: ";
  switch (peer_state(rank)) {
    case PeerState::kStopped:
      return s + "it is stopped (SIGSTOP or a debugger; " + where + ")";
    case PeerState::kEnded:
      return s + "it has ended (" + where + ")";
    case PeerState::kRunning:
      return s + "it may be hung, or busy outside communication (" + where + ", running)";
    case PeerState::kUnknown:
      break;
  }
  return s + "it may be hung or stopped" + (where.empty() ? "" : " (" + where + ")");
}

Verdict ask_around(std::vector<MPI_Request>& requests, const WatchedOp& op, double waited) {
  const WatchedComm& c = *op.comm;
  std::vector<int> targets;  // world ranks this wait needs
  if (op.peer >= 0)
    targets.push_back(c.world_ranks[op.peer]);
  else
    for (int r : c.world_ranks)
      if (r != g_watch.rank) targets.push_back(r);
  std::vector<int> asked = targets;
  if (g_watch.rank != 0 && std::find(asked.begin(), asked.end(), 0) == asked.end())
    asked.push_back(0);
  const uint64_t serial = ++g_watch.serial;
  std::vector<Answer> answers(asked.size());
  std::vector<MPI_Request> receives(asked.size(), MPI_REQUEST_NULL);
  std::vector<char> got(asked.size(), 0);
  auto post = [&](size_t i) {
    MPI_Irecv(&answers[i], sizeof(Answer), MPI_BYTE, asked[i], kAnswerTag, g_watch.comm,
              &receives[i]);
  };
  for (size_t i = 0; i < asked.size(); i++) {
    post(i);
    Outgoing o;
    o.query = {serial, c.id};
    send(std::move(o), asked[i], kQueryTag);
  }
  Verdict v;
  const WaitPacer grace;
  while (grace.elapsed() < kAnswerGrace &&
         std::count(got.begin(), got.end(), 1) < static_cast<long>(asked.size())) {
    int done = 0;
    v.rc =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (v.rc != MPI_SUCCESS || done) {
      v.completed = true;
      break;
    }
    answer_questions();
    for (size_t i = 0; i < asked.size(); i++) {
      int arrived = 0;
      if (got[i] || MPI_Test(&receives[i], &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS || !arrived)
        continue;
      if (answers[i].serial == serial)
        got[i] = 1;
      else
        post(i);  // a late answer to an earlier question
    }
    grace.pause();
  }
  for (size_t i = 0; i < asked.size(); i++)
    if (!got[i] && receives[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(&receives[i]);
      MPI_Wait(&receives[i], MPI_STATUS_IGNORE);
    }
  if (v.completed) return v;

  std::vector<int> missing;
  std::string notes;
  for (size_t i = 0; i < targets.size(); i++) {
    Answer& a = answers[i];
    if (got[i] && op.peer < 0 && a.issued > static_cast<int64_t>(op.seq)) continue;  // arrived
    missing.push_back(targets[i]);
    a.what[sizeof a.what - 1] = 0;
    notes += "; " + (got[i] ? "rank " + std::to_string(targets[i]) + " has not arrived: it " +
                                  std::string(a.what)
                            : silent_peer(targets[i]));
  }
  v.message =
      "rank " + std::to_string(g_watch.rank) + " waited " + duration_phrase(waited) + " (" +
      comm_timeout_setting() + ") in " + describe_op(op) + " for " +
      (missing.empty() ? std::string("no rank") : ranks_phrase(missing)) +
      " (its group: " + group_of(op) + ")" +
      (missing.empty() ? "; every rank of the group has reached it, yet it has not completed"
                       : notes) +
      "; the job is ended";
  const size_t zero = std::find(asked.begin(), asked.end(), 0) - asked.begin();
  if (g_watch.rank != 0 && zero < asked.size() && got[zero] && answers[zero].waiting &&
      answers[zero].waited < comm_timeout_seconds())
    v.defer_seconds =
        comm_timeout_seconds() - answers[zero].waited + kAnswerGrace + kRankZeroMargin;
  return v;
}

}  // namespace

Status start_watch() {
  if (active()) return Status::ok();
  MPI_Comm comm = MPI_COMM_NULL;
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm); rc != MPI_SUCCESS)
    return Status::internal("MPI_Comm_dup (the watch's communicator) failed");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  struct Wire {
    int32_t pid;
    char host[128];
    char node[256];
  } mine{};
  mine.pid = static_cast<int32_t>(getpid());
  gethostname(mine.host, sizeof mine.host - 1);
  char ns[128] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  std::snprintf(mine.node, sizeof mine.node, "%s %s", mine.host, n > 0 ? ns : "");
  std::vector<Wire> all(static_cast<size_t>(size));
  if (int rc =
          MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, comm);
      rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return Status::internal("MPI_Allgather (every rank's process id) failed on rank " +
                            std::to_string(rank));
  }
  std::vector<PeerProcess> peers;
  for (const Wire& w : all) peers.push_back({w.pid, w.host, w.node});
  set_peer_processes(peers, rank);
  g_watch.comm = comm;
  g_watch.rank = rank;
  g_watch.size = size;
  g_watch.world_view.id = 0;
  g_watch.world_view.world_ranks.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; r++) g_watch.world_view.world_ranks[r] = r;
  watch_register(&g_watch.world_view);
  listen();
  return Status::ok();
}

void stop_watch() {
  if (!active()) return;
  std::vector<MPI_Request> barrier(1, MPI_REQUEST_NULL);
  if (MPI_Ibarrier(g_watch.comm, &barrier[0]) == MPI_SUCCESS)
    watch_wait(barrier, {&g_watch.world_view, "barrier before MPI_Finalize",
                         g_watch.world_view.collectives++, -1});
  if (g_watch.listening != MPI_REQUEST_NULL) {
    MPI_Cancel(&g_watch.listening);
    MPI_Wait(&g_watch.listening, MPI_STATUS_IGNORE);
  }
  for (Outgoing& o : g_watch.outgoing) MPI_Wait(&o.request, MPI_STATUS_IGNORE);
  g_watch.outgoing.clear();
  watch_unregister(&g_watch.world_view);
  MPI_Comm_free(&g_watch.comm);
  g_watch.comm = MPI_COMM_NULL;
}

void watch_register(WatchedComm* comm) {
  g_watch.comms.push_back(comm);
}

void watch_unregister(WatchedComm* comm) {
  auto& v = g_watch.comms;
  v.erase(std::remove(v.begin(), v.end(), comm), v.end());
}

int watch_test(std::vector<MPI_Request>& requests, int* done) {
  const int rc =
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), done, MPI_STATUSES_IGNORE);
  answer_questions();
  return rc;
}

int watch_wait(std::vector<MPI_Request>& requests, const WatchedOp& op) {
  const WaitPacer clock;
  const CurrentWait current(op, clock);
  double deadline = comm_timeout_seconds();  // 0: none
  double next_look = kPeerCheckPeriod;
  bool deferred = false;
  for (;;) {
    int done = 0;
    const int rc =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    answer_questions();
    const double t = clock.elapsed();
    if (t >= next_look) {
      next_look = t + kPeerCheckPeriod;
      if (const int peer = ended_peer(); peer >= 0)
        abort_job(peer_ended_message(peer, g_watch.rank, t, describe_op(op), group_of(op)), 1,
                  g_watch.rank);
    }
    if (deadline > 0 && t >= deadline && active()) {
      Verdict v = ask_around(requests, op, deadline);  // says "waited <the timeout>"
      if (v.completed) return v.rc;
      if (!deferred && v.defer_seconds > 0) {
        deferred = true;
        deadline = clock.elapsed() + v.defer_seconds;
        continue;
      }
      abort_job(v.message, 1, g_watch.rank);
    }
    clock.pause();
  }
}

[[noreturn]] void abort_job(const std::string& message, int exit_code, int fallback_rank) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  const bool live = initialised && !finalised;
  int world_rank = fallback_rank;
  if (live) MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::fprintf(stderr, "lattice: rank %d: %s\n", world_rank, message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  run_abort_hook(message);
  if (live) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this is for the compiler and no-MPI
}

}  // namespace lattice
