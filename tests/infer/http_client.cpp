#include "http_client.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

namespace lattice::testing {

HttpAnswer http_call(int port, const std::string& method, const std::string& path,
                     const std::string& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  httplib::Result r = method == "PUT"    ? c.Put(path, body, "application/json")
                      : method == "POST" ? c.Post(path, body, "application/json")
                                         : c.Get(path);
  if (!r) return {};
  return {r->status, r->body, r->get_header_value("Content-Type"),
          r->get_header_value("Retry-After")};
}

std::string http_post_and_leave(int port, const std::string& path, const std::string& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string first;
  req.content_receiver = [&first](const char* data, size_t n, uint64_t, uint64_t) {
    first.assign(data, n);
    return false;  // cancels the read: the client closes the connection
  };
  (void)c.send(req);
  return first;
}

namespace {

using Clock = std::chrono::steady_clock;

int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Whether `bytes` hold a whole answer whose end is known without the connection closing.
bool complete(const std::string& bytes) {
  const size_t head = bytes.find("\r\n\r\n");
  if (head == std::string::npos) return false;
  const std::string headers = bytes.substr(0, head);
  const size_t cl = headers.find("Content-Length: ");
  if (cl != std::string::npos)
    return bytes.size() >= head + 4 + std::strtoull(headers.c_str() + cl + 16, nullptr, 10);
  return headers.find("Transfer-Encoding: chunked") != std::string::npos && bytes.size() >= 5 &&
         bytes.compare(bytes.size() - 5, 5, "0\r\n\r\n") == 0;
}

// Reads into `out` until the server closes, `deadline`, or (unless `until_close`) the answer
// is complete; out.seconds is taken when the answer is complete.
void read_answer(int fd, RawAnswer& out, Clock::time_point t0, Clock::time_point deadline,
                 bool until_close) {
  char buf[65536];
  for (;;) {
    if (complete(out.bytes) && out.seconds == 0) {
      out.seconds = seconds_since(t0);
      if (!until_close) return;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      out.timed_out = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    out.bytes.append(buf, static_cast<size_t>(n));
  }
  if (out.seconds == 0) out.seconds = seconds_since(t0);
}

}  // namespace

RawAnswer raw_exchange(int port, const std::string& request, bool half_close, int timeout_ms,
                       bool until_close) {
  RawAnswer out;
  const int fd = connect_loopback(port);
  if (fd < 0) return out;
  const auto t0 = Clock::now();
  for (size_t at = 0; at < request.size();) {
    const ssize_t n = send(fd, request.data() + at, request.size() - at, MSG_NOSIGNAL);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
    out.sent = at;
  }
  if (half_close) shutdown(fd, SHUT_WR);
  read_answer(fd, out, t0, t0 + std::chrono::milliseconds(timeout_ms), until_close);
  close(fd);
  return out;
}

RawAnswer raw_exchange_half_closing_after_head(int port, const std::string& request,
                                               int timeout_ms) {
  RawAnswer out;
  const int fd = connect_loopback(port);
  if (fd < 0) return out;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(timeout_ms);
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return out;
  }
  out.sent = request.size();
  char buf[65536];
  while (out.bytes.find("\r\n\r\n") == std::string::npos && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    out.bytes.append(buf, static_cast<size_t>(n));
  }
  shutdown(fd, SHUT_WR);
  if (!out.closed) read_answer(fd, out, t0, deadline, false);
  close(fd);
  return out;
}

RawAnswer send_chunked_until_answered(int port, const std::string& head, size_t chunk_bytes,
                                      size_t max_bytes, int timeout_ms) {
  RawAnswer out;
  const int fd = connect_loopback(port);
  if (fd < 0) return out;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(timeout_ms);
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", chunk_bytes);
  const std::string chunk = size_line + std::string(chunk_bytes, 'a') + "\r\n";
  std::string pending = head;
  size_t body = 0;
  bool ended = false;
  while (Clock::now() < deadline) {
    if (pending.empty() && !ended) {
      if (body + chunk_bytes <= max_bytes) {
        pending = chunk;
        body += chunk_bytes;
      } else {
        pending = "0\r\n\r\n";
        ended = true;
      }
    }
    pollfd p{fd, static_cast<short>(POLLIN | (pending.empty() ? 0 : POLLOUT)), 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) break;  // the answer (or the end) came
    const ssize_t n = send(fd, pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    out.sent += static_cast<size_t>(n);
    pending.erase(0, static_cast<size_t>(n));
  }
  read_answer(fd, out, t0, deadline, false);
  close(fd);
  return out;
}

RawAnswer dribble(int port, const std::string& bytes, int interval_ms, int timeout_ms) {
  return send_then_dribble(port, "", bytes, interval_ms, timeout_ms);
}

RawAnswer send_then_dribble(int port, const std::string& head, const std::string& bytes,
                            int interval_ms, int timeout_ms) {
  RawAnswer out;
  const int fd = connect_loopback(port);
  if (fd < 0) return out;
  const auto t0 = Clock::now();
  if (!head.empty() &&
      send(fd, head.data(), head.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(head.size())) {
    close(fd);
    return out;
  }
  const auto deadline = t0 + std::chrono::milliseconds(timeout_ms);
  char buf[65536];
  size_t at = 0;
  while (Clock::now() < deadline && !out.closed) {
    if (at < bytes.size() && send(fd, bytes.data() + at, 1, MSG_NOSIGNAL) == 1) out.sent = ++at;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, interval_ms) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    out.bytes.append(buf, static_cast<size_t>(n));
  }
  out.timed_out = !out.closed;
  out.seconds = seconds_since(t0);
  close(fd);
  return out;
}

RawAnswer read_answer_on(int fd, int timeout_ms) {
  RawAnswer out;
  const auto t0 = Clock::now();
  read_answer(fd, out, t0, t0 + std::chrono::milliseconds(timeout_ms), false);
  return out;
}

int open_idle_connection(int port) {
  return connect_loopback(port);
}

void close_socket(int fd) {
  if (fd >= 0) close(fd);
}

int raw_status(const std::string& answer) {
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || answer.size() < 12) return -1;
  return std::atoi(answer.c_str() + 9);
}

std::string raw_body(const std::string& answer) {
  const size_t head = answer.find("\r\n\r\n");
  if (head == std::string::npos) return {};
  const std::string rest = answer.substr(head + 4);
  if (answer.substr(0, head).find("Transfer-Encoding: chunked") == std::string::npos) return rest;
  std::string body;
  for (size_t at = 0;;) {
    const size_t eol = rest.find("\r\n", at);
    if (eol == std::string::npos) return {};
    const size_t n = std::strtoull(rest.c_str() + at, nullptr, 16);
    if (n == 0) return body;
    if (eol + 2 + n > rest.size()) return {};
    body += rest.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
}

}  // namespace lattice::testing
