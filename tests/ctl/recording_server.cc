#include "tests/ctl/recording_server.h"

#include "httplib.h"

namespace vigil::testing {

RecordingServer::RecordingServer() : server_(new httplib::Server) {
  const auto handler = [this](const httplib::Request& req,
                              httplib::Response& res) {
    RecordedRequest recorded{req.method,
                             req.target,
                             req.path,
                             {req.params.begin(), req.params.end()},
                             req.body,
                             req.get_header_value("Authorization"),
                             req.get_header_value("Content-Type")};
    const std::string raw_path = req.target.substr(0, req.target.find('?'));
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(std::move(recorded));
    auto it = answers_.find({req.method, raw_path});
    if (it == answers_.end()) {
      res.status = 404;
      res.set_content(
          R"({"error": "no route for )" + req.method + " " + raw_path + "\"}",
          "application/json");
      return;
    }
    res.status = it->second.first;
    res.set_content(it->second.second, "application/json");
  };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Delete(".*", handler);
  port_ = server_->bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) std::this_thread::yield();
}

RecordingServer::~RecordingServer() {
  server_->stop();
  thread_.join();
}

std::string RecordingServer::url() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

void RecordingServer::Answer(const std::string& method,
                             const std::string& raw_path, int status,
                             std::string body) {
  std::lock_guard<std::mutex> lock(mu_);
  answers_[{method, raw_path}] = {status, std::move(body)};
}

std::vector<RecordedRequest> RecordingServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

}  // namespace vigil::testing
