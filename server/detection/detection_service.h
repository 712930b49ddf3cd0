// Online detection in the server: every accepted frame goes through the
// DetectionPipeline (detector + incident engine); incident updates are
// persisted in the store's events family and indexed in memory for the
// HTTP API. A background thread moves detection time with the server clock
// so node silence and auto-resolution happen without frames.
//
// Detection time for liveness is the server's clock: a frame is a sign of
// life when it arrives. Agents backfilling an outage's frames, each at its
// own pace, therefore neither look silent nor make the others look silent
// (in vigil-replay, where frames are time-ordered, it is the frames' ts).
// Everything else (rates, phases, trends) goes by the frames' own ts.
//
// Storage layout (events family, kept forever):
//   stream "incidents"       one event per incident, when it opens:
//                            {"id": "inc-000042"}
//   stream "incident/<id>"   one event per update: {"type", "ts",
//                            "incident": IncidentToJson(incident, full)}
//
// Ids: the engine numbers its incidents from inc-000001 in every process.
// The service maps them onto server ids that continue after the highest id
// stored, so ids never repeat across restarts. On Start(), stored incidents
// are listed again with their last stored state, and the detector takes
// back its last snapshot (store state "detection", written every
// snapshot_seconds and at Stop(): baselines, runs in progress, job
// profiles, repeat-offender history), so a restart - even a kill -9 - does
// not send running jobs back to learning. An incident that was firing at
// shutdown is not reopened by the new process. A fault that
// still holds after the restart is seen again by the fresh engine: its
// first incident of the same job, node, GPU and hint category is taken as
// the stored one (adopted: same server id, an evidence_added or
// severity_raised update instead of "opened"), so a restart neither pages
// again nor repeats an automatic action for a fault already handled. One
// the fresh engine does not raise again within restart_resolve_seconds of
// frames from its node (its nodes; its job when job-wide) resolves, as it
// would have once its conditions cleared; one whose nodes stay silent
// stays firing.
#ifndef VIGIL_SERVER_DETECTION_DETECTION_SERVICE_H_
#define VIGIL_SERVER_DETECTION_DETECTION_SERVICE_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "detector/detector.h"
#include "detector/options.h"
#include "nlohmann/json.hpp"
#include "rules/incident.h"
#include "rules/pipeline.h"
#include "rules/rule.h"
#include "server/frame_observer.h"
#include "server/detection/incident_listener.h"
#include "server/fleet/scheduler_query.h"
#include "storage/series_store.h"

