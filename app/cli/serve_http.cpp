// The HTTP guards of `lattice serve` (serve_http.h), written against cpp-httplib 0.11.4: its
// server reads a chunked body whole whatever set_payload_max_length says, skips an over-long
// Content-Length body by reading it to its end (a negative one until the read timeout), reads
// a POST without a length until the client closes, and will not write to a client that has
// shut down its sending side. Each is answered here before the library gets to it.
#include "serve_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "serve_api.h"
#include "serve_connections.h"

namespace lattice::cli {

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 416:
      return "Range Not Satisfiable";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

ApiError transport_error(int status, std::string message, std::string code = {}) {
  return ApiError{status, std::move(message), "",
                  status >= 500 && status != 501 ? "server_error" : "invalid_request_error",
                  std::move(code)};
}

// After check_framing() passed: whether a body follows the headers.
bool has_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > 0;
}

bool takes_body(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH";
}

// What must be refused before the library reads a body (serve_http.h, install_http_guards).
std::optional<ApiError> check_framing(const httplib::Request& req, size_t max_body) {
  static const std::set<std::string> kMethods = {"GET", "HEAD",  "OPTIONS", "POST",
                                                 "PUT", "PATCH", "DELETE"};
  if (!kMethods.count(req.method))
    return transport_error(501, "method " + req.method + " is not supported");
  const size_t te = req.get_header_value_count("Transfer-Encoding");
  const size_t cl = req.get_header_value_count("Content-Length");
  if (te > 1 ||
      (te == 1 && strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") != 0))
    return transport_error(501, "Transfer-Encoding: " + req.get_header_value("Transfer-Encoding") +
                                    " is not supported (only chunked)");
  if (te == 1 && cl > 0)
    return transport_error(400, "a request carries Transfer-Encoding or Content-Length, not both");
  if (cl > 1) return transport_error(400, "a request carries one Content-Length, not several");
  uint64_t length = 0;
  if (cl == 1) {
    const std::string v = req.get_header_value("Content-Length");
    const bool digits =
        !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      return transport_error(400, "Content-Length: " + v.substr(0, 40) +
                                      " is not a length (a count of bytes, digits only)");
    length = std::strtoull(v.c_str(), nullptr, 10);
    if (length > max_body)
      return transport_error(413,
                             "the request body has " + v + " bytes; at most " +
                                 std::to_string(max_body) + " are accepted",
                             "request_too_large");
  }
  const bool body = te == 1 || length > 0;
  if (body && !takes_body(req.method) && req.method != "DELETE")
    return transport_error(400, "a " + req.method + " request carries no body");
  if (!body && cl == 0 && takes_body(req.method))
    return transport_error(411, "a " + req.method +
                                    " request needs a Content-Length or Transfer-Encoding: "
                                    "chunked");
  return std::nullopt;
}

// Note [half-closed clients]: cpp-httplib 0.11.4's SocketStream::write() first asks
// is_socket_alive(), which peeks at the socket and takes a pending end of stream for a peer
// that is gone. A client that shut down its sending side after its request (shutdown(SHUT_WR),
// `nc -N`, some proxies) is still reading, but the library writes it nothing and closes. The
// post-routing handler runs just before the library writes the status line: it finds the
// connection's socket (the one whose two ends are the request's addresses) and, when the
// library would take its peer for gone, writes the whole answer itself with Connection: close.
// Then it shuts down its sending side, so the library's own writes fail without sending
// anything (whether or not the client half-closed), and the library closes the connection.
// A stream (a chunked provider) is always written here, whether or not the end of stream has
// arrived yet: the library checks before every write, so a client whose half-close arrives
// during the stream (or just after the check above) would lose the rest of it, and a peeked end
// of stream is not a client that left (a write fails for one that closed). A plain answer is
// written by the library when no end of stream is pending; a client that half-closes between
// that check and the library's first write (microseconds) is not answered, as before.

// The address as cpp-httplib writes it into the request (getnameinfo, numeric).
bool same_host(const sockaddr_storage& a, socklen_t len, const std::string& host) {
  char name[NI_MAXHOST];
  return getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, name, sizeof name, nullptr, 0,
                     NI_NUMERICHOST) == 0 &&
         host == name;
}

bool is_connection_of(int fd, const httplib::Request& req) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (port_of(local) != req.local_port) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return port_of(peer) == req.remote_port && same_host(peer, peer_len, req.remote_addr) &&
         same_host(local, local_len, req.local_addr);
}

// The socket of the connection `req` came on, or -1: the one the HTTP thread serves
// (serve_connections.h), checked against the request's addresses.
int connection_socket(const httplib::Request& req) {
  const int fd = ServeServer::current_socket();
  return fd >= 0 && is_connection_of(fd, req) ? fd : -1;
}

// The library's is_socket_alive() turned around: something to read, and it is the end.
bool library_takes_peer_for_gone(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

bool writable_now(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP));
}

bool write_all(int fd, const char* data, size_t size, int timeout_s) {
  while (size > 0) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, timeout_s * 1000) != 1 || (p.revents & (POLLERR | POLLHUP))) return false;
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool write_all(int fd, const std::string& s, int timeout_s) {
  return write_all(fd, s.data(), s.size(), timeout_s);
}

