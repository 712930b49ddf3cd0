// Escalation in the server: turns incident updates into pages (through the
// escalation/ state machine and the notify/ channels) and automatic
// actions (through the interlocks of escalation/ActionGate and signed
// webhooks to vigil-actuator), all delivered by the durable Outbox. Keeps
// the operator-facing lifecycle (acknowledged, silenced, resolved by an
// operator), each incident's escalation timeline, the action records and
// the audit log.
//
// Implemented by job: escalation_service.cc (the core: updates to pages,
// operator calls, state, ticks), escalation_actions.cc (actions and their
// gate), escalation_journal.cc (timelines, audit log, delivery listings),
// twilio_callback.cc (phone keypresses); page_notice.h and
// diagnostic_report.h hold what a page carries.
//
// Storage (store events, kept forever; state in the store's state space):
//   streams "outbox", "outbox/actions"   the two outboxes (server/delivery/outbox.h)
//   state "escalation"       escalator + gate state, counters, the
//                            incidents being escalated (restored by Start)
//   stream "timeline/<id>"   {"type", "ts", "who", "detail", ...}: pages,
//                            deliveries, acks, silences, actions
//   stream "actions"         every change of an action record (full record)
//   stream "audit"           {"ts", "who", "role", "action", "target",
//                            "detail", "result"}: every operator call
#ifndef VIGIL_SERVER_ESCALATION_ESCALATION_SERVICE_H_
#define VIGIL_SERVER_ESCALATION_ESCALATION_SERVICE_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "escalation/escalation.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "rules/incident.h"
#include "server/config/auth.h"
#include "server/config/config.h"
#include "server/escalation/event_hub.h"
#include "server/fleet/fleet_view.h"
#include "server/detection/incident_listener.h"
#include "server/delivery/outbox.h"
#include "storage/series_store.h"