namespace vigil {

// Asks the scheduler the state of jobs (SchedulerQuery::Query, or a fake
// in tests); called from the service's scheduler thread only.
using JobStateQuery =
    std::function<absl::StatusOr<std::vector<SchedulerJobStatus>>(
        const std::vector<std::string>& jobs)>;

// What DetectionService needs. Pointers are not owned and must outlive it.
struct DetectionOptions {
  SeriesStore* store = nullptr;  // required
  Clock* clock = nullptr;        // required: the tick thread's time
  // Detector tunables; defaults as in detector/options.h.
  DetectorOptions detector;
  // Rules in use; default: the built-in catalogue.
  RuleSet rules = DefaultRuleSet();
  // False: only serve stored incidents (detection disabled): no tick
  // thread, and OnFrame ignores frames.
  bool live = true;
  // Seconds of clock time between ticks (AdvanceTime) of the tick thread.
  double tick_seconds = 1;
  // Seconds of clock time between snapshots of what detection has learned
  // (and one at Stop()) while some series learn; 0 disables them.
  double snapshot_seconds = 60;
  // ... and once, at the last snapshot, no running job's series was still
  // to learn its baseline (every baseline learned: what changes is their
  // slow adaptation), at least snapshot_seconds.
  double learned_snapshot_seconds = 300;
  // The scheduler, the source of truth on jobs' lives (empty: none). Every
  // scheduler_poll_seconds, and at once when the nodes of a job all
  // stopped reporting, the jobs that report (and those waiting) are asked
  // about: running ones whose nodes all stop are job_unreachable (P1);
  // ended, requeued (pending) or suspended ones end on every node, never a
  // fault. Set detector.lifecycle.await_scheduler_s for how long a stop
  // waits for the answer.
  JobStateQuery job_state;
  double scheduler_poll_seconds = 15;
  // A counter series first seen by this process starts from its last
  // stored sample of the past prime_counters_seconds (Detector::
  // PrimeCounter): an error counter that moved across a restart is seen
  // to move. Agents backfill an outage from their spools, so that sample
  // is one frame before; an older one is another run's.
  double prime_counters_seconds = 300;
  // Seconds of clock time, counted from the first frame of its node (its
  // nodes; its job when job-wide) in this process, after which an
  // incident firing before a restart that the fresh engine has not raised
  // again resolves (see the file comment). Longer than the slowest
  // detector to raise a condition again (a hang in a benign phase: 30 min).
  double restart_resolve_seconds = 1800;
  // Detection shards: jobs are split among this many independent
  // pipelines by their family (detector.lifecycle.family_pattern, else the
  // job name), so that the server's frame workers can run them on several
  // cores; a job and its family are always in one shard. What one shard
  // learned is snapshotted under its own key ("detection" when 1,
  // "detection/K-of-N" otherwise): changing the count re-learns. At least 1.
  int shards = 1;
  // Cluster mode: this server's shard, carried by new incident ids
  // ("inc-s0-000001") so ids stay unique across the fleet's merged view.
  std::string id_shard;
  // Cluster mode: the learned profiles of a job another shard watched
  // before (Detector::ExportProfiles there), or nullopt. Asked once per job,
  // on the worker of its detection shard before its first frame here, so
  // that the job's new series start from its baselines (a job moved by a
  // shard joining or leaving). May block (briefly: a request to the old
  // owner). Null: never asked.
  std::function<std::optional<std::string>(const std::string& job)> fetch_profiles;
  // Cluster mode: receives every repeat-offender implication this server
  // makes (an incident that implicated a node: IncidentEngine::
  // NodeImplication), to share with the servers that watch the fleet's
  // other jobs (their AddImplications). Called on detection threads; must
  // not block. Null: kept in this process.
  std::function<void(const IncidentEngine::NodeImplication&)> share_implication;
  // Whether this server opens fleet-wide fault incidents at the start
  // (rules/engine.h: one detection shard raises what all count). Cluster
  // mode: false, then SetRaisesFleetIncidents follows the fleet leader.
  bool raises_fleet_incidents = true;
};

// An implication as JSON {"node", "cause"?, "ts", "job", "id", "kind",
// "gpu"?} (node "" when cause is set), and back (kInvalidArgument naming
// what is missing or mistyped, or when not exactly one of node and cause
// is set).
nlohmann::json ImplicationToJson(const IncidentEngine::NodeImplication& implication);
absl::StatusOr<IncidentEngine::NodeImplication> ImplicationFromJson(const nlohmann::json& json);

// Which incidents ListIncidents returns; every set condition must hold.
struct IncidentFilter {
  // Only incidents in this state; nullopt: any.
  std::optional<IncidentState> state;
  // Only these severities; empty: any.
  std::vector<Severity> severities;
  // Exact job / node; empty: any.
  std::string job;
  std::string node;
  // Case-insensitive substring of the id, kind, job, node, summary or
  // hint; empty: any.
  std::string text;
  // At most this many, newest first.
  size_t limit = 100;
};

// Firing incidents counted by severity (index = Severity), per job and per
// node; job-wide incidents (no node) count for their job only.
struct FiringCounts {
  std::map<std::string, std::array<int, 4>> by_job;
  std::map<std::string, std::array<int, 4>> by_node;
};

// Counters for /metrics, read without a common snapshot.
struct DetectionCounters {
  // Frames run through the pipeline.
  uint64_t frames = 0;
  // Incident updates by UpdateType (index = enum value).
  std::array<uint64_t, 5> updates{};
  // Firing incidents in the index by Severity (index = enum value).
  std::array<uint64_t, 4> open{};
  // Incident events that could not be persisted (the index still has them).
  uint64_t persist_errors = 0;
  // Stored incidents skipped at Start() because their events are unreadable.
  uint64_t unreadable = 0;
  // Incidents of the fresh engine taken as one that was firing before a
  // restart (see the file comment).
  uint64_t adopted = 0;
  // Counter series this process started from their last stored sample
  // (DetectionOptions::prime_counters_seconds).
  uint64_t counters_primed = 0;
  // Incidents firing before a restart that the fresh engine did not raise
  // again while their nodes reported (DetectionOptions::
  // restart_resolve_seconds), resolved.
  uint64_t restart_resolved = 0;
  // Scheduler queries made and failed (DetectionOptions::job_state).
  uint64_t scheduler_queries = 0;
  uint64_t scheduler_errors = 0;
  // Snapshots of the learned state written, failed, their last size, the
  // series still to learn when it was written (SnapshotCursor::
  // still_to_learn), and whether Start() took one back.
  uint64_t snapshots = 0;
  uint64_t snapshot_errors = 0;
  uint64_t snapshot_bytes = 0;
  uint64_t snapshot_learning_series = 0;
  bool restored = false;
};

// Runs detection on every frame and keeps the incident index.
// Thread-safe: frames may come concurrently from several threads (each
// shard's pipeline runs under its own lock; incident updates are published
// under one lock, in order per incident), and the query methods from HTTP
// threads. Start() and Stop() must be called from one thread.
class DetectionService : public FrameObserver {
 public:
  explicit DetectionService(DetectionOptions options);
  // Stops the tick thread if running.
  ~DetectionService() override;

