#include "http_client.h"

#include <httplib.h>

namespace lattice::testing {

HttpAnswer http_call(int port, const std::string& method, const std::string& path,
                     const std::string& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  httplib::Result r = method == "PUT"    ? c.Put(path, body, "application/json")
                      : method == "POST" ? c.Post(path, body, "application/json")
                                         : c.Get(path);
  if (!r) return {};
  return {r->status, r->body, r->get_header_value("Content-Type")};
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

}  // namespace lattice::testing
