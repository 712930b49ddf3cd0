// VigilServer: the store, the gRPC ingest service, online detection and
// the HTTP API wired together, with one Start()/Stop() lifecycle.
#ifndef VIGIL_SERVER_SERVER_H_
#define VIGIL_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/periodic_thread.h"
#include "notify/notify.h"
#include "server/config/auth.h"
#include "server/config/config.h"
#include "server/config/reload.h"
#include "server/frame_observer.h"
#include "server/ingest/ingest_metrics.h"
#include "storage/series_store.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace vigil {
namespace cluster {
class ClusterMember;
class Ownership;
class ProfileBackups;
class ProfileSender;
}  // namespace cluster

class SchedulerQuery;

class DetectionService;
class EscalationService;
class EventHub;
class FleetView;
class RemoteWriteReceiver;
class AlertForwarder;
class AlertIntake;
class HttpApi;
class IngestService;
class RemoteWriter;
class StoreWatch;
class StreamAuthenticator;
class Watchdog;

// Owns the store (RocksDB in options.data_dir, or memory), the detection
// service and both listeners. Start() and Stop() must be called from one thread; the
// accessors are safe from any thread while the server runs.
class VigilServer {
 public:
  // `clock` (not owned) defaults to RealClock(); `observer` (not owned,
  // optional) receives every accepted frame; `transport` (not owned)
  // carries notifications and action webhooks, by default libcurl. All
  // must outlive the server.
  explicit VigilServer(const ServerOptions& options, Clock* clock = nullptr,
                       FrameObserver* observer = nullptr,
                       Transport* transport = nullptr);
  // Stops the server if running.
  ~VigilServer();

  // Loads the rules, opens the store, loads its incidents, starts detection
  // and binds both listeners. kInvalidArgument for bad options (neither
  // grpc_tls nor grpc_insecure, say), a bad TLS or node token file (named)
  // or a rule file with errors (every one listed, one per line, with file
  // and position), kNotFound for an unreadable rule, TLS, token or watchdog
  // header secret file, the store's error if it cannot open, kUnavailable
  // if an address cannot be bound (nothing is left running then).
  absl::Status Start();
  // Stops accepting, cancels live streams, stops HTTP and flushes the
  // store. Returns the flush status. Idempotent.
  absl::Status Stop();

  // Lets Reload() read the config again from `source`; `running` is the
  // load this server's options came from (LoadConfig(source)). Call
  // before Start(); without it Reload() refuses.
  void EnableReload(ConfigSource source, LoadedConfig running);

  // What a reload changed: keys whose new values are in force now (API
  // tokens, escalation, notification receivers and channels, rules), and keys
  // changed since the server started that take effect at its next start
  // (ReloadableKey tells them apart).
  struct ReloadResult {
    std::vector<std::string> applied;
    std::vector<std::string> restart_required;
  };
  // Reads the config again (SIGHUP, POST /-/reload) and applies what a
  // running server can take; audited as `who`. All or nothing: a config
  // that does not load, validate, name readable files and parse its rules
  // (CheckConfigFiles) changes nothing: kInvalidArgument listing every
  // problem. kFailedPrecondition before Start() or without EnableReload().
  // Thread-safe.
  absl::StatusOr<ReloadResult> Reload(const Identity& who);

  // How long Start() took, in seconds of monotonic time, and its slow
  // parts: opening the store (its open blocks, the frame log's replay) and
  // bringing back incidents and what detection had learned. All 0 before
  // Start().
  struct StartupTimes {
    double total_s = 0;
    double store_s = 0;
    double state_s = 0;
  };
  const StartupTimes& startup_times() const { return startup_times_; }

  // The bound ports (useful with port 0); 0 before Start().
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  // The store, or null before Start(); owned by the server.
  SeriesStore* store() const { return store_.get(); }
  // Ingest counters.
  const IngestMetrics& metrics() const { return metrics_; }
  // Detection and the incident index, or null before Start(); owned by the
  // server.
  DetectionService* detection() const { return detection_.get(); }
  // Escalation, or null before Start(); owned by the server.
  EscalationService* escalation() const { return escalation_.get(); }
  // The store's health watch (readiness, the storage self-incident), or
  // null before Start(); owned by the server.
  StoreWatch* store_watch() const { return store_watch_.get(); }