namespace vigil {

class DetectionService;

// What EscalationService needs. Pointers are not owned and must outlive it.
struct EscalationServiceOptions {
  SeriesStore* store = nullptr;           // required
  Clock* clock = nullptr;                 // required
  DetectionService* detection = nullptr;  // required: raises "remediation halted"
  Transport* transport = nullptr;         // required: where requests go
  EscalationConfig escalation = DefaultEscalationConfig();
  NotificationOptions notifications;
  ActuatorOptions actuator;
  // Seconds between ticks (re-pages, silences, state snapshots).
  double tick_seconds = 1;
  // Where every incident change (detection update or timeline event) and
  // silence change is announced to live pages; null: nowhere.
  EventHub* changes = nullptr;
  // The scheduler id of a job and a node that runs it, as that node's agent
  // verified them (FleetView::FindVerifiedJob), preferring the node given.
  // Automatic job actions (pause, checkpoint then pause) go only to
  // verified jobs, aimed at that id and node so the actuator checks the job
  // runs there; the others wait for an operator's approval. Null: no job is
  // verified.
  std::function<std::optional<VerifiedJob>(const std::string& job,
                                           const std::string& node)>
      verified_job;
  // True when a node is named only by remote-written series' labels
  // (FleetView::IsClaimedNode): cordons of it, like actions on jobs no
  // agent verified, wait for an operator's approval. Null: none is.
  std::function<bool(const std::string& node)> claimed_node;
  // Cluster mode (docs/SCALING.md): both members of a shard pair escalate
  // every incident alike, with page keys built from what both see (the
  // incident's job, culprit and opening time, the round and the channel:
  // PairPageKey), but only the one that leads sends pages and starts
  // actions. The other holds its pages for hold_seconds; when it comes to
  // lead, it sends those the old leader did not deliver. Unset: a single
  // server, which always sends.
  struct PairGate {
    // True while this server leads its pair.
    std::function<bool()> leading;
    // A page (outbox key) reached its receiver: marked for the pair.
    std::function<void(const std::string& key)> delivered;
    // Every page key the pair's leaders marked as delivered.
    std::function<absl::StatusOr<absl::flat_hash_set<std::string>>()> delivered_keys;
    // An operator acknowledged, unacknowledged or resolved the incident of
    // `incident_key` (PairIncidentKey) here, or an automatic action (its
    // pair key, PairIncidentKey "/" action "/" node) came to wait for an
    // approval or was approved here: tell the other member
    // (ApplySharedOperations there). May be null.
    std::function<void(const std::string& key, const nlohmann::json& operation)>
        share_operation;
    // The leader sent an automatic action (its pair key: PairIncidentKey
    // "/" action "/" node) to the actuator: marked for the pair. May be
    // null.
    std::function<void(const std::string& key)> action_started;
    // Every pair action key the pair's leaders marked. May be null: then a
    // member that comes to lead starts no action of earlier incidents.
    std::function<absl::StatusOr<absl::flat_hash_set<std::string>>()> started_actions;
    // This member's name, so it skips its own shared operations.
    std::string self;
    double hold_seconds = 900;
  };
  std::optional<PairGate> pair;
  // Cluster mode: safety state every server of the fleet shares
  // (docs/SCALING.md): silences, and the remediation circuit breaker (its
  // count of cordons and pauses, and whether it is open). Unset: this
  // server's own.
  struct FleetSafety {
    // Stores a fleet-wide entry ("breaker", "silences/<id>") for
    // `keep_seconds` (0: until replaced); every server gets all entries
    // back through ApplyFleetState. Entries that cannot be stored are
    // tried again at the next tick.
    std::function<absl::Status(const std::string& name, const std::string& value,
                               double keep_seconds)>
        share;
    // Takes one of `limit` fleet-wide slots of "cordon" or "pause" for
    // `window_seconds`: true taken, false all held, error unknown.
    std::function<absl::StatusOr<bool>(const std::string& kind, int limit,
                                       double window_seconds)>
        take_slot;
    // Frees every slot (the breaker was reset).
    std::function<absl::Status()> clear_slots;
    // This member's name ("shard/replica"): silence ids made here carry it,
    // and its own entries are not applied twice.
    std::string self;
  };
  std::optional<FleetSafety> fleet;
};

// What both members of a pair call the same incident:
// "<job>:<node or nodes>:<gpu>:<opening time in ms>".
std::string PairIncidentKey(const Incident& incident);

// The page key both members of a pair derive for `page_key` (the
// escalator's "<incident id>/<round>/<channel>[/<user>]") of `incident`:
// the incident id is replaced by "<job>:<node or nodes>:<gpu>:<opening
// time in ms>", which does not depend on the order a server numbered its
// incidents in.
std::string PairPageKey(const Incident& incident, std::string_view page_key);

// Thread-safe. OnIncidentUpdate is called by DetectionService (under its
// pipeline lock: it never calls back into detection); the rest from HTTP
// threads.
class EscalationService : public IncidentListener {
 public:
  explicit EscalationService(EscalationServiceOptions options);
  // Stops if running.
  ~EscalationService() override;

  // Restores the stored state, starts the outbox and the tick thread.
  // kFailedPrecondition if already started; kDataLoss if the stored state
  // cannot be read back.
  absl::Status Start();
  // Stops the tick thread and the outbox and stores the state. Idempotent.
  void Stop();

  // Escalates an engine update (pages, automatic actions).
  void OnIncidentUpdate(const IncidentUpdate& update) override;

  // Operator calls. Each is audited. kNotFound for an unknown id,
  // kFailedPrecondition when the incident is not in a state that allows it;
  // the answer is the incident's escalation status (Escalator::StatusOf).
  absl::StatusOr<nlohmann::json> Acknowledge(std::string_view id,
                                             const Identity& who,
                                             std::string_view comment);
  absl::StatusOr<nlohmann::json> Unacknowledge(std::string_view id,
                                               const Identity& who);
  absl::StatusOr<nlohmann::json> Resolve(std::string_view id,
                                         const Identity& who,
                                         std::string_view comment);

