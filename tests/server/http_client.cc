// HttpGet lives alone: httplib.h is costly to compile.
#include "httplib.h"
#include "tests/server/http_client.h"

namespace vigil::testing {

HttpResult HttpGet(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result res = client.Get(path.c_str());
  if (!res) return {};
  return {res->status, res->body};
}

}  // namespace vigil::testing
