#include "server/server.h"

#include "server/fleet/scheduler_query.h"

#include <malloc.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/monotonic_clock.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "server/detection/detection_service.h"
#include "server/ingest/grpc_security.h"
#include "escalation/escalation.h"
#include "server/escalation/escalation_service.h"
#include "server/escalation/event_hub.h"
#include "server/fleet/fleet_view.h"
#include "server/api/http_api.h"
#include "server/cluster/cluster_member.h"
#include "server/escalation/cluster_link.h"
#include "server/cluster/ownership.h"
#include "server/cluster/profile_backups.h"
#include "server/ingest/ingest_service.h"
#include "server/ingest/remote_write_receiver.h"
#include "server/alertmanager/alertmanager.h"
#include "server/remote_write/remote_write.h"
#include "server/health/store_watch.h"
#include "server/watchdog/watchdog.h"
#include "storage/rocksdb_store.h"

namespace vigil {
namespace {

// gRPC keepalive: a dead agent's stream is noticed (and its node freed)
// within about kKeepaliveMs + kKeepaliveTimeoutMs.
constexpr int kKeepaliveMs = 30'000;
constexpr int kKeepaliveTimeoutMs = 10'000;

// Seconds without a detection tick (every second) after which the server
// is not working: its dead-man's switch stops beating.
constexpr double kDetectionStallSeconds = 30;
// How long a frame worker waits for a moved job's profiles from its old shard.
constexpr double kProfilesFetchSeconds = 2;
// How often the heap glibc keeps after bursts (the start's dictionaries and
// series creation) is handed back to the kernel (bench/RESULTS.md, RSS):
// every kStartTrimSeconds for the first kStartTrimWindowSeconds, while the
// agents' reconnect storm and the restored baselines' hand-over free the
// most (a restart's RSS peak, bench/RESULTS.md "Restarts, split"), then every
// kMemoryTrimSeconds.
constexpr double kMemoryTrimSeconds = 30;
constexpr double kStartTrimSeconds = 5;
constexpr double kStartTrimWindowSeconds = 180;
// Size of a profiles export that holds none (Detector::ExportProfiles).
constexpr size_t kEmptyProfilesBytes = 12;

// Splits "HOST:PORT" (validated by ValidateServerOptions).
std::pair<std::string, int> SplitHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = 0;
  (void)absl::SimpleAtoi(address.substr(colon + 1), &port);
  return {address.substr(0, colon), port};
}

// What the frame workers run: detection's shard of the frame (when
// detection is on), then every plain observer. Shards are detection's.
class FrameFanout : public ShardedFrameObserver {
 public:
  // `detection` may be null (detection off: one shard).
  FrameFanout(DetectionService* detection, std::vector<FrameObserver*> observers)
      : detection_(detection), observers_(std::move(observers)) {}
  int shards() const override {
    return detection_ != nullptr ? detection_->shards() : 1;
  }
  int ShardOf(std::string_view job) const override {
    return detection_ != nullptr ? detection_->ShardOf(job) : 0;
  }
  void OnFrame(int shard, const FrameView& frame) override {
    if (detection_ != nullptr) detection_->OnFrame(shard, frame);
    for (FrameObserver* observer : observers_) observer->OnFrame(frame);
  }
  void NodeMovedAway(int shard, const FrameView& frame) override {
    if (detection_ != nullptr) detection_->NodeMovedAway(shard, frame);
  }
  void NodeHandedOver(int shard, const FrameView& frame) override {
    if (detection_ != nullptr) detection_->NodeMovedAway(shard, frame, /*handed_over=*/true);
  }

 private:
  DetectionService* const detection_;
  const std::vector<FrameObserver*> observers_;
};

// The secret in the file at `path`, without trailing whitespace.
// kNotFound if it cannot be read, kInvalidArgument if it is empty.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the secret"));
  std::stringstream text;
  text << in.rdbuf();
  std::string secret(absl::StripTrailingAsciiWhitespace(text.str()));
  if (secret.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": the secret is empty"));
  return secret;
}

// options.notifications with public_url defaulted to the HTTP listener.
NotificationOptions NotificationsOf(const ServerOptions& options) {
  NotificationOptions notifications = options.notifications;
  if (notifications.public_url.empty())
    notifications.public_url = absl::StrCat("http://", options.http_listen);
  return notifications;
}

}  // namespace

