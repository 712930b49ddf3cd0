// A loopback HTTP server for the vigilctl tests: records every request and
// answers each with a canned response (httplib kept in one TU).
#ifndef VIGIL_TESTS_CTL_RECORDING_SERVER_H_
#define VIGIL_TESTS_CTL_RECORDING_SERVER_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace vigil::testing {

// One request as the server saw it.
struct RecordedRequest {
  std::string method;
  std::string target;  // raw path and query, as sent
  std::string path;    // decoded path
  std::multimap<std::string, std::string> params;  // decoded query
  std::string body;
  std::string authorization;  // "" when absent
  std::string content_type;   // "" when absent
};

// Listens on 127.0.0.1:0 from construction to destruction. Thread-safe.
class RecordingServer {
 public:
  RecordingServer();
  ~RecordingServer();
  RecordingServer(const RecordingServer&) = delete;
  RecordingServer& operator=(const RecordingServer&) = delete;

  // "http://127.0.0.1:<port>".
  std::string url() const;
  // Answers `method` on `raw_path` (the target as sent, without the
  // query) with `status` and JSON `body`. Anything else gets 404
  // {"error": "no route ..."}.
  void Answer(const std::string& method, const std::string& raw_path,
              int status, std::string body);
  // Every request so far, oldest first.
  std::vector<RecordedRequest> requests() const;

 private:
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  // (method, raw path) -> (status, body).
  std::map<std::pair<std::string, std::string>, std::pair<int, std::string>>
      answers_ ABSL_GUARDED_BY(mu_);
  std::vector<RecordedRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_CTL_RECORDING_SERVER_H_
