#include "server/watchdog/watchdog.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/catch_all.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr char kPath[] = "watchdog";
// The Alertmanager alert lapses after this many missed intervals.
constexpr double kAlertLifetimeIntervals = 3;
// Starts Send()'s answer when nothing came back.
constexpr char kNoResponse[] = "no response: ";

// The kind of Send()'s answer `why`: without libcurl's details after the
// error's name (e.g. "after 1001 ms"), so that one failure is logged once.
std::string FailureKind(const std::string& why) {
  if (!absl::StartsWith(why, kNoResponse)) return why;
  return why.substr(0, why.find(": ", sizeof(kNoResponse) - 1));
}

bool IsHttpUrl(const std::string& url) {
  return absl::StartsWith(url, "http://") || absl::StartsWith(url, "https://");
}

// An HTTP header name: an RFC 9110 token.
bool IsHeaderName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos)
      return false;
  }
  return true;
}

// A header value that cannot end its line early.
bool IsHeaderValue(const std::string& value) {
  return value.find_first_of(std::string("\r\n\0", 3)) == std::string::npos;
}

// One entry of "headers": a string, or {"file"|"env", "prefix"}.
void ReadHeader(const std::string& name, const Json& j, JsonConfigReader& r,
                WatchdogHeader* out) {
  const std::string path = absl::StrCat(kPath, ".headers.", name);
  out->name = name;
  if (!IsHeaderName(name))
    r.Error(path, "not a valid HTTP header name");
  if (j.is_string()) {
    out->value = j.get<std::string>();
    if (!IsHeaderValue(out->value))
      r.Error(path, "must not contain line breaks");
    return;
  }
  if (!j.is_object()) {
    return r.Error(path,
                   "must be a string, {\"file\": PATH} or {\"env\": NAME}");
  }
  if (!r.CheckObject(j, path, {"file", "env", "prefix"})) return;
  r.String(j, path, "file", &out->file,
           "File holding the header's secret (trailing whitespace dropped), read once "
           "at start; exactly one of file and env");
  r.String(j, path, "env", &out->env,
           "Environment variable holding the header's secret, read once at start");
  r.String(j, path, "prefix", &out->prefix,
           "Text put before the secret (\"GenieKey \", \"Bearer \")");
  if (out->file.empty() == out->env.empty())
    r.Error(path, "needs exactly one of \"file\" and \"env\"");
  if (!IsHeaderValue(out->prefix))
    r.Error(path + ".prefix", "must not contain line breaks");
}

// The secret of `header` (its file's or variable's text after its prefix).
absl::StatusOr<std::string> ResolveHeader(const WatchdogHeader& header) {
  const std::string path = absl::StrCat(kPath, ".headers.", header.name);
  if (header.file.empty() && header.env.empty()) return header.value;
  std::string secret;
  if (!header.file.empty()) {
    std::ifstream in(header.file);
    if (!in)
      return absl::NotFoundError(
          absl::StrCat(path, ": ", header.file, ": cannot read the secret"));
    std::stringstream text;
    text << in.rdbuf();
    secret = std::string(absl::StripTrailingAsciiWhitespace(text.str()));
    if (secret.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", header.file, ": the secret is empty"));
  } else {
    const char* value = std::getenv(header.env.c_str());
    if (value == nullptr || *value == '\0')
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": environment variable ", header.env, " is unset or empty"));
    secret = value;
  }
  if (!IsHeaderValue(secret))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the secret must be one line"));
  return absl::StrCat(header.prefix, secret);
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
    return "vigil-server";
  return host;
}

}  // namespace