VigilServer::VigilServer(const ServerOptions& options, Clock* clock,
                         FrameObserver* observer, Transport* transport)
    : options_(options),
      clock_(clock != nullptr ? clock : RealClock()),
      observer_(observer),
      owned_transport_(transport == nullptr ? NewCurlTransport() : nullptr),
      transport_(transport != nullptr ? transport : owned_transport_.get()),
      authenticator_(std::make_unique<Authenticator>(options.auth)) {}

VigilServer::~VigilServer() { (void)Stop(); }

absl::Status VigilServer::Start() {
  if (store_ != nullptr)
    return absl::FailedPreconditionError("server already started");
  // Monotonic time, not clock_: how long the process took, for its log.
  const double started = MonotonicSeconds();
  StartupTimes times;
  VIGIL_RETURN_IF_ERROR(ValidateServerOptions(options_));
  // Security first: a bad certificate or token file is reported before
  // anything is opened.
  VIGIL_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                         IngestServerCredentials(options_, clock_->Now()));
  std::unique_ptr<StreamAuthenticator> stream_auth;
  if (options_.node_tokens.enabled() ||
      (options_.grpc_tls.has_value() &&
       options_.grpc_tls->node_identity != NodeIdentity::kNone)) {
    VIGIL_ASSIGN_OR_RETURN(
        stream_auth,
        StreamAuthenticator::Create(options_.node_tokens,
                                    options_.grpc_tls.has_value()
                                        ? options_.grpc_tls->node_identity
                                        : NodeIdentity::kNone));
  }
  VIGIL_ASSIGN_OR_RETURN(TrustedProxies trusted_proxies,
                         TrustedProxies::Parse(options_.http_trusted_proxies));
  // The dead-man's switch, its header secrets read before anything opens.
  // It beats while the store accepts writes (what /readyz says); it starts
  // once store_ is set and stops before store_ is reset.
  // Cluster mode: the member (started last) and what its shard owns.
  std::unique_ptr<cluster::ClusterMember> member;
  std::unique_ptr<cluster::Ownership> ownership;
  std::unique_ptr<cluster::ProfileBackups> profile_backups;
  std::string peer_secret;  // cluster.peer_secret_file's
  if (options_.cluster.has_value()) {
    VIGIL_ASSIGN_OR_RETURN(member, cluster::ClusterMember::Create(*options_.cluster, clock_));
    ownership = std::make_unique<cluster::Ownership>(options_.cluster->shard,
                                                     options_.detector.lifecycle.family_pattern);
    profile_backups = std::make_unique<cluster::ProfileBackups>();
    if (!options_.cluster->peer_secret_file.empty()) {
      absl::StatusOr<std::string> secret = ReadSecretFile(options_.cluster->peer_secret_file);
      if (!secret.ok())
        return absl::Status(secret.status().code(),
                            absl::StrCat("cluster.peer_secret_file: ", secret.status().message()));
      peer_secret = *std::move(secret);
    }
  }
  std::unique_ptr<Watchdog> watchdog;
  if (options_.watchdog.enabled()) {
    WatchdogOptions watchdog_options;
    watchdog_options.clock = clock_;
    watchdog_options.transport = transport_;
    // Working: the store accepts writes and detection's tick thread moved
    // every shard on lately (a stuck shard or tick thread stops the beats).
    watchdog_options.health = [this]() -> absl::Status {
      VIGIL_RETURN_IF_ERROR(store_->Health());
      if (!options_.detection_enabled || detection_ == nullptr) return absl::OkStatus();
      const double behind = clock_->Now() - detection_->last_tick();
      if (behind > kDetectionStallSeconds)
        return absl::UnavailableError(absl::StrFormat(
            "detection has not ticked for %.0f s", behind));
      return absl::OkStatus();
    };
    // In a pair, only the shard's leader beats: a standby beating would
    // keep the switch quiet while the leader is dead.
    if (member != nullptr)
      watchdog_options.is_leader = [m = member.get()] { return m->IsShardLeader(); };
    VIGIL_ASSIGN_OR_RETURN(
        watchdog, Watchdog::Create(options_.watchdog, std::move(watchdog_options)));
  }
  VIGIL_ASSIGN_OR_RETURN(RuleSet rules, LoadServerRules(options_));

  StoreOptions store_options;
  store_options.clock = clock_;
  store_options.retention.raw_seconds = options_.raw_retention_seconds;
  store_options.retention.rollup_seconds = options_.rollup_retention_seconds;
  store_options.max_series = options_.max_series;
  store_options.block_samples = options_.block_samples;
  store_options.block_seconds = options_.block_seconds;
  std::unique_ptr<SeriesStore> store;
  if (options_.memory) {
    store = NewMemoryStore(store_options);
  } else {
    RocksDbStoreOptions rocks;
    rocks.store = store_options;
    rocks.data_dir = options_.data_dir;
    rocks.sync_frame_log = options_.sync_frame_log;
    rocks.frame_log_checkpoint_bytes = options_.frame_log_checkpoint_bytes;
    rocks.memtable_budget_bytes = options_.memtable_budget_bytes;
    rocks.idle_block_seconds = options_.idle_block_seconds;
    const double opening = MonotonicSeconds();
    VIGIL_ASSIGN_OR_RETURN(store, OpenRocksDbStore(rocks));
    times.store_s = MonotonicSeconds() - opening;
  }
  // Rollups to a remote-write endpoint: credential files are read here; the
  // sender starts with the server and stops before the store closes.
  std::unique_ptr<RemoteWriter> remote_write;
  if (options_.remote_write.has_value()) {
    VIGIL_ASSIGN_OR_RETURN(remote_write,
                           RemoteWriter::Create(*options_.remote_write,
                                                store.get(), clock_, transport_));
  }

  DetectionOptions detection_options;
  detection_options.store = store.get();
  detection_options.clock = clock_;
  detection_options.detector = options_.detector;
  detection_options.rules = std::move(rules);
  detection_options.live = options_.detection_enabled;
  detection_options.snapshot_seconds = options_.detection_snapshot_seconds;
  detection_options.learned_snapshot_seconds = options_.detection_learned_snapshot_seconds;
  detection_options.restart_resolve_seconds = options_.restart_resolve_seconds;
  detection_options.shards = options_.detection_workers;
  if (options_.cluster.has_value()) {
    detection_options.id_shard = options_.cluster->shard;
    detection_options.raises_fleet_incidents = false;  // until it leads the fleet
    // Repeat offenders span shards: what implicated a node here counts on
    // every other server (docs/SCALING.md "What spans jobs"). Both members
    // of a pair write the same key.
    detection_options.share_implication =
        [m = member.get(), shard = options_.cluster->shard,
         ttl = static_cast<int>(std::ceil(detection_options.rules.settings.lemon_window_s))](
            const IncidentEngine::NodeImplication& i) {
          nlohmann::json value = ImplicationToJson(i);
          value["shard"] = shard;
          // A fleet-wide fault is filed under "@" and its class.
          m->PutSoon(absl::StrCat("implications/",
                                  i.cause.empty() ? i.node : absl::StrCat("@", i.cause),
                                  "/", i.job, ":",
                                  i.gpu ? absl::StrCat("g", *i.gpu) : "-", ":",
                                  static_cast<int64_t>(std::llround(i.ts * 1000))),
                     value.dump(), ttl);
        };
    // A job that moved here (a shard joined or left) starts from the
    // baselines its previous shard learned, when that shard still answers,
    // else from the copy it sent here while it lived (its pair died).
    detection_options.fetch_profiles =
        [own = ownership.get(), transport = transport_, backups = profile_backups.get(),
         clock = clock_, secret = peer_secret](
            const std::string& job) -> std::optional<std::string> {
      // Both members of the old pair learned the job; the one that has
      // learned most (the other may have restarted) gives the most.
      std::optional<std::string> best;
      std::string from;
      for (const std::string& base : own->PreviousOwnersHttp(job)) {
        const TransportResult result = transport->Send(
            cluster::SignedProfilesRequest("GET", base, job, "", secret, clock->Now()),
            kProfilesFetchSeconds);
        const nlohmann::json body = nlohmann::json::parse(result.body, nullptr, false);
        std::string data;
        if (result.http_status == 200 && body.is_object() && body.contains("profiles") &&
            body["profiles"].is_string() &&
            absl::Base64Unescape(body["profiles"].get<std::string>(), &data) &&
            (!best.has_value() || data.size() > best->size())) {
          best = std::move(data);
          from = base;
        }
      }
      if (!best.has_value() || best->size() <= kEmptyProfilesBytes) {
        if (std::optional<std::string> copy = backups->Find(job); copy.has_value()) {
          best = std::move(copy);
          from = "the copy its lost shard sent here";
        }
      }
      if (best.has_value() && best->size() > kEmptyProfilesBytes) {
        std::fprintf(stderr, "vigil-server: cluster: job %s moved here; took %zu bytes of "
                     "learned profiles from %s\n", job.c_str(), best->size(), from.c_str());
      }
      return best;
    };
  }
  // With an actuator, the scheduler is the source of truth on jobs' lives.
  std::unique_ptr<SchedulerQuery> scheduler;
  if (!options_.actuator.url.empty() && options_.scheduler_poll_seconds > 0 &&
      options_.detection_enabled) {
    absl::StatusOr<SchedulerQueryOptions> query_options =
        SchedulerQueryOptionsFrom(options_.actuator);
    if (!query_options.ok()) return query_options.status();
    query_options->transport = transport_;
    VIGIL_ASSIGN_OR_RETURN(scheduler,
                           SchedulerQuery::Create(*query_options, *clock_));
    SchedulerQuery* query = scheduler.get();
    detection_options.job_state = [query](const std::vector<std::string>& jobs) {
      return query->Query(jobs);
    };
    detection_options.scheduler_poll_seconds = options_.scheduler_poll_seconds;
    detection_options.detector.lifecycle.await_scheduler_s =
        options_.await_scheduler_seconds;
  }
  auto detection = std::make_unique<DetectionService>(detection_options);

  EscalationServiceOptions escalation_options;
  escalation_options.store = store.get();
  escalation_options.clock = clock_;
  escalation_options.detection = detection.get();
  escalation_options.transport = transport_;
  escalation_options.escalation = options_.escalation;
  escalation_options.notifications = NotificationsOf(options_);
  escalation_options.actuator = options_.actuator;
  auto changes = std::make_unique<EventHub>();
  escalation_options.changes = changes.get();
  if (escalation_options.actuator.secret.empty() &&
      !options_.actuator.secret_file.empty()) {
    VIGIL_ASSIGN_OR_RETURN(escalation_options.actuator.secret,
                           ReadSecretFile(options_.actuator.secret_file));
  }
  auto fleet = std::make_unique<FleetView>(store.get());
  escalation_options.verified_job = [view = fleet.get()](
                                        const std::string& job,
                                        const std::string& node) {
    return view->FindVerifiedJob(job, node);
  };
  escalation_options.claimed_node = [view = fleet.get()](const std::string& node) {
    return view->IsClaimedNode(node);
  };
  if (member != nullptr) {
    escalation_options.pair = PairGateOf(member.get());
    escalation_options.fleet = FleetSafetyOf(member.get());
  }
  auto escalation = std::make_unique<EscalationService>(escalation_options);
  const double restoring = MonotonicSeconds();
  VIGIL_RETURN_IF_ERROR(escalation->Start());
  detection->set_listener(escalation.get());
  VIGIL_RETURN_IF_ERROR(detection->Start());
  times.state_s = MonotonicSeconds() - restoring;
  escalation->ClaimHaltIncident();
  StoreWatchOptions watch_options;
  watch_options.store = store.get();
  watch_options.clock = clock_;
  watch_options.incident_after_seconds = options_.storage_incident_after_seconds;
  watch_options.publish = [d = detection.get()](IncidentUpdate update) {
    return d->PublishExternal(std::move(update));
  };
  watch_options.claim = [d = detection.get()] {
    return d->ClaimInherited("storage_degraded");
  };
  auto store_watch = std::make_unique<StoreWatch>(std::move(watch_options));
  store_watch->Start();
  // Alertmanager both ways (server/alertmanager/alertmanager.h).
  AlertmanagerOptions am_options = options_.alertmanager;
  am_options.public_url = escalation_options.notifications.public_url;
  std::unique_ptr<AlertForwarder> alert_forwarder;
  if (!am_options.forward_urls.empty()) {
    AlertForwarder::Leads leads;
    if (member != nullptr) leads = [m = member.get()] { return m->IsShardLeader(); };
    alert_forwarder = std::make_unique<AlertForwarder>(
        am_options, transport_, clock_,
        [d = detection.get()] {
          IncidentFilter firing;
          firing.state = IncidentState::kFiring;
          firing.limit = 100'000;
          return d->ListIncidents(firing);
        },
        std::move(leads));
  }
  std::unique_ptr<AlertIntake> alert_intake;
  std::unique_ptr<PeriodicThread> alert_expiry;
  if (am_options.intake) {
    alert_intake = std::make_unique<AlertIntake>(
        am_options, store.get(), clock_,
        [d = detection.get()](IncidentUpdate update) { return d->PublishExternal(std::move(update)); });
    VIGIL_RETURN_IF_ERROR(alert_intake->Load());
    alert_expiry = std::make_unique<PeriodicThread>(
        clock_, 5, [i = alert_intake.get()] { i->Expire(); },
        [](const std::string& what) {
          std::fprintf(stderr, "vigil-server: alert intake: %s\n", what.c_str());
        });
  }
  std::vector<FrameObserver*> observers = {fleet.get()};
  if (observer_ != nullptr) observers.push_back(observer_);
  if (remote_write != nullptr) observers.push_back(remote_write.get());
  auto tee = std::make_unique<FrameFanout>(
      options_.detection_enabled ? detection.get() : nullptr, std::move(observers));
  ShardedFrameObserver* observer = tee.get();

  IngestOptions ingest_options;
  ingest_options.store = store.get();
  ingest_options.clock = clock_;
  ingest_options.metrics = &metrics_;
  ingest_options.observer = observer;
  ingest_options.authenticator = stream_auth.get();
  ingest_options.ownership = ownership.get();
  ingest_options.max_future_skew_seconds = options_.max_future_skew_seconds;
  ingest_options.max_series_per_stream = options_.max_series_per_stream;
  ingest_options.series_budget.per_node = options_.max_new_series_per_node;
  ingest_options.series_budget.per_job = options_.max_new_series_per_job;
  ingest_options.series_budget.window_seconds = options_.raw_retention_seconds;
  ingest_options.raw_retention_seconds = options_.raw_retention_seconds;
  ingest_options.max_streams = options_.max_streams;
  ingest_options.first_batch_seconds = options_.first_batch_seconds;
  ingest_options.threads = options_.ingest_threads;
  ingest_options.worker_queue_batches = options_.detection_queue_batches;
  ingest_options.worker_linger =
      std::chrono::milliseconds(options_.detection_worker_linger_ms);
  auto ingest = std::make_unique<IngestService>(ingest_options);

  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(options_.grpc_listen, credentials, &grpc_port);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Off by default (ingest.grpc_bdp_probe): the probe sends a PING after
  // data arrives to grow a stream's flow-control window for bulk transfers,
  // and a 1 Hz agent's one small batch a second made every batch cost a
  // ping, its ack and a timer. A catch-up batch at the message limit still
  // passes (tests/server/ingest/bad_input_test.cc, LargeBatchTest).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, options_.grpc_bdp_probe ? 1 : 0);
  ingest->AddTo(builder);
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  if (grpc_server == nullptr || grpc_port == 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options_.grpc_listen));
  ingest->Start();

  std::unique_ptr<RemoteWriteReceiver> receiver;
  if (options_.remote_write_receiver.has_value()) {
    absl::StatusOr<std::unique_ptr<RemoteWriteReceiver>> created =
        RemoteWriteReceiver::Create(*options_.remote_write_receiver, ingest.get(), clock_);
    if (!created.ok()) {
      grpc_server->Shutdown();
      escalation->Stop();
      return absl::InvalidArgumentError(
          absl::StrCat("remote_write_receiver: ", created.status().message()));
    }
    receiver = *std::move(created);
  }

  HttpApiOptions http_options;
  http_options.remote_write_receiver = receiver.get();
  http_options.alert_intake = alert_intake.get();
  http_options.store = store.get();
  http_options.clock = clock_;
  http_options.metrics = &metrics_;
  http_options.detection = detection.get();
  http_options.escalation = escalation.get();
  http_options.auth = authenticator_.get();
  http_options.changes = changes.get();
  http_options.fleet = fleet.get();
  http_options.web_dir = options_.web_dir;
  http_options.max_points = options_.max_query_points;
  http_options.threads = options_.http_threads;
  http_options.max_requests_per_client = options_.http_max_requests_per_client;
  http_options.secure_cookies = options_.http_secure_cookies;
  http_options.sessions.peer_secret = peer_secret;
  http_options.profile_backups = profile_backups.get();
  if (member != nullptr) {
    // Browser sessions hold on every server: behind a load balancer the
    // next request may reach another one (docs/SCALING.md "One view").
    http_options.sessions.share = [m = member.get()](const std::string& key,
                                                     const std::string& record,
                                                     double keep_seconds) {
      m->PutSoon(absl::StrCat("sessions/", key), record,
                 static_cast<int>(std::ceil(keep_seconds)));
    };
  }
  http_options.trusted_proxies = std::move(trusted_proxies);
  http_options.cluster = member.get();
  http_options.ownership = ownership.get();
  http_options.transport = transport_;
  http_options.more_metrics = [this] { return ReloadMetricsText(); };
  http_options.reload = [this](const Identity& who) -> absl::StatusOr<nlohmann::json> {
    VIGIL_ASSIGN_OR_RETURN(ReloadResult result, Reload(who));
    return nlohmann::json{{"applied", result.applied},
                          {"restart_required", result.restart_required}};
  };
  if (watchdog != nullptr)
    http_options.more_metrics = [more = std::move(http_options.more_metrics),
                                 w = watchdog.get()] { return more() + w->MetricsText(); };
  if (remote_write != nullptr)
    http_options.more_metrics = [more = std::move(http_options.more_metrics),
                                 w = remote_write.get()] {
      return (more ? more() : std::string()) + w->MetricsText();
    };
  if (receiver != nullptr)
    http_options.more_metrics = [more = std::move(http_options.more_metrics),
                                 r = receiver.get()] {
      return (more ? more() : std::string()) + r->MetricsText();
    };
  if (alert_forwarder != nullptr)
    http_options.more_metrics = [more = std::move(http_options.more_metrics),
                                 f = alert_forwarder.get()] {
      return (more ? more() : std::string()) + f->MetricsText();
    };
  if (alert_intake != nullptr)
    http_options.more_metrics = [more = std::move(http_options.more_metrics),
                                 i = alert_intake.get()] {
      return (more ? more() : std::string()) + i->MetricsText();
    };
  auto http = std::make_unique<HttpApi>(http_options);
  if (member != nullptr) {
    member->WatchPrefix("sessions/", [h = http.get()](
                                         const std::vector<std::pair<std::string, std::string>>&
                                             records) {
      if (int bad = h->AdoptSharedSessions(records); bad > 0)
        std::fprintf(stderr, "vigil-server: %d malformed shared session record(s) skipped\n",
                     bad);
    });
  }
  auto [http_host, http_port] = SplitHostPort(options_.http_listen);
  absl::StatusOr<int> bound = http->Start(http_host, http_port);
  if (!bound.ok()) {
    grpc_server->Shutdown();
    escalation->Stop();
    return bound.status();
  }

  store_ = std::move(store);
  scheduler_ = std::move(scheduler);
  detection_ = std::move(detection);
  escalation_ = std::move(escalation);
  store_watch_ = std::move(store_watch);
  memory_trimmer_ = std::make_unique<PeriodicThread>(
      clock_, kStartTrimSeconds,
      [rounds = 0]() mutable {
        constexpr int kStartRounds = static_cast<int>(kStartTrimWindowSeconds / kStartTrimSeconds);
        constexpr int kEvery = static_cast<int>(kMemoryTrimSeconds / kStartTrimSeconds);
        if (rounds < kStartRounds || (rounds - kStartRounds) % kEvery == 0) malloc_trim(0);
        ++rounds;
      },
      [](const std::string& error) {
        std::fprintf(stderr, "vigil-server: malloc_trim threw %s\n", error.c_str());
      });
  memory_trimmer_->Start();
  changes_ = std::move(changes);
  fleet_ = std::move(fleet);
  tee_ = std::move(tee);
  stream_auth_ = std::move(stream_auth);
  ingest_ = std::move(ingest);
  remote_write_receiver_ = std::move(receiver);
  if (remote_write_receiver_ != nullptr) remote_write_receiver_->Start();
  alert_forwarder_ = std::move(alert_forwarder);
  if (alert_forwarder_ != nullptr) alert_forwarder_->Start();
  alert_intake_ = std::move(alert_intake);
  alert_expiry_ = std::move(alert_expiry);
  if (alert_expiry_ != nullptr) alert_expiry_->Start();
  grpc_server_ = std::move(grpc_server);
  http_ = std::move(http);
  grpc_port_ = grpc_port;
  http_port_ = *bound;
  remote_write_ = std::move(remote_write);
  if (remote_write_ != nullptr) remote_write_->Start();
  watchdog_ = std::move(watchdog);
  if (watchdog_ != nullptr) watchdog_->Start();
  ownership_ = std::move(ownership);
  profile_backups_ = std::move(profile_backups);
  cluster_ = std::move(member);
  if (cluster_ != nullptr && !peer_secret.empty() &&
      options_.cluster->profile_backup_seconds > 0) {
    // The shard's leader keeps a copy of what it learned of each job on
    // the shard the job moves to if this pair dies.
    profile_sender_ = std::make_unique<cluster::ProfileSender>(cluster::ProfileSenderOptions{
        .ownership = ownership_.get(),
        .transport = transport_,
        .peer_secret = peer_secret,
        .export_profiles = [det = detection_.get()](
                               const std::string& job) { return det->ExportProfiles(job); },
        .empty_bytes = kEmptyProfilesBytes});
    profile_sender_thread_ = std::make_unique<PeriodicThread>(
        clock_, options_.cluster->profile_backup_seconds,
        [this] {
          if (!cluster_->IsShardLeader()) return;
          std::vector<std::string> jobs;
          for (const JobSnapshot& job : fleet_->Jobs()) jobs.push_back(job.job);
          std::vector<std::string> errors;
          profile_sender_->SendChanged(jobs, clock_->Now(), &errors);
          // One line a round: a successor that refuses refuses every job.
          if (!errors.empty())
            std::fprintf(stderr, "vigil-server: cluster: %s (%zu profile copies not taken)\n",
                         errors.front().c_str(), errors.size());
        },
        [](const std::string& error) {
          std::fprintf(stderr, "vigil-server: sending profile copies threw %s\n", error.c_str());
        });
    profile_sender_thread_->Start();
  }
  if (cluster_ != nullptr) {
    cluster_->AddListener([own = ownership_.get(), esc = escalation_.get(),
                           det = detection_.get(), shard = options_.cluster->shard](
                              const cluster::ClusterView& view) {
      own->SetMap(view.map);
      esc->OnLeadershipChange(view.shard_leader);
      // What spans jobs is raised by the fleet leader's pair alone, so two
      // shards never open the same fleet-wide fault.
      det->SetRaisesFleetIncidents(view.fleet_leader_shard == shard);
    });
    ConnectToMember(cluster_.get(), escalation_.get());
    cluster_->WatchPrefix(
        "implications/",
        [det = detection_.get(), shard = options_.cluster->shard](
            const std::vector<std::pair<std::string, std::string>>& entries) {
          std::vector<IncidentEngine::NodeImplication> others;
          for (const auto& [name, text] : entries) {
            const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
            // Our own shard's were counted here when made.
            if (!value.is_object() || value.value("shard", "") == shard) continue;
            absl::StatusOr<IncidentEngine::NodeImplication> i = ImplicationFromJson(value);
            if (i.ok()) others.push_back(*std::move(i));
          }
          det->AddImplications(others);
        });
    cluster_->Start();
  }
  absl::MutexLock l(&reload_mu_);
  last_reload_ok_ts_ = clock_->Now();
  times.total_s = MonotonicSeconds() - started;
  startup_times_ = times;
  return absl::OkStatus();
}