  // Loads the stored incidents into the index, sets the next server id
  // after the highest stored one and, if live, starts the tick thread.
  // kFailedPrecondition if already started.
  absl::Status Start();
  // Stops the tick thread and writes a last snapshot. Idempotent.
  void Stop();

  // Writes a snapshot of what detection has learned now. Errors are
  // counted (DetectionCounters) and returned.
  absl::Status Snapshot();

  // The shard that watches `job`: in [0, shards), the same for every run
  // of a family and stable across restarts. Thread-safe.
  int ShardOf(std::string_view job) const;
  int shards() const { return static_cast<int>(shards_.size()); }

  // Registers the frame's unseen series with its shard's pipeline (their
  // keys from the store), runs the frame and persists the incident updates
  // it caused. `shard` must be ShardOf(frame.job). No-op unless live.
  void OnFrame(int shard, const FrameView& frame);
  // As OnFrame(ShardOf(frame.job), frame).
  void OnFrame(const FrameView& frame) override;
  // The learned profiles of `job` (Detector::ExportProfiles), for the
  // cluster shard that takes the job over.
  std::string ExportProfiles(std::string_view job) const;
  // Profiles imported from other shards so far.
  uint64_t profiles_imported() const { return profiles_imported_.load(); }

  // The frame's node now reports a job of another shard; `shard` is the
  // one that watched its previous job (DetectionPipeline::NodeMovedAway).
  // `handed_over`: its job moved to another server of the cluster. No-op
  // unless live.
  void NodeMovedAway(int shard, const FrameView& frame, bool handed_over = false);

  // Moves detection time on to clock time `now` (see the top of the file)
  // without a frame and persists what fell due (node silence, hangs,
  // auto-resolution). The tick thread calls it every tick_seconds. No-op
  // unless live or before the first frame.
  void AdvanceTime(double now);

  // Incidents matching `filter`, newest (first detection) first, each the
  // IncidentToJson full form of its latest snapshot.
  std::vector<nlohmann::json> ListIncidents(const IncidentFilter& filter) const;

  // The firing incidents counted per job and node, without copying them.
  FiringCounts CountFiring() const;

  // The latest snapshot of incident `id` (full form) plus "timeline": its
  // stored events, oldest first, as {"type", "ts", "severity", "state"}.
  // kNotFound for an unknown id.
  absl::StatusOr<nlohmann::json> GetIncident(std::string_view id) const;

  // The detector's current baseline of store series `id`; kNotFound when
  // the detector has not seen it (detection off, or no frame carried it
  // since this process started).
  absl::StatusOr<SeriesBaseline> Baseline(SeriesId id) const;

  // Current counters.
  DetectionCounters counters() const;

