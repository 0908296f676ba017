// Note [serve connections]. What `lattice serve` adds to cpp-httplib 0.11.4's connection
// handling, and why each piece is where it is:
//
// - Backlog. The library listens with a backlog of 5: under a burst of new connections the
//   kernel drops SYNs (the client retries after a second: p99 latencies of 1 s) or resets them.
//   The library hands its listening socket to the socket-options callback before binding, so
//   the socket is known here, and listen() on a listening socket sets its backlog again.
// - One thread per connection. The library serves a connection on one thread of its task queue
//   until the connection closes, so a fixed pool of N threads serves N keep-alive clients and
//   the N+1st waits, unanswered, until one leaves. ConnectionThreads makes a thread per
//   connection up to max_connections (and a few more to refuse with), keeping idle ones.
// - The limit. A connection past max_connections is answered 503 with Retry-After and closed
//   gracefully: the server shuts its sending side and reads what the client still sends (up to
//   two seconds) before closing, so the client reads the answer instead of a reset.
// - Clocks. The library times each read (a client sending a byte every few seconds is never
//   timed out) and the wait for the next request on a keep-alive connection. A watcher thread
//   holds a deadline per connection: the head of a request within head_timeout_s of the
//   connection or the previous answer (plus idle_timeout_s after an answer), the body within
//   body_timeout_s of the head; none while a request is served (generation can take long).
//   The route code says when each phase ends (head_read from pre-routing, body_read from
//   read_body, the logger after every answer). Past a deadline the watcher writes a 408 and
//   shuts the socket down, which ends the library's read; the library closes the socket. The
//   watcher holds a duplicate of the socket, so a number the library has closed and the kernel
//   has given to a new connection is never shut down by mistake.
// - Which socket. The job the library queues for a connection does not name its socket (and
//   the library's per-connection function is private). The task queue's enqueue() runs on the
//   listening thread right after accept() and before the next one, so the new connection is the
//   one socket connected to this server's port that no registered connection holds (known by
//   inode; /proc/self/fd, a few microseconds per open file, once per connection).
#include "serve_connections.h"

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "serve_api.h"

namespace lattice::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Threads beyond max_connections, which only refuse connections (each for at most ~2 s).
constexpr size_t kRefusingThreads = 16;

thread_local ServeServer* t_server = nullptr;

// The whole of `text` to `fd`, within `timeout_ms`; false when it could not be.
bool send_all(int fd, const std::string& text, int timeout_ms) {
  size_t at = 0;
  const Clock::time_point end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (at < text.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    pollfd p{fd, POLLOUT, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) != 1) return false;
    const ssize_t n = send(fd, text.data() + at, text.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// A complete answer that closes the connection, written outside the library.
std::string closing_answer(int status, const char* reason, const ApiError& error,
                           const std::string& extra_headers) {
  const std::string body = error_body(error);
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra_headers + "\r\n" + body;
}

}  // namespace

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

std::string check_connection_limits(const ConnectionLimits& limits) {
  if (limits.max_connections < 1) return "--max-connections must be 1 or more";
  if (limits.backlog < 1) return "--listen-backlog must be 1 or more";
  if (limits.head_timeout_s < 1 || limits.body_timeout_s < 1 || limits.idle_timeout_s < 1)
    return "--header-timeout, --body-timeout and --keep-alive-timeout must be 1 s or more";
  // Each connection holds its socket and the watcher's duplicate; 64 for everything else.
  const rlim_t needed = 2 * static_cast<rlim_t>(limits.max_connections) + kRefusingThreads + 64;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return "";
  if (files.rlim_cur < needed && files.rlim_max >= needed) {
    files.rlim_cur = needed;
    if (setrlimit(RLIMIT_NOFILE, &files) == 0) return "";
  }
  if (files.rlim_cur >= needed) return "";
  return "--max-connections " + std::to_string(limits.max_connections) + " needs " +
         std::to_string(needed) + " open files, and this process may open " +
         std::to_string(files.rlim_cur) +
         " (ulimit -n); lower --max-connections or raise the limit";
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
  std::function<void()> job = admit_ ? admit_(std::move(fn)) : std::move(fn);
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.push_back(std::move(job));
  if (jobs_.size() > idle_ && threads_.size() < max_threads_)
    threads_.emplace_back([this] { work(); });
  ready_.notify_one();
}

void ConnectionThreads::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    threads.swap(threads_);
  }
  ready_.notify_all();
  for (std::thread& t : threads) t.join();
}

void ConnectionThreads::work() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_++;
      ready_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      idle_--;
      if (jobs_.empty()) return;  // stopping, nothing left
      fn = std::move(jobs_.front());
      jobs_.pop_front();
    }
    fn();
  }
}

thread_local ServeServer::Connection* ServeServer::current_ = nullptr;

ServeServer::ServeServer(ConnectionLimits limits) : limits_(limits) {
  const size_t threads = static_cast<size_t>(limits_.max_connections) + kRefusingThreads;
  new_task_queue = [this, threads] {
    return new ConnectionThreads(threads, [this](std::function<void()> serve_connection) {
      return admit(std::move(serve_connection));
    });
  };
  set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  set_keep_alive_timeout(limits_.idle_timeout_s);
  // Each read: a client that stops sending for this long is gone (the deadlines above bound
  // the whole head and body).
  set_read_timeout(std::max(limits_.head_timeout_s, limits_.body_timeout_s), 0);
  set_logger([](const httplib::Request&, const httplib::Response&) {
    if (t_server && current_) t_server->set_phase(*current_, Phase::kIdle);
  });
  watcher_ = std::thread([this] { watch(); });
}

