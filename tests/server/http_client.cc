// The HTTP helpers live alone: httplib.h is costly to compile.
#include "httplib.h"
#include "tests/server/http_client.h"

namespace vigil::testing {

HttpResult HttpGet(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result res = client.Get(path.c_str());
  if (!res) return {};
  return {res->status, res->body};
}

HttpResult HttpCall(int port, const std::string& method, const std::string& path,
                    const std::string& body, const std::string& token) {
  httplib::Client client("127.0.0.1", port);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result res =
      method == "GET"    ? client.Get(path.c_str(), headers)
      : method == "POST" ? client.Post(path.c_str(), headers, body, "application/json")
                         : client.Delete(path.c_str(), headers, body, "application/json");
  if (!res) return {};
  return {res->status, res->body};
}

}  // namespace vigil::testing
