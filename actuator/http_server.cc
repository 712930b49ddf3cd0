#include "actuator/http_server.h"

#include <charconv>
#include <utility>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace vigil::actuator {
namespace {

// Action requests are a few hundred bytes; a query of 1000 jobs of 256
// bytes is about 260 KB.
constexpr size_t kMaxBodyBytes = 1 << 20;

void SendJson(httplib::Response& response, int status, const nlohmann::json& body) {
  response.status = status;
  response.set_content(
      body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
      "application/json");
}

// The signed request's parts, as both POST handlers take them.
WebhookRequest ToWebhookRequest(const httplib::Request& request) {
  WebhookRequest webhook;
  webhook.timestamp = request.get_header_value("X-Vigil-Timestamp");
  webhook.signature = request.get_header_value("X-Vigil-Signature");
  webhook.idempotency_key = request.get_header_value("Idempotency-Key");
  webhook.content_type = request.get_header_value("Content-Type");
  webhook.body = request.body;
  webhook.remote = absl::StrCat(request.remote_addr, ":", request.remote_port);
  return webhook;
}

}  // namespace

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", address, "' is not host:port"));
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  std::string_view digits(address);
  digits.remove_prefix(colon + 1);
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), *port);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() ||
      *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", address, "' has no valid port (0-65535)"));
  }
  return absl::OkStatus();
}

ActuatorHttpServer::ActuatorHttpServer(ActionHandler& handler, JobQueryHandler& queries,
                                       std::string backend)
    : handler_(handler), queries_(queries), backend_(std::move(backend)) {}

ActuatorHttpServer::~ActuatorHttpServer() { Stop(); }

absl::Status ActuatorHttpServer::Start(const std::string& listen) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(listen, &host, &port); !s.ok()) return s;
  server_ = std::make_unique<httplib::Server>();
  server_->set_payload_max_length(kMaxBodyBytes);
  server_->Post("/v1/actions", [this](const httplib::Request& request,
                                      httplib::Response& response) {
    WebhookReply reply = handler_.Handle(ToWebhookRequest(request));
    if (reply.replayed) response.set_header("Idempotent-Replayed", "true");
    SendJson(response, reply.http_status, reply.body);
  });
  server_->Post("/v1/jobs/query", [this](const httplib::Request& request,
                                         httplib::Response& response) {
    WebhookReply reply = queries_.Handle(ToWebhookRequest(request));
    SendJson(response, reply.http_status, reply.body);
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
    JobQueryCounters queries = queries_.counters();
    SendJson(response, 200,
             {{"status", "ok"},
              {"backend", backend_},
              {"remembered_answers", handler_.remembered_answers()},
              {"job_queries",
               {{"answered", queries.answered},
                {"jobs_answered", queries.jobs_answered},
                {"unauthorized", queries.unauthorized},
                {"bad_request", queries.bad_request},
                {"unimplemented", queries.unimplemented},
                {"failed", queries.failed}}}});
  });
  server_->set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (!response.body.empty()) return;
    SendJson(response, response.status,
             {{"error", absl::StrCat("HTTP ", response.status)}});
  });
  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
  } else {
    port_ = server_->bind_to_port(host, port) ? port : -1;
  }
  if (port_ <= 0) {
    server_.reset();
    port_ = 0;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  // The socket is listening already; the thread only accepts.
  listen_returned_ = false;
  serving_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  return absl::OkStatus();
}

void ActuatorHttpServer::Stop() {
  if (!server_) return;
  // stop() is a no-op until the accept loop runs, so wait for it.
  while (!server_->is_running() && !listen_returned_) std::this_thread::yield();
  server_->stop();
  if (serving_.joinable()) serving_.join();
  server_.reset();
}

}  // namespace vigil::actuator
