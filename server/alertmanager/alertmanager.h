// Alertmanager both ways (docs/PROMETHEUS.md, "Alertmanager"):
//  - AlertForwarder keeps Vigil's firing incidents as alerts in one or more
//    Alertmanagers through their API (POST /api/v2/alerts): each incident
//    goes out when it opens, is re-sent every half resolve_timeout while it
//    fires, and goes out with endsAt when it resolves. The alerts carry a
//    vigil_incident label.
//  - AlertIntake takes alerts from Prometheus rules (Alertmanager's webhook
//    payload, version 4, or the /api/v2/alerts shape a Prometheus sends to
//    an Alertmanager) and makes them Vigil incidents, so existing PromQL
//    rules join Vigil's escalation. Alerts with a vigil_incident label are
//    Vigil's own coming back and are dropped: nothing loops.
// Neither reads the server's other parts: incidents come and go through the
// callbacks the wiring gives.
#ifndef VIGIL_SERVER_ALERTMANAGER_ALERTMANAGER_H_
#define VIGIL_SERVER_ALERTMANAGER_ALERTMANAGER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/json_reader.h"
#include "common/periodic_thread.h"
#include "notify/notify.h"
#include "rules/incident.h"
#include "storage/series_store.h"

namespace vigil {

// The label that marks an alert as Vigil's own.
inline constexpr char kVigilIncidentLabel[] = "vigil_incident";
// Kinds of incidents made from incoming alerts start with this.
inline constexpr char kAlertKindPrefix[] = "alert:";

// How an incoming alert of one alertname becomes an incident.
struct AlertIntakeRule {
  std::string alertname;
  // "P0".."P3"; empty: from the alert's severity label.
  std::string severity;
  // Responses (rules/incident.h names). Actions (pause, cordon) are kept
  // only with allow_actions; without it they are dropped at load.
  std::vector<Response> responses = {Response::kNotifySre};
  bool allow_actions = false;
};

// The "alertmanager" section of the server config.
//   {"forward_urls": ["http://alertmanager:9093"],
//    "resolve_timeout_seconds": 300, "min_severity": "P3",
//    "check_seconds": 5, "timeout_seconds": 10,
//    "intake": {"enabled": true, "default_severity": "P2",
//               "node_labels": [...], "job_labels": [...],
//               "rules": [{"alertname": "GpuTooHot", "severity": "P1",
//                          "responses": ["notify_sre", "cordon_node"],
//                          "allow_actions": true}]}}
struct AlertmanagerOptions {
  // Alertmanagers that get Vigil's incidents; empty: none.
  std::vector<std::string> forward_urls;
  // Alertmanager's resolve_timeout: a firing alert is re-sent every half
  // of it, and says it ends that long after each send (so an alert Vigil
  // stops sending lapses by itself).
  double resolve_timeout_seconds = 300;
  // Incidents of this severity or higher are forwarded.
  Severity min_severity = Severity::kP3;
  // How often new and resolved incidents are looked for.
  double check_seconds = 5;
  double timeout_seconds = 10;
  // Base URL of the UI for the alerts' generatorURL; empty: none.
  std::string public_url;

  // Incoming alerts (POST /api/v1/alerts and /api/v2/alerts).
  bool intake = false;
  // Severity of an alert whose rule sets none and whose severity label is
  // not understood ("critical" -> P1, "warning" -> P2, "info" -> P3, and
  // "P0".."P3" as they are).
  Severity default_severity = Severity::kP2;
  // Where an alert's node and job come from (first label present; an
  // "instance" loses its :port). No job label: the job is "cluster".
  std::vector<std::string> node_labels = {"Hostname", "node", "instance"};
  std::vector<std::string> job_labels = {"job_id", "hpc_job", "slurm_job_id"};
  std::vector<AlertIntakeRule> rules;
};

// Reads the section into `*out`, recording every problem with its path.
void ParseAlertmanagerSection(const nlohmann::json& section, JsonConfigReader& reader,
                              AlertmanagerOptions* out);

// The Alertmanager API v2 alert for incident `incident` (the list form of
// rules/incident_json.h: id, severity, kind, job, node, gpu, ts, summary,
// hint), ending at `ends_at`. Pure.
nlohmann::json IncidentAlert(const nlohmann::json& incident, double ends_at,
                             const std::string& public_url);

// Mirrors firing incidents into Alertmanagers. Thread-safe.
class AlertForwarder {
 public:
  // Firing incidents, in the list form of rules/incident_json.h.
  using FiringIncidents = std::function<std::vector<nlohmann::json>()>;
  // Whether this server forwards now: in cluster mode, only the leader of
  // its shard's pair does (both members see the same incidents under
  // different ids, and Alertmanager would hold both). Null: always.
  using Leads = std::function<bool()>;
  // `transport` and `clock` are not owned and must outlive this.
  AlertForwarder(const AlertmanagerOptions& options, Transport* transport, Clock* clock,
                 FiringIncidents firing, Leads leads = nullptr);
  ~AlertForwarder();

