#include "agent/exporter_collector.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "promcompat/text_format.h"

namespace vigil::agent {
namespace {

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Waits until `fd` is ready for `events` or `deadline` (clock time)
// passes; false on timeout or error.
bool WaitFor(int fd, short events, Clock* clock, double deadline) {
  const double left = deadline - clock->Now();
  if (left <= 0) return false;
  pollfd p{fd, events, 0};
  const int ms = std::max(1, static_cast<int>(left * 1000));
  return poll(&p, 1, ms) == 1 && (p.revents & (events | POLLHUP)) != 0;
}

// Decodes a chunked body; nullopt when it is malformed.
std::optional<std::string> Unchunk(std::string_view body) {
  std::string out;
  while (true) {
    const size_t eol = body.find("\r\n");
    if (eol == std::string_view::npos) return std::nullopt;
    std::string_view size_text = body.substr(0, eol);
    size_text = size_text.substr(0, size_text.find(';'));
    size_t size = 0;
    if (!absl::SimpleHexAtoi(absl::string_view(size_text.data(), size_text.size()), &size))
      return std::nullopt;
    body.remove_prefix(eol + 2);
    if (size == 0) return out;
    if (body.size() < size + 2) return std::nullopt;
    out.append(body.substr(0, size));
    body.remove_prefix(size + 2);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExporterCollector>> ExporterCollector::Create(
    ExporterOptions options) {
  if (options.clock == nullptr) return absl::InvalidArgumentError("exporter: no clock");
  if (options.urls.empty())
    return absl::InvalidArgumentError("exporter: no urls to scrape (collectors.exporter.urls)");
  if (!(options.timeout_seconds > 0))
    return absl::InvalidArgumentError("exporter: timeout_seconds must be > 0");
  std::vector<Url> urls;
  for (const std::string& text : options.urls) {
    constexpr std::string_view kScheme = "http://";
    auto bad = [&text](std::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("exporter: url \"", text, "\": ", std::string(why)));
    };
    if (!text.starts_with(kScheme)) return bad("must start with http://");
    std::string_view rest = std::string_view(text).substr(kScheme.size());
    const size_t slash = rest.find('/');
    const std::string_view authority = rest.substr(0, slash);
    Url url;
    url.text = text;
    url.path = slash == std::string_view::npos ? "/metrics" : std::string(rest.substr(slash));
    const size_t colon = authority.rfind(':');
    if (colon == std::string_view::npos || colon + 1 == authority.size())
      return bad("needs HOST:PORT");
    url.host = std::string(authority.substr(0, colon));
    url.port = std::string(authority.substr(colon + 1));
    if (url.host.starts_with('[') && url.host.ends_with(']'))
      url.host = url.host.substr(1, url.host.size() - 2);
    int port = 0;
    if (url.host.empty() || !absl::SimpleAtoi(url.port, &port) || port <= 0 || port > 65535)
      return bad("needs HOST:PORT");
    urls.push_back(std::move(url));
  }
  absl::StatusOr<std::unique_ptr<promcompat::MetricMapper>> mapper =
      promcompat::MetricMapper::Create(options.mapping);
  if (!mapper.ok())
    return absl::InvalidArgumentError(absl::StrCat("exporter: ", mapper.status().message()));
  return std::unique_ptr<ExporterCollector>(
      new ExporterCollector(std::move(options), std::move(urls), *std::move(mapper)));
}

ExporterCollector::ExporterCollector(ExporterOptions options, std::vector<Url> urls,
                                     std::unique_ptr<promcompat::MetricMapper> mapper)
    : options_(std::move(options)), urls_(std::move(urls)), mapper_(std::move(mapper)) {}

absl::StatusOr<std::string> ExporterCollector::Fetch(const Url& url) const {
  Clock* clock = options_.clock;
  const double deadline = clock->Now() + options_.timeout_seconds;
  auto fail = [&url](const std::string& why) {
    return absl::UnavailableError(absl::StrCat(url.text, ": ", why));
  };
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found); rc != 0)
    return fail(absl::StrCat("cannot resolve ", url.host, ": ", gai_strerror(rc)));
  Fd sock;
  sock.fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int connected = sock.fd < 0 ? -1 : connect(sock.fd, found->ai_addr, found->ai_addrlen);
  const int connect_errno = errno;
  freeaddrinfo(found);
  if (sock.fd < 0) return fail(absl::StrCat("socket: ", std::strerror(errno)));
  if (connected != 0) {
    if (connect_errno != EINPROGRESS) return fail(std::strerror(connect_errno));
    if (!WaitFor(sock.fd, POLLOUT, clock, deadline)) return fail("connect timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(sock.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(std::strerror(err));
  }
  // HTTP/1.0: the answer ends when the exporter closes the connection.
  const std::string request =
      absl::StrCat("GET ", url.path, " HTTP/1.0\r\nHost: ", url.host, ":", url.port,
                   "\r\nAccept: text/plain;version=0.0.4\r\nUser-Agent: vigil-agent\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    if (!WaitFor(sock.fd, POLLOUT, clock, deadline)) return fail("send timed out");
    const ssize_t n = send(sock.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return fail(std::strerror(errno));
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[65536];
  while (true) {
    if (!WaitFor(sock.fd, POLLIN, clock, deadline))
      return fail(absl::StrCat("no complete answer within ", options_.timeout_seconds, " s"));
    const ssize_t n = recv(sock.fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return fail(std::strerror(errno));
    }
    response.append(buf, static_cast<size_t>(n));
    if (response.size() > options_.max_page_bytes + 65536)
      return fail(absl::StrCat("page over ", options_.max_page_bytes, " bytes"));
  }
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) return fail("no HTTP header in the answer");
  const std::string_view head(response.data(), head_end);
  const size_t sp = head.find(' ');
  if (!head.starts_with("HTTP/1.") || sp == std::string_view::npos)
    return fail("not an HTTP answer");
  const std::string_view status = head.substr(sp + 1, 3);
  if (status != "200")
    return fail(absl::StrCat("HTTP ", std::string(head.substr(sp + 1, head.find("\r\n") - sp - 1))));
  std::string body = response.substr(head_end + 4);
  if (absl::StrContains(absl::AsciiStrToLower(std::string(head)), "transfer-encoding: chunked")) {
    std::optional<std::string> plain = Unchunk(body);
    if (!plain) return fail("malformed chunked body");
    body = *std::move(plain);
  }
  return body;
}

absl::Status ExporterCollector::Collect(Tick* tick) {
  std::vector<std::string> problems;
  std::vector<std::pair<std::string_view, std::string_view>> labels;
  promcompat::MappedSeries mapped;
  for (const Url& url : urls_) {
    scrapes_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<std::string> page = Fetch(url);
    absl::StatusOr<std::vector<promcompat::TextSample>> samples =
        page.ok() ? promcompat::ParseTextFormat(*page)
                  : absl::StatusOr<std::vector<promcompat::TextSample>>(page.status());
    if (!samples.ok()) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      problems.push_back(page.ok() ? absl::StrCat(url.text, ": ", samples.status().message())
                                   : std::string(samples.status().message()));
      continue;
    }
    for (const promcompat::TextSample& s : *samples) {
      labels.clear();
      for (const auto& [name, value] : s.labels) labels.emplace_back(name, value);
      if (mapper_->Map(s.name, labels, &mapped) != promcompat::MetricMapper::Outcome::kMapped) {
        unmapped_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const double value = s.value * mapped.scale;
      if (!mapped.changes_counter.empty()) {
        tick->Add(std::string(mapped.changes_counter), mapped.key.labels,
                  changes_.Observe(EncodeSeriesKey(mapped.key), value));
        samples_.fetch_add(1, std::memory_order_relaxed);
      }
      tick->Add(std::move(mapped.key.metric), std::move(mapped.key.labels), value);
      samples_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrJoin(problems, "; "));
}

std::vector<std::pair<std::string, double>> ExporterCollector::HealthCounters() const {
  return {{"scrapes_total", static_cast<double>(scrapes_.load())},
          {"scrape_errors_total", static_cast<double>(errors_.load())},
          {"samples_total", static_cast<double>(samples_.load())},
          {"unmapped_total", static_cast<double>(unmapped_.load())}};
}

}  // namespace vigil::agent
