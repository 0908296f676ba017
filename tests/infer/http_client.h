// Loopback HTTP for the server tests: blocking calls through cpp-httplib (kept out of the Qt
// sources, whose moc cannot parse it), and raw-socket clients for what a library client never
// sends: broken framing, half-closed connections, endless chunked bodies.
#pragma once

#include <cstddef>
#include <string>

namespace lattice::testing {

struct HttpAnswer {
  int status = -1;  // -1: no answer (connection failed)
  std::string body;
  std::string content_type;
  std::string retry_after;  // the Retry-After header, "" when none
};

HttpAnswer http_call(int port, const std::string& method, const std::string& path,
                     const std::string& body);

// POSTs body and reads the answer only until its first piece of body arrives, then closes the
// connection (a streaming client that leaves); returns that piece ("" when none came).
std::string http_post_and_leave(int port, const std::string& path, const std::string& body);

// What a raw-socket exchange got back.
struct RawAnswer {
  std::string bytes;       // everything the server sent, until it closed or the time ran out
  bool closed = false;     // the server closed the connection (EOF or reset)
  bool timed_out = false;  // the time ran out first
  double seconds = 0;      // from the first byte sent until the answer was complete
  size_t sent = 0;         // request bytes sent before the answer began
};

// Sends `request` as is; with `half_close` then shuts down its sending side (the request is
// complete: the client waits for the answer). Reads until the server closes the connection,
// `timeout_ms`, or (unless `until_close`) the answer is complete.
RawAnswer raw_exchange(int port, const std::string& request, bool half_close, int timeout_ms,
                       bool until_close = false);

// Sends `request`, reads until the answer's status line and headers have come, then shuts down
// its sending side (so the end of stream reaches the server after it began to answer), and
// reads on until the answer is complete, the server closes, or `timeout_ms`.
RawAnswer raw_exchange_half_closing_after_head(int port, const std::string& request,
                                               int timeout_ms);

// Sends `head` (a request's line and headers, ending in the blank line, with
// Transfer-Encoding: chunked) and then chunks of `chunk_bytes` 'a's until the server answers,
// `max_bytes` of body have gone, or `timeout_ms`; reads the answer while sending.
RawAnswer send_chunked_until_answered(int port, const std::string& head, size_t chunk_bytes,
                                      size_t max_bytes, int timeout_ms);

// Sends `bytes` one byte every `interval_ms` (a slow client), reading what the server answers
// meanwhile; stops when the server answers and closes, or after `timeout_ms`.
RawAnswer dribble(int port, const std::string& bytes, int interval_ms, int timeout_ms);

// Sends `head` at once, then `body` one byte every `interval_ms`, as dribble().
RawAnswer send_then_dribble(int port, const std::string& head, const std::string& body,
                            int interval_ms, int timeout_ms);

// Reads an answer on the open connection `fd` (until it is complete, the server closes, or
// `timeout_ms`); the connection stays open.
RawAnswer read_answer_on(int fd, int timeout_ms);

// A loopback connection that sends nothing (its socket, or -1); close it with close_socket().
int open_idle_connection(int port);
void close_socket(int fd);

// The status code of a raw answer (-1 when there is none) and its body (Content-Length or
// chunked; "" when incomplete).
int raw_status(const std::string& answer);
std::string raw_body(const std::string& answer);

}  // namespace lattice::testing
