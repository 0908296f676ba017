// The connections of `lattice serve`: how many are served at once, how long a client may take
// to send a request, and what a client beyond the limit hears. cpp-httplib 0.11.4 (Debian 12's
// compiled library) listens with a backlog of 5, serves each connection on one thread of its
// task queue for the connection's whole keep-alive life, and times reads one at a time, so a
// client sending a byte every few seconds holds a thread for ever. Note [serve connections] in
// serve_connections.cpp says how each is closed here.
#pragma once

#include <httplib.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lattice::cli {

struct ConnectionLimits {
  int max_connections = 1024;  // served at once; one more hears 503 with Retry-After
  int backlog = 1024;          // the listen backlog (the kernel caps it at net.core.somaxconn)
  int head_timeout_s = 10;     // a request's line and headers arrive within this
  int body_timeout_s = 60;     // its body (at most 16 MiB) within this once the head is in
  int idle_timeout_s = 30;     // a keep-alive connection without a request closes after this
};

// The port of a socket address (IPv4 or IPv6), or -1.
int port_of(const sockaddr_storage& address);

// What is wrong with `limits` for this process (the flags named), or "" when nothing. Raises
// the soft limit on open files to what max_connections needs when the hard limit allows.
std::string check_connection_limits(const ConnectionLimits& limits);

// One thread per connection being served, made when needed and kept while idle, at most
// `max_threads`; connections beyond wait in order. `admit` turns each job the library queues
// (serving one accepted connection) into the job that runs, on the thread that queues it.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  using Admit = std::function<std::function<void()>(std::function<void()>)>;
  ConnectionThreads(size_t max_threads, Admit admit)
      : max_threads_(max_threads), admit_(std::move(admit)) {}
  ~ConnectionThreads() override { shutdown(); }
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;  // runs what is queued, then joins every thread

 private:
  void work();

  const size_t max_threads_;
  const Admit admit_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

class ServeServer : public httplib::Server {
 public:
  explicit ServeServer(ConnectionLimits limits);
  ~ServeServer() override;

  // After bind_to_port / bind_to_any_port: the listen backlog raised to limits.backlog (the
  // library listens with 5). False when the kernel refuses.
  bool apply_backlog();

  // Called on the HTTP thread serving the request, which serves one connection at a time:
  // the request's head has been read (pre-routing); a body follows or not.
  static void head_read(bool body_follows);
  // The request's body has been read: the request is served, without a clock.
  static void body_read();
  // The socket of the connection this thread serves, or -1.
  static int current_socket();

  // Ends every connection that waits for a request, at once (the server is stopping).
  void close_idle();
  int connections() const { return active_.load(); }
  const ConnectionLimits& limits() const { return limits_; }

 private:
  enum class Phase { kHead, kBody, kServing, kIdle };
  struct Connection {
    int socket = -1;    // -1: not found (served without clocks)
    int watch_fd = -1;  // a duplicate of the socket, so that it is never another's
    ino_t inode = 0;    // a duplicate of the socket, so that it is never another's
    Phase phase = Phase::kHead;
    std::chrono::steady_clock::time_point deadline;
  };
  std::function<void()> admit(std::function<void()> serve);
  int accepted_socket();
  void serve(const std::shared_ptr<Connection>& c, const std::function<void()>& serve);
  void set_phase(Connection& c, Phase phase);
  void watch();
  void refuse(socket_t sock) const;

  static thread_local Connection* current_;  // the connection this thread serves

  ConnectionLimits limits_;
  int listen_fd_ = -1;
  int listen_port_ = -1;
  std::atomic<int> active_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<ino_t, std::shared_ptr<Connection>> connections_;  // by the socket's inode
  bool stop_watch_ = false;
  std::thread watcher_;
};

}  // namespace lattice::cli
