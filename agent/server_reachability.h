// Says on the node itself when no server has acknowledged the agent's
// batches for a while, so that a node cut off from Vigil (a partition, a
// dead server, expired credentials) is noticed by the node's own
// monitoring even though Vigil cannot see it: one log line when the
// silence crosses the threshold and one when acks come back, two gauges
// for the agent's /metrics, and the same gauges in a node_exporter
// textfile-collector file.
#ifndef VIGIL_AGENT_SERVER_REACHABILITY_H_
#define VIGIL_AGENT_SERVER_REACHABILITY_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/periodic_thread.h"
#include "absl/status/status.h"
#include "agent/stream_client.h"
#include "common/clock.h"

namespace vigil::agent {

// Configuration of a ServerReachability.
struct ServerReachabilityOptions {
  // Required: the stream client's counters (last_ack_time, pending_batches).
  std::function<StreamClientStats()> stats;
  // The server's address, for the log lines.
  std::string server;
  // Without an ack for this long the server counts as unreachable. Default
  // 300 s (AgentConfig::unreachable_after_seconds).
  double unreachable_after_seconds = 300;
  // node_exporter textfile-collector file rewritten (temp file + rename)
  // at every check, e.g.
  // /var/lib/node_exporter/textfile_collector/vigil_agent.prom; empty: none.
  std::string status_file;
  // Seconds between checks of the background thread.
  double check_seconds = 10;
  // Time source. Not owned; must outlive this object.
  Clock* clock = RealClock();
  // Where log lines go (one line each, no newline); null: stderr, prefixed
  // "vigil-agent: ".
  std::function<void(const std::string&)> log;
};

// Watches the acks of one StreamClient. The silence is counted from the
// last ack, or from construction while there has been none. Thread-safe:
// Check() and MetricsText() may be called from any thread; Start() and
// Stop() from one.
class ServerReachability {
 public:
  explicit ServerReachability(ServerReachabilityOptions options);
  // Stops the thread if running.
  ~ServerReachability();

  ServerReachability(const ServerReachability&) = delete;
  ServerReachability& operator=(const ServerReachability&) = delete;

  // Checks at once, then every check_seconds, from a thread. Call once.
  void Start();
  // Joins the thread. The status file stays as last written (its mtime
  // tells how fresh it is). Idempotent.
  void Stop();

  // Looks at the acks now: logs when the server becomes unreachable (how
  // long without an ack, batches waiting) and when it is back (how long it
  // was out, batches still spooled), and rewrites the status file. Returns
  // the status file's write error (logged once per distinct error), else
  // OK.
  absl::Status Check();

  // Prometheus text of vigil_agent_server_unreachable (0/1) and
  // vigil_agent_seconds_since_last_ack, as of now.
  std::string MetricsText() const;

 private:
  // Seconds without an ack at `now`.
  double Silence(const StreamClientStats& stats, double now) const;
  void Log(const std::string& line);
  // Writes `text` to status_file via a temp file and rename.
  absl::Status WriteStatusFile(const std::string& text) const;

  const ServerReachabilityOptions options_;
  // Construction time: the silence's start while nothing was acked.
  const double started_at_;

  std::mutex check_mu_;
  bool unreachable_ ABSL_GUARDED_BY(check_mu_) = false;
  // The silence's start when the server became unreachable.
  double silent_since_ ABSL_GUARDED_BY(check_mu_) = 0;
  std::string logged_file_error_ ABSL_GUARDED_BY(check_mu_);

  // Last: its thread stops before the rest goes.
  PeriodicThread rounds_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SERVER_REACHABILITY_H_