  // Silences: body as ParseSilence; kInvalidArgument for a bad body.
  absl::StatusOr<nlohmann::json> AddSilence(const nlohmann::json& body,
                                            const Identity& who);
  absl::StatusOr<nlohmann::json> ExpireSilence(std::string_view id,
                                               const Identity& who);
  // {"silences": [...]} not yet ended.
  nlohmann::json ListSilences() const;

  // {"deliveries": [...]} of `incident_id` (all when empty), newest first.
  nlohmann::json ListDeliveries(std::string_view incident_id,
                                size_t limit) const;

  // {"actions": [...]} of `incident_id` (all when empty), newest first.
  nlohmann::json ListActions(std::string_view incident_id) const;
  // `listing` (of ListDeliveries or ListActions) without the receivers' and
  // the actuator's raw answers ("last_response", "result"), which may hold
  // phone numbers, account ids or echoed secrets: what a viewer may see.
  static nlohmann::json WithoutRawAnswers(nlohmann::json listing);
  // Runs an action by hand: body {"action", "job", "node", "incident_id",
  // "reason"}; still goes through dry-run and the circuit breaker.
  // kInvalidArgument for a bad body.
  absl::StatusOr<nlohmann::json> RequestAction(const nlohmann::json& body,
                                               const Identity& who);
  // Approves an action waiting for approval; kNotFound / kFailedPrecondition.
  absl::StatusOr<nlohmann::json> ApproveAction(std::string_view id,
                                               const Identity& who);

  // {"tripped", "dry_run", "max_cordons", ...}.
  nlohmann::json Remediation() const;
  // Closes the circuit breaker and resolves the "remediation halted"
  // incident.
  nlohmann::json ResetRemediation(const Identity& who);
  // After a restart, takes back from detection the "remediation halted"
  // incident the breaker opened before it (DetectionService::
  // ClaimInherited), so that ResetRemediation resolves it. Call once
  // both services have started; a no-op when the breaker is not tripped.
  void ClaimHaltIncident();

  // {"entries": [...]}, newest first.
  nlohmann::json Audit(size_t limit) const;
  // {"schedules": [{"name", "user"}]} at the current time.
  nlohmann::json OnCall() const;

  // Adds "lifecycle" and "escalation" (StatusOf) to an incident JSON.
  void Decorate(nlohmann::json* incident) const;
  // The escalation timeline of incident `id`, oldest first.
  std::vector<nlohmann::json> Timeline(std::string_view id) const;

  // Twilio's <Gather> callback to the twilio_voice receiver's
  // callback_url: verifies X-Twilio-Signature (`signature`) with the
  // receiver's auth token over callback_url + "?" + `query` followed by the
  // sorted `form` fields, applies Digits (1 acknowledge, 2 resolve) to the
  // incident named in the query and returns the TwiML answer.
  // Twilio's signature carries no time, so each call's keypress is acted
  // on once: a repeat of the same CallSid and Digits within 24 h (a
  // captured request replayed) is kAlreadyExists and changes nothing.
  // kUnauthenticated for a bad signature, kInvalidArgument without a
  // CallSid, kNotFound when no twilio_voice receiver is configured.
  absl::StatusOr<std::string> TwilioCallback(
      std::string_view query, const std::multimap<std::string, std::string>& form,
      std::string_view signature);

  // Counters for /metrics.
  Outbox::Counters outbox_counters() const;

  // A config reload: `escalation` (users, schedules, policies, interlocks)
  // and `notifications` (receivers, channels, public_url) take the place
  // of options' at once. Incidents keep where they stand and page by the
  // new policies, schedules and routes from their next page on
  // (Escalator::Reconfigure); queued pages are rendered for their
  // receiver as configured when they are sent (a removed receiver fails
  // over to the item's next route). The outbox's retry limits
  // (retry_base_seconds, retry_max_seconds) stay as they started.
  void Reconfigure(EscalationConfig escalation, NotificationOptions notifications);