  // Starts the rounds (every check_seconds). Stop() ends them. Idempotent.
  void Start();
  void Stop();
  // One round: sends incidents that opened since the last round, those
  // that resolved (with endsAt), and every firing one again when half the
  // resolve timeout passed since they were last sent. What a receiver did
  // not take goes again next round. A server that does not lead sends
  // nothing and forgets what it sent: its alerts end at their endsAt (one
  // resolve timeout on), while the leader sends its own; when it leads
  // again it sends every firing incident afresh.
  void Round();

  // Prometheus text of vigil_alertmanager_forward_*.
  std::string MetricsText() const;

 private:
  struct Sent {
    nlohmann::json alert;  // as last sent (labels and annotations)
    double sent_at = 0;    // 0: not taken yet by every receiver
  };
  // Posts `alerts` to every URL; true when all took them.
  bool Post(const nlohmann::json& alerts);

  const AlertmanagerOptions options_;
  Transport* const transport_;
  Clock* const clock_;
  const FiringIncidents firing_;
  const Leads leads_;
  std::mutex mu_;  // serializes rounds
  std::map<std::string, Sent> sent_ ABSL_GUARDED_BY(mu_);  // by incident id
  // Resolved incidents whose end was not taken yet: id -> alert.
  std::map<std::string, nlohmann::json> ending_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> alerts_sent_{0};
  std::atomic<uint64_t> posts_failed_{0};
  std::unique_ptr<PeriodicThread> thread_;
};

// Makes incoming alerts incidents. Thread-safe.
class AlertIntake {
 public:
  // Records an incident update; returns the incident's id (allocated on
  // kOpened). DetectionService::PublishExternal in the server.
  using Publish = std::function<absl::StatusOr<std::string>(IncidentUpdate)>;
  // `store` keeps which alert is which incident across restarts (state
  // key "alert_intake"); `clock` and `store` must outlive this.
  AlertIntake(const AlertmanagerOptions& options, SeriesStore* store, Clock* clock,
              Publish publish);

  // Loads what a previous process left; call once before Receive.
  absl::Status Load();

  // What one request did.
  struct Counts {
    int opened = 0;
    int updated = 0;   // still firing (refreshed), or changed
    int resolved = 0;
    int looped = 0;    // Vigil's own alerts, dropped
  };
  // Takes an Alertmanager webhook body (`webhook`: {"version": "4",
  // "alerts": [...]}) or an /api/v2/alerts body (an array of alerts).
  // kInvalidArgument naming the first bad alert (nothing of the request is
  // taken then); storage errors as the store says.
  absl::StatusOr<Counts> Receive(std::string_view body, bool webhook);
  // Resolves alerts whose endsAt passed without a renewal. Call often.
  void Expire();

  std::string MetricsText() const;

 private:
  struct Tracked {
    std::string id;        // the incident's server id
    double ends_at = 0;    // 0: until resolved
    Incident incident;     // as last published
  };
  absl::Status Save() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Resolve(const std::string& key, double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AlertmanagerOptions options_;
  SeriesStore* const store_;
  Clock* const clock_;
  const Publish publish_;
  mutable std::mutex mu_;
  std::map<std::string, Tracked> alerts_ ABSL_GUARDED_BY(mu_);  // by fingerprint
  uint64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t looped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t resolved_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_ALERTMANAGER_ALERTMANAGER_H_
