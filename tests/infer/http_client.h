// A blocking loopback HTTP call for the server tests (cpp-httplib kept out of the Qt sources,
// whose moc cannot parse it).
#pragma once

#include <string>

namespace lattice::testing {

struct HttpAnswer {
  int status = -1;  // -1: no answer (connection failed)
  std::string body;
  std::string content_type;
};

HttpAnswer http_call(int port, const std::string& method, const std::string& path,
                     const std::string& body);

// POSTs body and reads the answer only until its first piece of body arrives, then closes the
// connection (a streaming client that leaves); returns that piece ("" when none came).
std::string http_post_and_leave(int port, const std::string& path, const std::string& body);

}  // namespace lattice::testing