  // Adds an entry to the audit log (Audit), as the operator calls do: what
  // `who` did (`action` on `target`, `detail`) and how it ended.
  void RecordAudit(const Identity& who, std::string_view action, std::string_view target,
                   std::string_view detail, const absl::Status& result);

  // Cluster mode: this server now leads its pair (`leading`) or not. On
  // becoming the leader, the held pages the pair's old leader did not
  // deliver are queued (if the marks cannot be read, all are: receivers
  // drop a repeat by its key), and the automatic actions of open
  // incidents (opened or raised within the marks' day) that the old leader
  // did not send are decided and started here (if the marks cannot be
  // read, none is: a human can request them). Without options.pair: no-op.
  void OnLeadershipChange(bool leading);
  // Cluster mode: the operators' operations shared by the pair's members,
  // as (incident key, operation JSON {"verb", "who", "comment", "ts",
  // "from"}). Each not applied yet, made elsewhere, is applied to the
  // local incident of that key (an ack on one member stops the re-pages of
  // the other); the audit log names the operator "via" the member.
  void ApplySharedOperations(const std::vector<std::pair<std::string, std::string>>& operations);
  // Cluster mode: the fleet's safety entries (FleetSafety::share), as
  // (name, JSON). A silence added or expired on another server is added or
  // expired here; a breaker opened on another server halts this one's
  // cordons and pauses too, and one reset there is reset here (and the
  // "remediation halted" incident resolved). Malformed entries are skipped.
  // Without options.fleet: no-op.
  void ApplyFleetState(const std::vector<std::pair<std::string, std::string>>& entries);

