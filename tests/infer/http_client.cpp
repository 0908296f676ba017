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

}  // namespace lattice::testing
