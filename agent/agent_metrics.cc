#include "agent/agent_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vigil::agent {
namespace {

void Family(std::string* out, const char* name, const char* type,
            const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                  type, "\n");
}

// Integers as they are; floating values with 15 significant digits (StrCat
// keeps 6, which turns a Unix time into 1.764e+09, minutes off).
template <typename T>
void Value(std::string* out, const std::string& name_and_labels, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    absl::StrAppend(out, name_and_labels, " ", absl::StrFormat("%.15g", v), "\n");
  } else {
    absl::StrAppend(out, name_and_labels, " ", v, "\n");
  }
}

// One sample of a family with no labels.
template <typename T>
void Single(std::string* out, const char* name, const char* type,
            const char* help, T v) {
  Family(out, name, type, help);
  Value(out, name, v);
}

// `name{collector="c"}`; collector names are plain identifiers.
std::string WithCollector(const char* name, const std::string& collector) {
  return absl::StrCat(name, "{collector=\"", collector, "\"}");
}

}  // namespace

std::string RenderAgentMetrics(const StreamClientStats& s,
                               const CollectRunnerStats& runner,
                               const ProcessUsage& usage) {
  std::string out;
  Family(&out, "vigil_agent_build_info", "gauge", "Agent version.");
  Value(&out, absl::StrCat("vigil_agent_build_info{version=\"", kAgentVersion,
                           "\"}"),
        1);
  Single(&out, "vigil_agent_batches_enqueued_total", "counter",
         "Frame batches queued for the server.", s.batches_enqueued);
  Single(&out, "vigil_agent_batches_sent_total", "counter",
         "Batch writes to the server, resends included.", s.batches_sent);
  Single(&out, "vigil_agent_batches_resent_total", "counter",
         "Writes of a batch sent before (after a reconnect).",
         s.batches_resent);
  Single(&out, "vigil_agent_batches_acked_total", "counter",
         "Batches the server acknowledged as durable.", s.batches_acked);
  Single(&out, "vigil_agent_batches_dropped_total", "counter",
         "Oldest unacknowledged batches dropped because the spool was full.",
         s.batches_dropped);
  Single(&out, "vigil_agent_batches_rejected_total", "counter",
         "Batches the server refused as malformed.", s.batches_rejected);
  Single(&out, "vigil_agent_pending_batches", "gauge",
         "Batches waiting for an acknowledgement.", s.pending_batches);
  Single(&out, "vigil_agent_pending_bytes", "gauge",
         "Serialized bytes waiting for an acknowledgement.", s.pending_bytes);
  Single(&out, "vigil_agent_reconnects_total", "counter",
         "Stream attempts after the first.", s.reconnects);
  Single(&out, "vigil_agent_streaming", "gauge",
         "1 while the current stream has been acknowledged.",
         s.streaming ? 1 : 0);
  Single(&out, "vigil_agent_last_ack_timestamp_seconds", "gauge",
         "Unix time of the last acknowledgement (0: never).", s.last_ack_time);
  Single(&out, "vigil_agent_samples_dropped_by_server_total", "counter",
         "Samples the server dropped from accepted batches (late, duplicate, "
         "series limit).",
         s.samples_dropped_by_server);
  Single(&out, "vigil_agent_samples_refused_by_server_total", "counter",
         "Of those, samples whose series a server limit refused to create.",
         s.samples_refused_by_server);
  Single(&out, "vigil_agent_ticks_total", "counter", "Collection ticks.",
         runner.ticks);
  Single(&out, "vigil_agent_event_frames_total", "counter",
         "Frames sent at once for events (XID, ECC) between ticks.",
         runner.events);
  Single(&out, "vigil_agent_series", "gauge", "Distinct series sent.",
         runner.series);
  Single(&out, "vigil_agent_samples_refused_total", "counter",
         "Samples of series the agent could not register (bad names).",
         runner.samples_refused);
  Family(&out, "vigil_agent_collector_up", "gauge",
         "1 if the collector started and its last reading succeeded.");
  for (const CollectorStats& c : runner.collectors) {
    Value(&out, WithCollector("vigil_agent_collector_up", c.name),
          c.running && c.last_error.empty() ? 1 : 0);
  }
  Family(&out, "vigil_agent_collector_errors_total", "counter",
         "Readings that failed in whole or in part.");
  for (const CollectorStats& c : runner.collectors) {
    Value(&out, WithCollector("vigil_agent_collector_errors_total", c.name),
          c.errors);
  }
  Family(&out, "vigil_agent_collector_samples_total", "counter",
         "Samples the collector produced.");
  for (const CollectorStats& c : runner.collectors) {
    Value(&out, WithCollector("vigil_agent_collector_samples_total", c.name),
          c.samples);
  }
  Family(&out, "vigil_agent_collector_duration_seconds", "gauge",
         "Wall time of the collector's latest reading.");
  for (const CollectorStats& c : runner.collectors) {
    Value(&out,
          WithCollector("vigil_agent_collector_duration_seconds", c.name),
          c.last_duration_seconds);
  }
  for (const CollectorStats& c : runner.collectors) {
    for (const auto& [name, value] : c.counters) {
      std::string metric = absl::StrCat("vigil_agent_", c.name, "_", name);
      absl::StrAppend(&out, "# TYPE ", metric, " ",
                      absl::EndsWith(name, "_total") ? "counter" : "gauge",
                      "\n");
      Value(&out, metric, value);
    }
  }
  Single(&out, "process_cpu_seconds_total", "counter",
         "User and system CPU time of the agent.", usage.cpu_seconds);
  Single(&out, "process_resident_memory_bytes", "gauge",
         "Resident memory of the agent.", usage.resident_bytes);
  Single(&out, "process_max_resident_memory_bytes", "gauge",
         "Peak resident memory of the agent.", usage.max_resident_bytes);
  return out;
}

