// The HTTP helpers live alone: httplib.h is costly to compile.
#include "httplib.h"
#include "tests/server/http_client.h"

#include <chrono>

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
      method == "GET"       ? client.Get(path.c_str(), headers)
      : method == "HEAD"    ? client.Head(path.c_str(), headers)
      : method == "OPTIONS" ? client.Options(path.c_str(), headers)
      : method == "POST"    ? client.Post(path.c_str(), headers, body, "application/json")
                            : client.Delete(path.c_str(), headers, body, "application/json");
  if (!res) return {};
  const auto length = res->headers.find("Content-Length");
  return {res->status, res->body,
          length == res->headers.end() ? std::string() : length->second};
}

HttpResult HttpSend(int port, const std::string& method, const std::string& path,
                    const std::string& body, const HttpHeaders& headers,
                    std::multimap<std::string, std::string>* response_headers) {
  httplib::Client client("127.0.0.1", port);
  httplib::Headers h(headers.begin(), headers.end());
  httplib::Result res =
      method == "GET"    ? client.Get(path.c_str(), h)
      : method == "POST" ? client.Post(path.c_str(), h, body, "application/json")
                         : client.Delete(path.c_str(), h, body, "application/json");
  if (!res) return {};
  if (response_headers != nullptr)
    response_headers->insert(res->headers.begin(), res->headers.end());
  return {res->status, res->body};
}

EventStream::EventStream(int port, const std::string& path, const HttpHeaders& headers)
    : client_(std::make_unique<httplib::Client>("127.0.0.1", port)) {
  // The server may stay quiet between notices longer than the default 5 s.
  client_->set_read_timeout(std::chrono::seconds(120));
  reader_ = std::thread([this, path, h = httplib::Headers(headers.begin(), headers.end())] {
    client_->Get(
        path.c_str(), h,
        [this](const httplib::Response& res) {
          std::lock_guard<std::mutex> l(mu_);
          status_ = res.status;
          cv_.notify_all();
          return true;
        },
        [this](const char* data, size_t size) {
          std::lock_guard<std::mutex> l(mu_);
          text_.append(data, size);
          cv_.notify_all();
          return true;
        });
    std::lock_guard<std::mutex> l(mu_);
    ended_ = true;
    cv_.notify_all();
  });
}

EventStream::~EventStream() { Close(); }

bool EventStream::WaitUntil(const std::function<bool(const std::string&)>& done,
                            double timeout_seconds) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::duration<double>(timeout_seconds),
               [&] { return ended_ || done(text_); });
  return done(text_);
}

std::string EventStream::text() const {
  std::lock_guard<std::mutex> l(mu_);
  return text_;
}

int EventStream::status() const {
  std::lock_guard<std::mutex> l(mu_);
  return status_;
}

void EventStream::Close() {
  if (!reader_.joinable()) return;
  {
    // stop() only interrupts a request in flight: wait for it to start.
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(30), [&] { return ended_ || status_ != -1; });
  }
  client_->stop();
  reader_.join();
}

}  // namespace vigil::testing
