// Plain HTTP calls for the server tests (httplib kept out of other TUs).
#ifndef VIGIL_TESTS_SERVER_HTTP_CLIENT_H_
#define VIGIL_TESTS_SERVER_HTTP_CLIENT_H_

#include <string>

namespace vigil::testing {

// Status and body of a response; status -1 if the request failed.
struct HttpResult {
  int status = -1;
  std::string body;
};

// GET http://127.0.0.1:`port``path`.
HttpResult HttpGet(int port, const std::string& path);

// `method` (GET, POST, DELETE) of `path` with a JSON `body`, and
// "Authorization: Bearer `token`" unless the token is empty.
HttpResult HttpCall(int port, const std::string& method, const std::string& path,
                    const std::string& body, const std::string& token);

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_SERVER_HTTP_CLIENT_H_