ServeServer::~ServeServer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_watch_ = true;
  }
  wake_.notify_all();
  watcher_.join();
}

bool ServeServer::apply_backlog() {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (listen_fd_ < 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return false;
  listen_port_ = port_of(local);
  return ::listen(listen_fd_, limits_.backlog) == 0;
}

void ServeServer::head_read(bool body_follows) {
  if (t_server && current_)
    t_server->set_phase(*current_, body_follows ? Phase::kBody : Phase::kServing);
}

void ServeServer::body_read() {
  if (t_server && current_) t_server->set_phase(*current_, Phase::kServing);
}

int ServeServer::current_socket() {
  return current_ ? current_->socket : -1;
}

void ServeServer::set_phase(Connection& c, Phase phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  c.phase = phase;
  const Clock::time_point now = Clock::now();
  switch (phase) {
    case Phase::kHead:
      c.deadline = now + std::chrono::seconds(limits_.head_timeout_s);
      break;
    case Phase::kBody:
      c.deadline = now + std::chrono::seconds(limits_.body_timeout_s);
      break;
    case Phase::kServing:
      c.deadline = Clock::time_point::max();
      break;
    case Phase::kIdle:
      c.deadline = now + std::chrono::seconds(limits_.idle_timeout_s + limits_.head_timeout_s);
      break;
  }
}

void ServeServer::close_idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [inode, c] : connections_)
    if (c->phase == Phase::kIdle || c->phase == Phase::kHead) ::shutdown(c->watch_fd, SHUT_RDWR);
}

void ServeServer::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_watch_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    const Clock::time_point now = Clock::now();
    for (const auto& [inode, c] : connections_) {
      if (c->deadline > now || c->watch_fd < 0) continue;
      if (c->phase == Phase::kHead || c->phase == Phase::kBody) {
        const bool head = c->phase == Phase::kHead;
        const int limit = head ? limits_.head_timeout_s : limits_.body_timeout_s;
        const ApiError e{
            408,
            std::string(head ? "the request's line and headers" : "the request's body") +
                " did not arrive within " + std::to_string(limit) + " s",
            "", "invalid_request_error", "request_timeout"};
        (void)send_all(c->watch_fd, closing_answer(408, "Request Timeout", e, ""), 100);
      }
      ::shutdown(c->watch_fd, SHUT_RDWR);
      c->deadline = Clock::time_point::max();  // once
    }
  }
}

void ServeServer::refuse(socket_t sock) const {
  const ApiError e{503,
                   "the server is serving its limit of " + std::to_string(limits_.max_connections) +
                       " connections (--max-connections); retry after 1 s",
                   "", "server_error", "server_busy"};
  (void)send_all(sock, closing_answer(503, "Service Unavailable", e, "Retry-After: 1\r\n"), 1000);
  ::shutdown(sock, SHUT_WR);
  // Read what the client still sends (its request), so that closing does not reset the
  // connection before the client has read the answer.
  const Clock::time_point end = Clock::now() + std::chrono::seconds(2);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    pollfd p{sock, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) != 1) break;
    if (recv(sock, buf, sizeof buf, MSG_DONTWAIT) <= 0) break;
  }
}

// On the listening thread, right after the library accepted a connection and before it
// accepts the next: the one connected socket of this server that no registered connection
// holds (registered ones are known by inode, which a closed socket keeps while the watcher's
// duplicate is open).
int ServeServer::accepted_socket() {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  std::lock_guard<std::mutex> lock(mutex_);
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    struct stat st {};
    if (fd == dirfd(dir) || fd == listen_fd_ || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
        connections_.count(st.st_ino))
      continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        port_of(local) != listen_port_)
      continue;
    found = fd;
    break;
  }
  closedir(dir);
  return found;
}

std::function<void()> ServeServer::admit(std::function<void()> serve_connection) {
  auto c = std::make_shared<Connection>();
  c->socket = accepted_socket();
  struct stat st {};
  if (c->socket >= 0 && fstat(c->socket, &st) == 0) {
    c->inode = st.st_ino;
    c->watch_fd = ::dup(c->socket);
  }
  if (c->watch_fd >= 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    c->deadline = Clock::time_point::max();  // the clock starts when a thread serves it
    connections_[c->inode] = c;
  }
  return [this, c, serve_connection = std::move(serve_connection)] { serve(c, serve_connection); };
}

void ServeServer::serve(const std::shared_ptr<Connection>& c,
                        const std::function<void()>& serve_connection) {
  if (active_.fetch_add(1) >= limits_.max_connections && c->socket >= 0) {
    refuse(c->socket);
    ::close(c->socket);  // the library's job, which would have closed it, does not run
  } else {
    set_phase(*c, Phase::kHead);
    t_server = this;
    current_ = c.get();
    serve_connection();  // the library serves the connection, then closes its socket
    current_ = nullptr;
  }
  active_.fetch_sub(1);
  std::lock_guard<std::mutex> lock(mutex_);
  if (c->watch_fd >= 0) {
    connections_.erase(c->inode);
    ::close(c->watch_fd);
    c->watch_fd = -1;
  }
}

}  // namespace lattice::cli