void ReadWatchdogConfig(const nlohmann::json& section, JsonConfigReader& r,
                        WatchdogConfig* out) {
  if (!r.CheckObject(section, kPath,
                     {"heartbeat_url", "method", "headers", "alertmanager_url",
                      "instance", "interval_seconds", "timeout_seconds"}))
    return;
  WatchdogConfig c = *out;
  r.String(section, kPath, "heartbeat_url", &c.heartbeat_url,
           {"Pinged every interval while the server works (healthchecks.io, an "
            "Opsgenie heartbeat, ...); any 2xx counts. Empty: none; the section needs "
            "this, alertmanager_url or both",
            "http:// or https:// URL"});
  r.String(section, kPath, "alertmanager_url", &c.alertmanager_url,
           {"Alertmanager's base URL: every beat posts an always-firing Watchdog alert "
            "to <url>/api/v2/alerts that lapses 3 intervals after the last. Empty: "
            "none",
            "http:// or https:// URL"});
  r.String(section, kPath, "instance", &c.instance,
           "The alert's instance label and the POST body's name of this server; "
           "empty: the host name");
  r.String(section, kPath, "method", &c.method,
           {"Method of the heartbeat request; POST sends a one-line text body",
            "\"GET\", \"POST\" (any case)"});
  r.Positive(section, kPath, "interval_seconds", 1, 86400, &c.interval_seconds,
             "Seconds between heartbeats");
  r.Positive(section, kPath, "timeout_seconds", 1, 3600, &c.timeout_seconds,
             "Seconds one send may take; at most interval_seconds");
  c.method = absl::AsciiStrToUpper(c.method);
  if (c.method != "GET" && c.method != "POST")
    r.Error(absl::StrCat(kPath, ".method"), "must be \"GET\" or \"POST\"");
  if (!c.heartbeat_url.empty() && !IsHttpUrl(c.heartbeat_url))
    r.Error(absl::StrCat(kPath, ".heartbeat_url"),
            "must start with http:// or https://");
  if (!c.alertmanager_url.empty() && !IsHttpUrl(c.alertmanager_url))
    r.Error(absl::StrCat(kPath, ".alertmanager_url"),
            "must start with http:// or https://");
  if (!c.enabled())
    r.Error(kPath, "needs heartbeat_url, alertmanager_url or both");
  if (c.timeout_seconds > c.interval_seconds)
    r.Error(absl::StrCat(kPath, ".timeout_seconds"),
            absl::StrCat("must not exceed interval_seconds (",
                         c.interval_seconds, ")"));
  if (const Json* it = r.ObjectMap(
          section, kPath, "headers", "name",
          {"Extra headers of the heartbeat request (never sent to Alertmanager): "
           "name -> a string, or {\"file\"|\"env\", \"prefix\"} for a secret; a "
           "missing file or variable stops the server at start",
           "HTTP header names"});
      it != nullptr) {
    c.headers.clear();
    if (!it->is_object()) {
      r.Error(absl::StrCat(kPath, ".headers"),
              "must be an object of header name -> value");
    } else {
      for (const auto& [name, value] : it->items()) {
        WatchdogHeader header;
        ReadHeader(name, value, r, &header);
        c.headers.push_back(std::move(header));
      }
      if (!c.headers.empty() && c.heartbeat_url.empty())
        r.Error(absl::StrCat(kPath, ".headers"),
                "go with the heartbeat URL: set heartbeat_url");
    }
  }
  *out = std::move(c);
}

absl::StatusOr<std::unique_ptr<Watchdog>> Watchdog::Create(
    const WatchdogConfig& config, WatchdogOptions options) {
  if (options.clock == nullptr || options.transport == nullptr ||
      !options.health)
    return absl::InvalidArgumentError(
        "watchdog: clock, transport and health are required");
  if (!config.enabled())
    return absl::InvalidArgumentError(
        "watchdog: needs heartbeat_url, alertmanager_url or both");
  std::vector<std::pair<std::string, std::string>> headers;
  for (const WatchdogHeader& header : config.headers) {
    absl::StatusOr<std::string> value = ResolveHeader(header);
    if (!value.ok()) return value.status();
    headers.emplace_back(header.name, *std::move(value));
  }
  WatchdogConfig resolved = config;
  if (resolved.instance.empty()) resolved.instance = HostName();
  return std::unique_ptr<Watchdog>(
      new Watchdog(std::move(resolved), std::move(options), std::move(headers)));
}

Watchdog::Watchdog(WatchdogConfig config, WatchdogOptions options,
                   std::vector<std::pair<std::string, std::string>> headers)
    : config_(std::move(config)),
      options_(std::move(options)),
      headers_(std::move(headers)),
      started_at_(options_.clock->Now()),
      rounds_(options_.clock, config_.interval_seconds, [this] { Beat(); },
              [this](const std::string& error) {
                Log(absl::StrCat("a beat threw ", error));
              }) {}

Watchdog::~Watchdog() { Stop(); }

void Watchdog::Start() { rounds_.Start(); }

void Watchdog::Stop() { rounds_.Stop(); }

void Watchdog::Log(const std::string& line) {
  if (options_.log) return options_.log(line);
  std::fprintf(stderr, "vigil-server: watchdog: %s\n", line.c_str());
}