// Runs the response's content provider to its end, writing what it gives to `fd` (chunked
// framing for a chunked provider, as the library would).
bool drive_provider(int fd, httplib::Response& res, int timeout_s,
                    const std::function<bool()>& stopping) {
  const bool chunked = res.is_chunked_content_provider_;
  const size_t length = res.content_length_;
  size_t offset = 0;
  bool more = true, ok = true;
  httplib::DataSink sink;
  sink.write = [&](const char* d, size_t n) {
    if (!ok || n == 0) return ok;
    if (chunked) {
      char size_line[24];
      std::snprintf(size_line, sizeof size_line, "%zx\r\n", n);
      ok = write_all(fd, size_line, std::strlen(size_line), timeout_s) &&
           write_all(fd, d, n, timeout_s) && write_all(fd, "\r\n", 2, timeout_s);
    } else {
      ok = write_all(fd, d, n, timeout_s);
    }
    offset += n;
    return ok;
  };
  sink.done = [&] {
    more = false;
    if (ok && chunked) ok = write_all(fd, "0\r\n\r\n", 5, timeout_s);
  };
  sink.is_writable = [&] { return ok && writable_now(fd); };
  while (ok && (length > 0 ? offset < length : more) && !(stopping && stopping())) {
    if (!res.content_provider_(offset, length > 0 ? length - offset : 0, sink)) break;
  }
  return ok;
}

void answer_outside_the_library(const httplib::Request& req, httplib::Response& res,
                                const HttpGuardOptions& options) {
  const int fd = connection_socket(req);
  const bool stream = res.content_provider_ && res.is_chunked_content_provider_;
  if (fd < 0 || (!stream && !library_takes_peer_for_gone(fd))) return;
  res.headers.erase("Connection");
  res.headers.erase("Keep-Alive");
  res.set_header("Connection", "close");
  if (stream) res.headers.erase("Content-Encoding");  // written as it comes, not compressed
  std::string head =
      "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
  for (const auto& [key, value] : res.headers) head += key + ": " + value + "\r\n";
  head += "\r\n";
  const int timeout = options.write_timeout_s;
  if (write_all(fd, head, timeout) && req.method != "HEAD") {
    if (!res.body.empty()) {
      (void)write_all(fd, res.body, timeout);
    } else if (res.content_provider_) {
      (void)drive_provider(fd, res, timeout, options.stopping);
      // Spent: the library is left a provider that ends at once.
      res.content_provider_ = [](size_t, size_t, httplib::DataSink&) { return false; };
    }
  }
  // The answer is complete: nothing more may follow it. The library would otherwise write its
  // own status line and headers after a stream to a client that has not half-closed (Node's
  // HTTP parser, under OpenAI's client, fails on "data after Connection: close"); after this
  // its writes fail (EPIPE, without SIGPIPE: it sends with MSG_NOSIGNAL) and it closes.
  ::shutdown(fd, SHUT_WR);
}

}  // namespace

void reply_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void reply_error(httplib::Response& res, const ApiError& error, bool close) {
  if (!close) return reply_json(res, error.status, error_body(error));
  // cpp-httplib 0.11.4 ends a keep-alive connection only when a write fails: the body goes
  // through a provider that writes it all, then reports a failure.
  res.status = error.status;
  auto body = std::make_shared<std::string>(error_body(error));
  res.set_header("Connection", "close");
  res.set_content_provider(body->size(), "application/json",
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body->data() + offset, length);
                             return false;
                           });
}

std::optional<std::string> read_body(const httplib::Request& req,
                                     const httplib::ContentReader& reader, httplib::Response& res,
                                     size_t max_body) {
  // One allocation at the most that is accepted: the pages a short body does not touch cost no
  // memory, and a long one is never copied to grow (which held 1.5 times the limit at once).
  const uint64_t announced =
      req.has_header("Content-Length")  // checked against max_body before routing
          ? std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10)
          : max_body;
  std::string body;
  body.reserve(std::min<uint64_t>(max_body, announced));
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t n) {
    if (body.size() + n > max_body) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  ServeServer::body_read();
  if (read) return body;
  if (too_large)
    reply_error(res,
                transport_error(413,
                                "the request body is longer than " + std::to_string(max_body) +
                                    " bytes, the most that is accepted",
                                "request_too_large"),
                true);
  else
    reply_error(res,
                transport_error(400,
                                "the request body could not be read (a broken chunked "
                                "encoding, or the client stopped sending)"),
                true);
  return std::nullopt;
}

void install_http_guards(httplib::Server& server, HttpGuardOptions options) {
  const size_t max_body = options.max_body;
  server.set_payload_max_length(max_body);
  // A client that asks before sending its body (Expect: 100-continue, as curl does for large
  // ones) hears the refusal instead of "go on".
  server.set_expect_100_continue_handler(
      [max_body](const httplib::Request& req, httplib::Response& res) {
        std::optional<ApiError> e = check_framing(req, max_body);
        if (!e) return 100;
        reply_error(res, *e, /*close=*/true);
        return e->status;
      });
  server.set_pre_routing_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    std::optional<ApiError> e = check_framing(req, max_body);
    ServeServer::head_read(!e && has_body(req));
    if (!e) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, *e, /*close=*/true);
    return httplib::Server::HandlerResponse::Handled;
  });
  // Behind the routes: a body for a path that none serves is not read.
  auto not_found = options.not_found;
  const httplib::Server::HandlerWithContentReader unrouted =
      [not_found](const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader&) {
        reply_error(res, not_found(req), /*close=*/has_body(req));
      };
  server.Post(".*", unrouted);
  server.Put(".*", unrouted);
  server.Patch(".*", unrouted);
  server.Delete(".*", unrouted);
  server.set_error_handler([not_found](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return;  // answered already
    if (res.status == 404) return reply_error(res, not_found(req));
    reply_error(res, transport_error(res.status, "HTTP error " + std::to_string(res.status) + " (" +
                                                     reason_phrase(res.status) + ")"));
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        reply_error(res, transport_error(500, what));
      });
  server.set_post_routing_handler([options](const httplib::Request& req, httplib::Response& res) {
    if (res.get_header_value("Connection") == "close") res.headers.erase("Keep-Alive");
    answer_outside_the_library(req, res, options);
  });
}

}  // namespace lattice::cli