void VigilServer::EnableReload(ConfigSource source, LoadedConfig running) {
  absl::MutexLock l(&reload_mu_);
  reload_source_ = std::move(source);
  started_config_ = running;
  applied_config_ = std::move(running);
}

absl::StatusOr<VigilServer::ReloadResult> VigilServer::Reload(const Identity& who) {
  absl::MutexLock l(&reload_mu_);
  if (!reload_source_.has_value())
    return absl::FailedPreconditionError(
        "this server was not started from a config it can read again, or is stopping");
  if (escalation_ == nullptr) return absl::FailedPreconditionError("the server is not running");
  // Everything is read and checked before anything changes.
  absl::StatusOr<LoadedConfig> next = LoadConfig(*reload_source_);
  absl::Status status = next.ok() ? CheckConfigFiles(*next) : next.status();
  ReloadResult result;
  if (status.ok()) {
    bool rules_changed = false;
    for (std::string& key : ChangedKeys(applied_config_, *next)) {
      if (!ReloadableKey(key)) continue;
      rules_changed |= absl::StartsWith(key, "detection.rules_file");
      result.applied.push_back(std::move(key));
    }
    for (std::string& key : ChangedKeys(started_config_, *next))
      if (!ReloadableKey(key)) result.restart_required.push_back(std::move(key));
    if (!result.applied.empty()) {
      authenticator_->Replace(next->options.auth);
      // public_url stays as it started (links, Alertmanager's generator
      // URL): a change of it waits for the restart it is listed for.
      NotificationOptions notifications = next->options.notifications;
      notifications.public_url = NotificationsOf(options_).public_url;
      escalation_->Reconfigure(next->options.escalation, std::move(notifications));
      if (rules_changed) detection_->SetRules(*next->rules);
    }
    applied_config_ = *std::move(next);
    ++reloads_ok_;
    last_reload_ok_ts_ = clock_->Now();
    restart_required_ = result.restart_required.size();
  } else {
    status = absl::InvalidArgumentError(
        absl::StrCat("config not reloaded, nothing changed:\n", status.message()));
    ++reloads_failed_;
  }
  last_reload_ok_ = status.ok();
  std::string detail =
      status.ok() ? absl::StrCat("applied: ",
                                 result.applied.empty() ? "nothing" : absl::StrJoin(result.applied, ", "))
                  : std::string(status.message());
  if (!result.restart_required.empty())
    absl::StrAppend(&detail, "; changed, in force after a restart: ",
                    absl::StrJoin(result.restart_required, ", "));
  escalation_->RecordAudit(who, "reload_config", reload_source_->file, detail, status);
  std::fprintf(stderr, "vigil-server: config reload by %s: %s\n", who.name.c_str(),
               detail.c_str());
  if (!status.ok()) return status;
  return result;
}

