// The HTTP transport of `lattice serve` around cpp-httplib 0.11.4 (Debian 12's
// libcpp-httplib-dev): what that library leaves open, closed in one place. Every body form is
// bounded (Content-Length and chunked alike), bad framing is answered at once, clients that
// half-closed their side are answered, and every error is answered through reply_error() with
// OpenAI's error object. Not here: the APIs' fields (serve_fields.h, serve_api.h), the queue.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "serve_fields.h"

namespace lattice::cli {

inline constexpr size_t kMaxBodyBytes = 16u << 20;

// Answers `res` with `status` and a JSON body.
void reply_json(httplib::Response& res, int status, const std::string& body);

// The one way an error is answered: `error.status` with serve_api.h's error_body(). `close`:
// the connection ends after the answer (used when the request's body was not read, so what
// follows on the connection is not a request).
void reply_error(httplib::Response& res, const ApiError& error, bool close = false);

// Reads the request's body through `reader` (a route registered with a ContentReader), at most
// `max_body` bytes whatever its form. Nothing when it could not: `res` then holds the answer
// (413 past the limit, 400 for a broken chunked body or a client that stopped sending) and
// the connection closes after it.
std::optional<std::string> read_body(const httplib::Request& req,
                                     const httplib::ContentReader& reader, httplib::Response& res,
                                     size_t max_body);

struct HttpGuardOptions {
  size_t max_body = kMaxBodyBytes;
  int write_timeout_s = 120;  // for answers written to half-closed clients
  // True once the server stops: a stream written to a half-closed client ends then, as the
  // library's own writer ends its streams.
  std::function<bool()> stopping;
  // The 404 answer for a method and path that no route serves.
  std::function<ApiError(const httplib::Request&)> not_found;
};

// Installs the guards on `server`; call it after registering the routes (it adds catch-all
// routes behind them):
// - before any body is read (pre-routing): Content-Length must be digits only and at most
//   max_body (else 400 / 413 at once), Transfer-Encoding only `chunked` and never with a
//   Content-Length, POST / PUT / PATCH / DELETE must say how long their body is (411), other
//   methods carry none;
// - a body sent to a path no route serves is not read: 404, and the connection closes;
// - errors the library answers itself, and exceptions, get reply_error()'s body;
// - answers to clients that half-closed (Note [half-closed clients] in serve_http.cpp).
void install_http_guards(httplib::Server& server, HttpGuardOptions options);

}  // namespace lattice::cli