  // Clock time at which the tick thread last finished moving every shard
  // on (AdvanceTime); the Start() time before the first tick. A tick that
  // hangs (a shard stuck) leaves it behind: the watchdog's health signal.
  double last_tick() const { return last_tick_.load(); }

  // Sets who hears about every persisted incident update (not owned, may
  // be null). Must be called before Start().
  void set_listener(IncidentListener* listener) { listener_ = listener; }

  // Records an incident raised outside detection (e.g. "remediation
  // halted" from the action interlocks): on kOpened `update.incident.id`
  // must be empty and a server id is allocated and returned; later updates
  // carry that id. Persisted, indexed and passed to the listener like
  // detected incidents. kInvalidArgument for an id that is not one of
  // its external incidents (or a non-empty id on kOpened). Must not be
  // called from the listener.
  absl::StatusOr<std::string> PublishExternal(IncidentUpdate update);

  // Cluster mode: repeat-offender implications other servers made (their
  // options.share_implication): every pipeline counts them toward its
  // repeat offenders, as it does the other workers' here. One already
  // known changes nothing.
  void AddImplications(const std::vector<IncidentEngine::NodeImplication>& implications);

  // Whether this server opens fleet-wide fault incidents (on its first
  // detection shard; every shard counts them). In cluster mode, true on
  // both members of the fleet leader's shard pair: whichever leads the
  // pair pages (docs/SCALING.md "What spans jobs").
  void SetRaisesFleetIncidents(bool raises);

  // Every shard uses `rules` from its next frame on (a config reload;
  // IncidentEngine::SetRules says what happens to open incidents).
  void SetRules(const RuleSet& rules);

  // Hands the incident of `kind` that was firing when the previous
  // process stopped to the component that raises that kind outside
  // detection (StoreWatch: "storage_degraded"): it becomes one of the
  // external incidents, updated with PublishExternal under its stored id,
  // and is no longer resolved by restart_resolve_seconds. Returns its
  // header (no evidence), or nullopt when none is firing. Call after
  // Start().
  std::optional<Incident> ClaimInherited(std::string_view kind);

