// Plain HTTP calls for the server tests (httplib kept out of other TUs).
#ifndef VIGIL_TESTS_SERVER_HTTP_CLIENT_H_
#define VIGIL_TESTS_SERVER_HTTP_CLIENT_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace httplib {
class Client;
}  // namespace httplib

namespace vigil::testing {

// Request headers: (name, value) pairs.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Status and body of a response; status -1 if the request failed.
struct HttpResult {
  int status = -1;
  std::string body;
  std::string content_length;  // the header's value; HttpCall only
};

// GET http://127.0.0.1:`port``path`.
HttpResult HttpGet(int port, const std::string& path);

// `method` (GET, HEAD, OPTIONS, POST, DELETE) of `path` with a JSON `body`,
// and "Authorization: Bearer `token`" unless the token is empty.
HttpResult HttpCall(int port, const std::string& method, const std::string& path,
                    const std::string& body, const std::string& token);

// `method` (GET, POST, DELETE) of `path` with a JSON `body` and `headers`;
// the response's headers go to `response_headers` unless it is null.
HttpResult HttpSend(int port, const std::string& method, const std::string& path,
                    const std::string& body, const HttpHeaders& headers,
                    std::multimap<std::string, std::string>* response_headers = nullptr);

// A GET of a server-sent-events `path` read on a background thread until
// Close() (or destruction); what arrives is collected as text.
class EventStream {
 public:
  EventStream(int port, const std::string& path, const HttpHeaders& headers = {});
  ~EventStream();

  // Waits until `done` holds for the text received so far, or until
  // `timeout_seconds` have passed or the stream ended; returns whether it
  // held.
  bool WaitUntil(const std::function<bool(const std::string&)>& done,
                 double timeout_seconds);
  // The text received so far.
  std::string text() const;
  // The response status; -1 until the headers arrived.
  int status() const;
  // Ends the request and joins the reader thread.
  void Close();

 private:
  std::unique_ptr<httplib::Client> client_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
  int status_ = -1;
  bool ended_ = false;
  std::thread reader_;
};

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_SERVER_HTTP_CLIENT_H_