std::string VigilServer::ReloadMetricsText() const {
  absl::MutexLock l(&reload_mu_);
  return absl::StrFormat(
      "# HELP vigil_config_last_reload_successful Whether the last config reload "
      "(SIGHUP, POST /-/reload) worked (1) or changed nothing for an error (0).\n"
      "# TYPE vigil_config_last_reload_successful gauge\n"
      "vigil_config_last_reload_successful %d\n"
      "# HELP vigil_config_last_reload_success_timestamp_seconds When the config was last "
      "loaded with success (the start counts), unix seconds.\n"
      "# TYPE vigil_config_last_reload_success_timestamp_seconds gauge\n"
      "vigil_config_last_reload_success_timestamp_seconds %.3f\n"
      "# HELP vigil_config_reloads_total Config reloads, by result (ok, error).\n"
      "# TYPE vigil_config_reloads_total counter\n"
      "vigil_config_reloads_total{result=\"ok\"} %d\n"
      "vigil_config_reloads_total{result=\"error\"} %d\n"
      "# HELP vigil_config_restart_required_keys Config keys changed since the start that a "
      "reload cannot apply: they take effect at the next start.\n"
      "# TYPE vigil_config_restart_required_keys gauge\n"
      "vigil_config_restart_required_keys %d\n",
      last_reload_ok_ ? 1 : 0, last_reload_ok_ts_, reloads_ok_, reloads_failed_,
      restart_required_);
}