 private:
  // Loads stream "incidents" and each incident's latest event.
  absl::Status LoadStored();
  // One detection shard: its pipeline and what it has to publish.
  struct Shard {
    explicit Shard(const DetectionOptions& options)
        : pipeline(options.detector, options.rules) {}
    std::mutex mu;
    DetectionPipeline pipeline ABSL_GUARDED_BY(mu);
    std::vector<IncidentUpdate> updates ABSL_GUARDED_BY(mu);
    // Whether a frame has been seen (liveness is judged after the first).
    bool seen_frame ABSL_GUARDED_BY(mu) = false;
    // Jobs whose profiles were asked for (options.fetch_profiles).
    absl::flat_hash_set<std::string> profiles_asked ABSL_GUARDED_BY(mu);
  };
  // Imports `job`'s profiles from options.fetch_profiles the first time the
  // job is seen (takes shard.mu; call without it).
  void MaybeFetchProfiles(Shard& shard, std::string_view job);
  // Hands the repeat-offender implications shard `from` made to the other
  // shards and to options.share_implication (call without any shard lock
  // held).
  void ShareImplications(int from);
  // The store state key of shard `k`'s snapshot.
  std::string SnapshotKey(int k) const;
  // Maps, persists and indexes `updates` of `shard` (-1: external). Takes
  // publish_mu_; callers hold the shard's lock, so the events of one
  // incident are stored in order.
  void Publish(int shard, std::vector<IncidentUpdate>& updates)
      ABSL_LOCKS_EXCLUDED(publish_mu_);
  void PublishLocked(int shard, std::vector<IncidentUpdate>& updates)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_);
  // The tick thread's loop; the first tick is due at `first_tick`.
  void TickLoop(double first_tick);
  // The scheduler thread's loop: asks about the jobs that report.
  void SchedulerLoop();
  // Primes counter series `id`, first seen in a frame at `ts`, with its
  // last stored sample before `ts` (DetectionOptions::
  // prime_counters_seconds). Store errors leave it unprimed.
  void PrimeFromStore(Shard& shard, uint32_t id, double ts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Asks the scheduler about the jobs that report (or wait for it) and
  // tells the pipeline. Errors are counted.
  void AskScheduler();

  const DetectionOptions options_;

  const JobFamilyMatcher families_;
  std::vector<std::unique_ptr<Shard>> shards_;

  // Acquired after a shard's lock.
  mutable std::mutex publish_mu_;
  // "<shard>/<engine id>" (external: the engine id) -> server id.
  absl::flat_hash_map<std::string, std::string> server_ids_
      ABSL_GUARDED_BY(publish_mu_);
  int64_t next_id_ ABSL_GUARDED_BY(publish_mu_) = 1;
  // Server id -> engine id of incidents raised by PublishExternal.
  absl::flat_hash_map<std::string, std::string> external_
      ABSL_GUARDED_BY(publish_mu_);
  IncidentListener* listener_ = nullptr;

  mutable std::mutex index_mu_;
  // Server id -> latest snapshot (full form). Ordered by id.
  std::map<std::string, nlohmann::json> index_ ABSL_GUARDED_BY(index_mu_);

  // A stored incident firing at Start(), until the engine raises it again.
  struct Inherited {
    std::string id;
    std::string job, node, gpu, hint_category;  // as stored ("" for null)
    std::vector<std::string> nodes;  // of a several-node incident
    double ts = 0;
    std::string severity, kind, summary, hint;
    // Clock time of the first frame of its node(s) or job in this process;
    // NaN until then.
    double seen_since = std::numeric_limits<double>::quiet_NaN();
  };
  // Notes, for the inherited incidents not seen yet, that `frame` is one
  // of their node's or job's.
  void NoteInheritedSeen(const FrameView& frame, double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_);
  // The incident header of `h` (no evidence), as stored.
  static Incident HeaderOf(const Inherited& h);
  // Resolves the inherited incidents seen for restart_resolve_seconds
  // without the engine raising them again.
  void ResolveQuietInherited(double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_);
  // Persists and indexes `update` of server incident `id` (its snapshot
  // `snapshot`, full form) and tells the listener.
  void Record(const IncidentUpdate& update, const std::string& id,
              nlohmann::json snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu_);
  std::vector<Inherited> inherited_ ABSL_GUARDED_BY(publish_mu_);
  // Whether inherited_ is not empty (read per frame without the lock).
  std::atomic<bool> has_inherited_{false};
  // Adopted incidents by server id, until they resolve: the fresh engine
  // may see less of the fault than the stored incident did (a counter's
  // jump happened before the restart), and an incident must not look
  // milder for it, so the stored severity, kind, summary and hint stay
  // while the engine's are milder.
  absl::flat_hash_map<std::string, Inherited> adopted_heads_
      ABSL_GUARDED_BY(publish_mu_);
  std::atomic<uint64_t> adopted_{0};
  std::atomic<uint64_t> counters_primed_{0};
  std::atomic<uint64_t> restart_resolved_{0};
  std::atomic<uint64_t> frames_{0};
  std::atomic<uint64_t> profiles_imported_{0};
  std::atomic<uint64_t> snapshots_{0}, snapshot_errors_{0}, snapshot_bytes_{0};
  std::atomic<uint64_t> snapshot_learning_series_{0};
  bool restored_ = false;  // set by Start() only
  std::array<std::atomic<uint64_t>, 5> updates_by_type_{};
  std::atomic<uint64_t> persist_errors_{0};
  uint64_t unreadable_ = 0;  // set by Start() only

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ ABSL_GUARDED_BY(tick_mu_) = false;
  bool started_ = false;
  std::thread tick_thread_;
  // The scheduler thread waits on tick_cv_ too; woken early when a job
  // waits for the scheduler's word.
  bool ask_now_ ABSL_GUARDED_BY(tick_mu_) = false;
  std::thread scheduler_thread_;
  std::atomic<uint64_t> scheduler_queries_{0}, scheduler_errors_{0};
  std::atomic<double> last_tick_{0};
};

}  // namespace vigil

#endif  // VIGIL_SERVER_DETECTION_DETECTION_SERVICE_H_