 private:
  const ServerOptions options_;
  Clock* const clock_;
  FrameObserver* const observer_;
  const std::unique_ptr<Transport> owned_transport_;
  Transport* const transport_;
  const std::unique_ptr<Authenticator> authenticator_;
  IngestMetrics metrics_;
  std::unique_ptr<SeriesStore> store_;
  // Job-state queries to the scheduler (null without an actuator); used by
  // detection_, so declared before it.
  std::unique_ptr<SchedulerQuery> scheduler_;
  std::unique_ptr<DetectionService> detection_;
  std::unique_ptr<EscalationService> escalation_;
  std::unique_ptr<StoreWatch> store_watch_;
  // Returns the heap glibc keeps after bursts to the kernel.
  std::unique_ptr<PeriodicThread> memory_trimmer_;
  // Incident changes for the web UI's live pages.
  std::unique_ptr<EventHub> changes_;
  // Latest node and job state for the web UI.
  std::unique_ptr<FleetView> fleet_;
  // Feeds the fleet view, the detection service and `observer_`.
  std::unique_ptr<ShardedFrameObserver> tee_;
  std::unique_ptr<StreamAuthenticator> stream_auth_;
  std::unique_ptr<IngestService> ingest_;
  std::unique_ptr<RemoteWriteReceiver> remote_write_receiver_;  // uses ingest_
  std::unique_ptr<AlertForwarder> alert_forwarder_;  // reads detection_
  std::unique_ptr<AlertIntake> alert_intake_;        // publishes to detection_
  std::unique_ptr<PeriodicThread> alert_expiry_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<HttpApi> http_;
  // Rollups to a remote-write endpoint, or null when not configured.
  std::unique_ptr<RemoteWriter> remote_write_;
  // The dead-man's switch, or null when options.watchdog names no receiver.
  std::unique_ptr<Watchdog> watchdog_;
  // Cluster mode (options.cluster): this server's membership in etcd and
  // the jobs its shard owns; null for a single server.
  std::unique_ptr<cluster::Ownership> ownership_;
  // Copies of other shards' learned profiles, and the thread that sends
  // this shard's (cluster mode).
  std::unique_ptr<cluster::ProfileBackups> profile_backups_;
  std::unique_ptr<cluster::ProfileSender> profile_sender_;
  std::unique_ptr<PeriodicThread> profile_sender_thread_;
  std::unique_ptr<cluster::ClusterMember> cluster_;
  int grpc_port_ = 0;
  StartupTimes startup_times_;
  int http_port_ = 0;

  // Reload(): the source, the config the server started with (what
  // restart_required is measured from) and the one last applied.
  mutable absl::Mutex reload_mu_;
  std::optional<ConfigSource> reload_source_ ABSL_GUARDED_BY(reload_mu_);
  LoadedConfig started_config_ ABSL_GUARDED_BY(reload_mu_);
  LoadedConfig applied_config_ ABSL_GUARDED_BY(reload_mu_);
  // For /metrics: reloads by outcome, whether the last one worked, when
  // one last worked (unix s; the start counts), keys waiting for a restart.
  uint64_t reloads_ok_ ABSL_GUARDED_BY(reload_mu_) = 0;
  uint64_t reloads_failed_ ABSL_GUARDED_BY(reload_mu_) = 0;
  bool last_reload_ok_ ABSL_GUARDED_BY(reload_mu_) = true;
  double last_reload_ok_ts_ ABSL_GUARDED_BY(reload_mu_) = 0;
  size_t restart_required_ ABSL_GUARDED_BY(reload_mu_) = 0;
  // The reload metrics as Prometheus text.
  std::string ReloadMetricsText() const;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_SERVER_H_