 private:
  struct Action;
  // Delivers what the escalator asked for (mu_ held).
  void Handle(const EscalationOutput& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueuePage(const Page& page) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides the automatic actions `incident`'s responses ask for, except
  // those whose pair key is in `started_elsewhere` (may be null).
  void StartActions(const Incident& incident,
                    const absl::flat_hash_set<std::string>* started_elsewhere = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On coming to lead: starts what the old leader did not (see
  // OnLeadershipChange).
  void TakeOverActions();
  // Marks the queued started actions for the pair and shares the queued
  // approval operations (tick thread).
  void MarkStartedActions();
  // Notes the other member's approval operation `op` on the action of
  // `pair_key`.
  void NotePairApproval(const std::string& pair_key, const nlohmann::json& op)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Queues an approval operation on `action` (one with a pair key) for the
  // pair's other member: "pending_approval", or "approve" by `who`.
  void QueueApprovalOperation(const nlohmann::json& action, std::string_view verb,
                              std::string_view who) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json Decide(nlohmann::json action, bool approved, double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveAction(const nlohmann::json& action) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddTimeline(std::string_view id, nlohmann::json event);
  void OnDelivery(const DeliveryStatus& status);
  absl::Status SaveState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads back the recent actions (and moves next_action_ past their ids).
  absl::Status LoadActions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OpenHaltIncidents();
  // Stores the queued fleet entries (tick thread).
  void ShareFleetEntries();
  // Queues a fleet entry to keep `keep_seconds` (0: until replaced) and
  // wakes the tick thread (no-op without fleet).
  void QueueFleetEntry(std::string name, nlohmann::json value, double keep_seconds = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the breaker and returns the "remediation halted" incident to
  // resolve ("" for none).
  std::string ResetBreaker(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves the "remediation halted" incident `halt`.
  void ResolveHaltIncident(const std::string& halt);
  // The tick thread's loop; the first tick is due at `first_tick`.
  void TickLoop(double first_tick);
  // `shared_in`: the operation came from the other member of the pair
  // (not shared again).
  absl::StatusOr<nlohmann::json> Operate(std::string_view verb,
                                         std::string_view id,
                                         const Identity& who,
                                         std::string_view comment,
                                         bool shared_in = false);

  // What a reload may change (Reconfigure); copied out under settings_mu_
  // (a leaf lock: nothing else is taken while it is held).
  struct Settings {
    EscalationConfig escalation;
    NotificationOptions notifications;
  };
  std::shared_ptr<const Settings> settings() const;

  const EscalationServiceOptions options_;
  mutable absl::Mutex settings_mu_;
  std::shared_ptr<const Settings> settings_ ABSL_GUARDED_BY(settings_mu_);
  // Pages, and action webhooks (slow: a checkpoint may take minutes).
  std::unique_ptr<Outbox> outbox_;
  std::unique_ptr<Outbox> action_outbox_;

  mutable std::mutex mu_;
  Escalator escalator_ ABSL_GUARDED_BY(mu_);
  ActionGate gate_ ABSL_GUARDED_BY(mu_);
  // Incidents being escalated (evidence kept for diagnostic reports).
  std::map<std::string, Incident, std::less<>> incidents_ ABSL_GUARDED_BY(mu_);
  // Action records by id.
  std::map<std::string, nlohmann::json, std::less<>> actions_ ABSL_GUARDED_BY(mu_);
  int64_t next_action_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_silence_ ABSL_GUARDED_BY(mu_) = 1;
  // "remediation halted" incidents to open / the open one's id.
  std::vector<std::string> pending_halts_ ABSL_GUARDED_BY(mu_);
  std::string halt_incident_ ABSL_GUARDED_BY(mu_);
  // Twilio callbacks acted on: "CallSid/Digits" -> when (for replays).
  std::mutex twilio_mu_;
  std::map<std::string, double> twilio_calls_ ABSL_GUARDED_BY(twilio_mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  // Cluster standby: pages held while another member leads.
  struct HeldPage {
    double since = 0;
    OutboxItem item;
    std::string page_name;
    std::string incident_id;
  };
  std::vector<HeldPage> held_pages_ ABSL_GUARDED_BY(mu_);
  // Shared operations applied: incident key -> the latest one's time.
  std::map<std::string, double> applied_operations_ ABSL_GUARDED_BY(mu_);
  // Fleet entries to store (name -> value; the latest wins), sent by the
  // tick thread outside mu_ and kept until stored.
  struct FleetEntry {
    std::string value;
    double keep_seconds = 0;
  };
  std::map<std::string, FleetEntry> fleet_outgoing_ ABSL_GUARDED_BY(mu_);
  // The time of the breaker state last made here or applied from the fleet.
  double breaker_ts_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether the last OnLeadershipChange said this server leads.
  bool was_leading_ ABSL_GUARDED_BY(mu_) = false;
  // Pair keys of actions sent, to mark for the pair (tick thread).
  std::vector<std::string> action_marks_ ABSL_GUARDED_BY(mu_);
  // Approval operations to share with the pair: (pair key, operation).
  std::vector<std::pair<std::string, nlohmann::json>> approval_operations_ ABSL_GUARDED_BY(mu_);
  // What the pair's other member said of its actions waiting for approval,
  // by pair key: a member that comes to lead asks under the same id, and
  // runs what a human approved there without asking again.
  struct PairApproval {
    std::string action_id;
    std::string approved_by;  // empty: still waiting
    double ts = 0;
  };
  std::map<std::string, PairApproval> pair_approvals_ ABSL_GUARDED_BY(mu_);
  // Fleet silences applied: id -> the latest entry's time.
  std::map<std::string, double> applied_silences_ ABSL_GUARDED_BY(mu_);

  std::mutex tick_mu_;
  std::condition_variable tick_cv_;
  bool stopping_ ABSL_GUARDED_BY(tick_mu_) = false;
  bool started_ = false;
  std::thread tick_thread_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_ESCALATION_ESCALATION_SERVICE_H_