MetricsEndpoint::MetricsEndpoint(std::function<std::string()> render)
    : render_(std::move(render)) {}

MetricsEndpoint::~MetricsEndpoint() { Stop(); }

absl::StatusOr<int> MetricsEndpoint::Start(const std::string& listen) {
  if (thread_.joinable()) {
    return absl::FailedPreconditionError("/metrics already started");
  }
  size_t colon = listen.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      inet_pton(AF_INET, listen.substr(0, colon).c_str(), &addr.sin_addr) !=
          1 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address \"", listen,
        "\" is not IPV4:PORT (e.g. 127.0.0.1:9465)"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen for /metrics on ", listen, ": ", why));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  listen_fd_ = fd;
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  thread_ = std::thread([this] { Serve(); });
  return static_cast<int>(ntohs(addr.sin_port));
}

void MetricsEndpoint::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    close(fd);
  }
}

void MetricsEndpoint::Answer(int fd) {
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos) {
    if (request.size() > 8192) return;
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  std::string line = request.substr(0, request.find("\r\n"));
  std::string status = "200 OK", body;
  std::string type = "text/plain; version=0.0.4; charset=utf-8";
  if (line.rfind("GET ", 0) != 0) {
    status = "405 Method Not Allowed";
    body = "only GET\n";
  } else if (line.rfind("GET /metrics ", 0) != 0 &&
             line.rfind("GET /metrics?", 0) != 0) {
    status = "404 Not Found";
    body = "only /metrics\n";
  } else {
    body = render_();
  }
  std::string response = absl::StrCat(
      "HTTP/1.1 ", status, "\r\nContent-Type: ", type,
      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
      body);
  size_t sent = 0;
  while (sent < response.size()) {
    ssize_t n = send(fd, response.data() + sent, response.size() - sent,
                     MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

void MetricsEndpoint::Stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

}  // namespace vigil::agent