void Watchdog::Beat() {
  std::lock_guard<std::mutex> beat(beat_mu_);
  const double now = options_.clock->Now();
  const bool leader = !options_.is_leader || options_.is_leader();
  if (leader == follower_) {
    follower_ = !leader;
    Log(leader ? "this replica leads again: heartbeats resume"
               : "not the leader: heartbeats are left to the leader");
  }
  if (!leader) {
    skipped_not_leader_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const absl::Status health = options_.health();
  if (health.ok() == unhealthy_) {
    unhealthy_ = !health.ok();
    Log(unhealthy_
            ? absl::StrCat("server not working (", health.message(),
                           "): heartbeats stop, so the dead-man's switch "
                           "will fire")
            : std::string("server working again: heartbeats resume"));
  }
  if (!health.ok()) {
    skipped_unhealthy_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // What failed, in full and by kind.
  std::vector<std::string> errors, kinds;
  auto send = [&](const char* receiver, const OutboundRequest& request) {
    std::string why = Send(request);
    if (why.empty()) return;
    errors.push_back(absl::StrCat(receiver, ": ", why));
    kinds.push_back(absl::StrCat(receiver, ": ", FailureKind(why)));
  };
  if (!config_.heartbeat_url.empty()) send("heartbeat URL", HeartbeatRequest());
  if (!config_.alertmanager_url.empty()) send("Alertmanager", AlertRequest(now));
  if (errors.empty()) {
    ok_.fetch_add(1, std::memory_order_relaxed);
    last_success_.store(now, std::memory_order_relaxed);
    if (!logged_error_.empty()) {
      Log("heartbeats delivered again");
      logged_error_.clear();
    }
    return;
  }
  error_.fetch_add(1, std::memory_order_relaxed);
  std::string kind = absl::StrJoin(kinds, "; ");
  if (kind != logged_error_) {
    Log(absl::StrCat("heartbeat failed (retried every ",
                     config_.interval_seconds, " s): ",
                     absl::StrJoin(errors, "; ")));
    logged_error_ = std::move(kind);
  }
}

std::string Watchdog::Send(const OutboundRequest& request) {
  const TransportResult result =
      options_.transport->Send(request, config_.timeout_seconds);
  if (result.http_status >= 200 && result.http_status < 300) return "";
  // The status line alone, so that a changing body is not a new error.
  if (result.http_status != 0) return absl::StrCat("HTTP ", result.http_status);
  return absl::StrCat(kNoResponse,
                      result.error.empty() ? "unknown error" : result.error);
}

OutboundRequest Watchdog::HeartbeatRequest() const {
  OutboundRequest request;
  request.method = config_.method;
  request.url = config_.heartbeat_url;
  request.headers = headers_;
  if (config_.method == "POST") {
    request.headers.emplace_back("Content-Type", "text/plain; charset=utf-8");
    request.body = absl::StrCat("vigil-server ", config_.instance, " working\n");
  }
  return request;
}

OutboundRequest Watchdog::AlertRequest(double now) const {
  const Json alert = {
      {"labels",
       {{"alertname", "Watchdog"},
        {"severity", "none"},
        {"source", "vigil"},
        {"instance", config_.instance}}},
      {"annotations",
       {{"summary", absl::StrCat("Vigil server ", config_.instance,
                                 " is working")},
        {"description",
         "Always firing while Vigil works. Route it to a dead-man's switch: "
         "when it stops, Vigil is down and nothing else will page."}}},
      {"startsAt", AlertmanagerTime(started_at_)},
      {"endsAt", AlertmanagerTime(now + kAlertLifetimeIntervals *
                                   config_.interval_seconds)}};
  OutboundRequest request;
  request.method = "POST";
  request.url = AlertmanagerAlertsUrl(config_.alertmanager_url);
  request.headers = {{"Content-Type", "application/json"}};
  request.body = Json::array({alert}).dump();
  return request;
}

WatchdogCounters Watchdog::counters() const {
  WatchdogCounters c;
  c.ok = ok_.load(std::memory_order_relaxed);
  c.error = error_.load(std::memory_order_relaxed);
  c.skipped_unhealthy = skipped_unhealthy_.load(std::memory_order_relaxed);
  c.skipped_not_leader = skipped_not_leader_.load(std::memory_order_relaxed);
  c.last_success = last_success_.load(std::memory_order_relaxed);
  return c;
}

std::string Watchdog::MetricsText() const {
  const WatchdogCounters c = counters();
  std::string out =
      "# HELP vigil_watchdog_heartbeats_total Dead-man's-switch heartbeats "
      "by result: accepted by every receiver (ok), refused or unanswered "
      "(error), not sent because the server was not working "
      "(skipped_unhealthy) or another replica leads (skipped_not_leader).\n"
      "# TYPE vigil_watchdog_heartbeats_total counter\n";
  absl::StrAppend(&out, "vigil_watchdog_heartbeats_total{result=\"ok\"} ",
                  c.ok, "\n",
                  "vigil_watchdog_heartbeats_total{result=\"error\"} ",
                  c.error, "\n",
                  "vigil_watchdog_heartbeats_total{result=\"skipped_unhealthy\"} ",
                  c.skipped_unhealthy, "\n",
                  "vigil_watchdog_heartbeats_total{result=\"skipped_not_leader\"} ",
                  c.skipped_not_leader, "\n");
  absl::StrAppend(
      &out,
      "# HELP vigil_watchdog_last_success_timestamp_seconds Unix time of the "
      "last heartbeat every receiver accepted (0: none yet).\n"
      "# TYPE vigil_watchdog_last_success_timestamp_seconds gauge\n"
      "vigil_watchdog_last_success_timestamp_seconds ",
      absl::StrFormat("%.3f", c.last_success), "\n");
  return out;
}

}  // namespace vigil
