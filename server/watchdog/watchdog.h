// Vigil's own dead-man's switch. While the server is working (its health
// callback says so), the Watchdog tells a receiver outside Vigil every
// interval: a heartbeat URL (healthchecks.io, an Opsgenie heartbeat, Dead
// Man's Snitch, ...) and/or an always-firing "Watchdog" alert posted to
// Alertmanager that lapses by itself (endsAt = now + 3 intervals). When the
// heartbeats stop - the process died, hung, or stopped working - that
// receiver pages someone, through a path Vigil does not own.
//
// Config ("watchdog" section of the server config; unknown keys are errors):
//   {"heartbeat_url": "https://hc-ping.com/<uuid>", "method": "GET",
//    "headers": {"Authorization": {"env": "OPSGENIE_KEY",
//                                  "prefix": "GenieKey "},
//                "X-Team": "ml-infra"},
//    "alertmanager_url": "http://alertmanager:9093",
//    "instance": "vigil-1", "interval_seconds": 60, "timeout_seconds": 10}
// A header's value is a string, or a secret read once at start from a file
// ({"file": "/etc/vigil/opsgenie.key"}) or an environment variable
// ({"env": "NAME"}), with an optional "prefix" put before it. Headers go
// with the heartbeat URL only, never to Alertmanager.
#ifndef VIGIL_SERVER_WATCHDOG_WATCHDOG_H_
#define VIGIL_SERVER_WATCHDOG_WATCHDOG_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/periodic_thread.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/json_reader.h"
#include "notify/notify.h"

namespace vigil {

// One extra header of the heartbeat request: `value` as given, or a secret
// from `file` (trailing whitespace stripped) or environment variable `env`,
// after `prefix`. Exactly one of value, file and env is set.
struct WatchdogHeader {
  std::string name;
  std::string value;
  std::string file;
  std::string env;
  std::string prefix;
};

// The "watchdog" section of the server config. Plain data; copyable.
struct WatchdogConfig {
  // Pinged every interval; empty: no heartbeat URL.
  std::string heartbeat_url;
  // "GET" (default) or "POST" (with a one-line text body).
  std::string method = "GET";
  // Extra headers of the heartbeat request, in config order.
  std::vector<WatchdogHeader> headers;
  // Alertmanager's base URL (e.g. http://alertmanager:9093, with its route
  // prefix if it has one); the alert goes to <url>/api/v2/alerts. Empty: no
  // Watchdog alert.
  std::string alertmanager_url;
  // The alert's "instance" label and the POST body's name of this server;
  // empty: the host name.
  std::string instance;
  // Seconds between heartbeats. Default 60.
  double interval_seconds = 60;
  // Seconds one send may take. Default 10; at most interval_seconds.
  double timeout_seconds = 10;

  // True when there is somewhere to send heartbeats.
  bool enabled() const {
    return !heartbeat_url.empty() || !alertmanager_url.empty();
  }
};

// Reads the "watchdog" config section `section` into `*out`, recording
// every problem in `reader` under the path "watchdog" (e.g.
// "watchdog.method: must be \"GET\" or \"POST\""): unknown keys, wrong
// types, URLs that are not http(s)://, bad header names or values, a
// timeout above the interval, a section naming neither URL. Files and
// environment variables of headers are read later, by Watchdog::Create.
void ReadWatchdogConfig(const nlohmann::json& section, JsonConfigReader& reader,
                        WatchdogConfig* out);

// What a Watchdog needs besides its config. Pointers are not owned and
// must outlive it.
struct WatchdogOptions {
  // Required: time of the beats and of the alert's endsAt.
  Clock* clock = nullptr;
  // Required: carries the requests (libcurl in the server, a fake in tests).
  Transport* transport = nullptr;
  // Required: OK while the server is working (VigilServer: the store
  // accepts writes, the signal of /readyz); otherwise why not. Called from
  // the watchdog's thread before every beat.
  std::function<absl::Status()> health;
  // Whether this process should beat; null: always. A server run as
  // several replicas must beat only from the elected leader of its shard
  // (the others would keep the switch quiet while the leader is dead):
  // set this to the election's answer. Called before every beat.
  std::function<bool()> is_leader;
  // Where the watchdog's log lines go (one line each, no newline); null:
  // stderr, prefixed "vigil-server: watchdog: ".
  std::function<void(const std::string&)> log;
};

// Counters behind /metrics. A beat is one interval's heartbeat to every
// configured receiver.
struct WatchdogCounters {
  uint64_t ok = 0;                  // every receiver accepted it
  uint64_t error = 0;               // some receiver refused or was unreachable
  uint64_t skipped_unhealthy = 0;   // not sent: the server was not working
  uint64_t skipped_not_leader = 0;  // not sent: another replica leads
  double last_success = 0;          // Unix time of the last ok beat; 0: none
};

// Sends heartbeats from a thread of its own. Thread-safe: Beat(),
// counters() and MetricsText() may be called from any thread; Start() and
// Stop() from one.
class Watchdog {
 public:
  // A stopped watchdog for `config` (validated by ReadWatchdogConfig).
  // kInvalidArgument when the options lack a clock, transport or health
  // callback, when config.enabled() is false, or when a header's
  // environment variable is unset or empty; kNotFound when a header's file
  // cannot be read (kInvalidArgument when it is empty). Errors name the
  // header ("watchdog.headers.Authorization: ...").
  static absl::StatusOr<std::unique_ptr<Watchdog>> Create(
      const WatchdogConfig& config, WatchdogOptions options);
  // Stops the thread if running.
  ~Watchdog();

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts the thread: a beat at once, then one every interval_seconds of
  // the clock. Call once.
  void Start();
  // Stops the thread (waiting for a send in progress, at most
  // timeout_seconds per receiver). Idempotent.
  void Stop();

  // One beat now: skipped (and counted) when not the leader or not
  // working - logged once when that starts and once when it ends -, else
  // sent to every receiver. A receiver's failure is counted and logged
  // once per distinct error; the next beat is the retry. The thread calls
  // this every interval.
  void Beat();

  // A snapshot of the counters.
  WatchdogCounters counters() const;
  // The Prometheus text of vigil_watchdog_heartbeats_total{result} and
  // vigil_watchdog_last_success_timestamp_seconds.
  std::string MetricsText() const;

 private:
  Watchdog(WatchdogConfig config, WatchdogOptions options,
           std::vector<std::pair<std::string, std::string>> headers);
  void Log(const std::string& line);
  // Sends `request`; "" when a 2xx came back, else why not.
  std::string Send(const OutboundRequest& request);
  OutboundRequest HeartbeatRequest() const;
  OutboundRequest AlertRequest(double now) const;

  const WatchdogConfig config_;
  const WatchdogOptions options_;
  // The heartbeat's headers with their secrets resolved.
  const std::vector<std::pair<std::string, std::string>> headers_;
  // When the watchdog was made: the alert's startsAt.
  const double started_at_;

  std::atomic<uint64_t> ok_{0};
  std::atomic<uint64_t> error_{0};
  std::atomic<uint64_t> skipped_unhealthy_{0};
  std::atomic<uint64_t> skipped_not_leader_{0};
  std::atomic<double> last_success_{0};

  // Serializes beats; guards what was logged last.
  std::mutex beat_mu_;
  bool unhealthy_ ABSL_GUARDED_BY(beat_mu_) = false;
  bool follower_ ABSL_GUARDED_BY(beat_mu_) = false;
  std::string logged_error_ ABSL_GUARDED_BY(beat_mu_);

  // Last: its thread stops before the rest goes.
  PeriodicThread rounds_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_WATCHDOG_WATCHDOG_H_