absl::Status VigilServer::Stop() {
  if (store_ == nullptr) return absl::OkStatus();
  {
    // A reload under way ends first; later ones are refused.
    absl::MutexLock l(&reload_mu_);
    reload_source_.reset();
  }
  // Leave the cluster first: the standby leads at once, not a lease later.
  if (profile_sender_thread_ != nullptr) profile_sender_thread_->Stop();
  if (cluster_ != nullptr) cluster_->Stop();
  // An immediate deadline cancels live streams; the ingest service then
  // sees them end before the server they belong to goes.
  grpc_server_->Shutdown(gpr_inf_past(GPR_CLOCK_MONOTONIC));
  ingest_->Shutdown();
  grpc_server_.reset();
  // No request may reach the ingest path once it is gone: HTTP (remote
  // write) stops first, and the receiver hands its open frames over.
  http_->Stop();
  if (alert_expiry_ != nullptr) alert_expiry_->Stop();
  alert_expiry_.reset();
  if (alert_forwarder_ != nullptr) alert_forwarder_->Stop();
  alert_forwarder_.reset();
  if (remote_write_receiver_ != nullptr) remote_write_receiver_->Stop();
  remote_write_receiver_.reset();
  ingest_.reset();
  stream_auth_.reset();
  store_watch_->Stop();
  memory_trimmer_->Stop();
  detection_->Stop();
  http_.reset();
  watchdog_.reset();  // after http_, which serves its metrics
  escalation_->Stop();
  tee_.reset();
  remote_write_.reset();  // sends what is pending, briefly (RemoteWriter::Stop)
  fleet_.reset();
  detection_.reset();
  store_watch_.reset();
  memory_trimmer_.reset();
  escalation_.reset();
  changes_.reset();
  absl::Status flushed = store_->Flush();
  store_.reset();
  profile_sender_thread_.reset();
  profile_sender_.reset();
  cluster_.reset();
  profile_backups_.reset();
  ownership_.reset();
  grpc_port_ = 0;
  http_port_ = 0;
  return flushed;
}

}  // namespace vigil
