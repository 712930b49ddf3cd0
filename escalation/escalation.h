// Escalation: who is woken, on which channels, when, and what automatic
// action is allowed to run. Pure: no I/O, no clock — every call carries
// the time, so the same inputs always give the same outputs. The server
// (server/escalation/escalation_service.h) feeds it incident updates and operator
// actions, persists its state and delivers what it asks for.
//
// Escalation config (the "escalation" section of the server config; every
// key optional, unknown keys are errors):
//   {
//     "users": [{"name": "alice", "phone": "+15550001", "email": "a@x",
//                "im": "U024BE7LH"}],
//     "schedules": [{"name": "primary",
//        "layers": [{"name": "weekly", "rotation": "weekly",   // or "daily"
//                    "start": "2026-11-30T09:00:00Z", "users": ["alice",
//                    "bob"]}],
//        "overrides": [{"user": "carol", "start": "...", "end": "..."}]}],
//     "policies": {
//       "P0": {"steps": [{"targets": ["schedule:primary"],
//                         "channels": ["phone", "sms", "im"],
//                         "wait_minutes": 5, "repeat": 2}, ...],
//              "ack_timeout_minutes": 60, "notify_resolved": true}, ...},
//     "interlocks": {"dry_run": false, "approval_severities": ["P1"],
//                    "max_cordons": 3, "max_pauses": 5, "window_minutes": 60,
//                    "max_job_node_percent": 20}
//   }
// Defaults (REQUIREMENTS.md): P0 phone + SMS + IM to the primary at once,
// again after 5 min unacknowledged, then primary + secondary after 10 min;
// P1 IM, then phone after 15 min unacknowledged; P2 email + ticket
// (webhook) once, with the diagnostic report; P3 record only.
#ifndef VIGIL_ESCALATION_ESCALATION_H_
#define VIGIL_ESCALATION_ESCALATION_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config_schema.h"
#include "nlohmann/json.hpp"
#include "rules/incident.h"

namespace vigil {

// A person who can be paged.
struct User {
  std::string name;
  std::string phone;  // E.164, for phone and sms
  std::string email;
  std::string im;  // IM handle to mention (Slack member id, mobile, ...)
};

// One rotation: users take turns, each for one period, from `start_ts`.
struct RotationLayer {
  std::string name;
  double start_ts = 0;
  double period_seconds = 7 * 86400.0;  // "weekly"; "daily" is 86400
  std::vector<std::string> users;
};

// Someone else covers [start_ts, end_ts).
struct ScheduleOverride {
  std::string user;
  double start_ts = 0;
  double end_ts = 0;
};

// An on-call schedule: the newest override covering a time wins, else the
// last layer that has started.
struct Schedule {
  std::string name;
  std::vector<RotationLayer> layers;
  std::vector<ScheduleOverride> overrides;
};

// Who is on call in `schedule` at `ts`; kNotFound when nobody is (no layer
// has started and no override covers ts).
absl::StatusOr<std::string> OnCallAt(const Schedule& schedule, double ts);

// One level of an escalation policy: page `targets` on `channels`, wait,
// page again until paged `repeat` times, then go to the next step.
struct EscalationStep {
  // "schedule:NAME" (whoever is on call when the page goes out) or
  // "user:NAME".
  std::vector<std::string> targets;
  // "phone", "sms", "email" (one page per person) and "im", "pagerduty",
  // "webhook", "ticket" (one page per step naming everyone).
  std::vector<std::string> channels;
  double wait_seconds = 300;
  int repeat = 1;
};

// How incidents of one severity escalate.
struct EscalationPolicy {
  std::vector<EscalationStep> steps;  // empty: record only
  // An acknowledgement lapses after this long if the incident still fires;
  // escalation then starts again from the first step. 0: never lapses.
  double ack_timeout_seconds = 3600;
  // Tell whoever was paged when the incident resolves.
  bool notify_resolved = true;
};

// Safety interlocks for automatic actions.
struct InterlockConfig {
  // Record what would run; run nothing.
  bool dry_run = false;
  // Actions of incidents of these severities wait for a human approval.
  std::vector<Severity> approval_severities = {Severity::kP1};
  // Circuit breaker: at most this many cordons / pauses per window...
  int max_cordons = 3;
  int max_pauses = 5;
  double window_seconds = 3600;
  // ...and never more than this share of one job's nodes cordoned (at
  // least one node of any job may always be cordoned).
  double max_job_node_percent = 20;
};

// The whole escalation config.
struct EscalationConfig {
  std::vector<User> users;
  std::vector<Schedule> schedules;
  // Indexed by Severity (kP0 = 0).
  EscalationPolicy policies[4];
  InterlockConfig interlocks;
};

// The defaults described at the top of the file. Schedules "primary" and
// "secondary" are referenced but not defined: with no schedules configured,
// pages name no user and go to the group channels only.
EscalationConfig DefaultEscalationConfig();

// Applies the JSON escalation section `section` on top of
// DefaultEscalationConfig(). kInvalidArgument listing every error, one per
// line, each starting with its JSON path ("policies.P0.steps[1].channels:
// unknown channel \"fax\""), including targets naming unknown users or
// schedules.
absl::StatusOr<EscalationConfig> ParseEscalationConfig(
    const nlohmann::json& section);
// As above; with `schema` (not owned) also documents every key it asks
// for, prefixed with `path` ("escalation"), and walks into absent sections
// (describe mode, common/config_schema.h).
absl::StatusOr<EscalationConfig> ParseEscalationConfig(
    const nlohmann::json& section, ConfigSchema* schema, std::string_view path);

// Incident lifecycle as operators see it (the engine only knows firing /
// resolved).
enum class Lifecycle : uint8_t { kFiring, kAcknowledged, kSilenced, kResolved };
// "firing", "acknowledged", "silenced", "resolved".
std::string_view LifecycleName(Lifecycle lifecycle);

// A label matcher of a silence. `name` is one of job, node, gpu, kind,
// severity; `value` is exact, or a prefix when it ends in '*'.
struct Matcher {
  std::string name;
  std::string value;
};

// Suppresses pages of matching incidents during [start_ts, end_ts). A
// silence with a future start is a maintenance window.
struct Silence {
  std::string id;
  std::vector<Matcher> matchers;  // all must match; at least one
  double start_ts = 0;
  double end_ts = 0;
  std::string author;
  std::string comment;
};

// The silence of a JSON body {"matchers": [{"name", "value"}], "starts_at"
// (optional, unix seconds, default now), "ends_at" or "duration_minutes",
// "comment"}; author and id are the caller's. kInvalidArgument naming the
// problem (unknown matcher name, end before start, no matcher, ...).
absl::StatusOr<Silence> ParseSilence(const nlohmann::json& body, double now);
// {"id", "matchers", "starts_at", "ends_at", "author", "comment"}.
nlohmann::json SilenceToJson(const Silence& silence);

// True when every matcher of `silence` matches `incident` (time is not
// looked at).
bool SilenceMatches(const Silence& silence, const Incident& incident);

// What kind of message a page is.
enum class PageEvent : uint8_t {
  kTrigger,       // first page of the incident (or after a severity raise)
  kRepage,        // same step again, still unacknowledged
  kEscalate,      // the next step
  kAcknowledged,  // tell who was paged that someone took it
  kResolved,      // tell who was paged that it is over
};
// "trigger", "repage", "escalate", "acknowledged", "resolved".
std::string_view PageEventName(PageEvent event);

// One message to deliver on one channel.
struct Page {
  // Unique and stable: "<incident>/<n>/<channel>[/<user>]" where n counts
  // the incident's pages; the delivery layer's idempotency key.
  std::string key;
  std::string incident_id;
  PageEvent event = PageEvent::kTrigger;
  std::string channel;
  // Who it is for: one user for phone/sms/email; everyone paged by the
  // step for group channels (may be empty when nobody is on call).
  std::vector<std::string> users;
  int step = 0;     // policy step index
  int attempt = 1;  // 1 for the first page of a step, 2 for the re-page...
  double ts = 0;
};

// Something that happened to an incident's escalation, for its timeline.
struct EscalationEvent {
  std::string incident_id;
  // "paged", "acknowledged", "unacknowledged", "resolved_by_operator",
  // "silenced", "unsilenced", "ack_expired", "escalation_exhausted".
  std::string type;
  double ts = 0;
  std::string who;     // the operator, or empty
  std::string detail;  // e.g. the silence id, the step
};

// What one call asks the server to do.
struct EscalationOutput {
  std::vector<Page> pages;
  std::vector<EscalationEvent> events;
};

// The escalation state machine of every incident.
//
// Not thread-safe; the server serialises calls. Every method takes `now`
// (unix seconds) and returns the pages due and the events that happened,
// in time order. Each mutating call first brings every incident up to
// `now` (as Tick does); time never goes backwards: a `now` earlier than
// the latest seen is taken as the latest. A page round sends one page per
// person on phone/sms/email and one naming everyone on im/pagerduty/
// webhook/ticket; targets resolve when the round is due. An incident that
// is resolved, acknowledged or silenced (in that order of precedence)
// reports that lifecycle. Notices (kAcknowledged, kResolved) go on the
// group channels paged so far, naming everyone paged, and by email to
// everyone paged on phone/sms/email; nothing when nothing was sent.
class Escalator {
 public:
  // Resolved incidents are forgotten this long after they resolve (their
  // state, and with it their page counter: an engine reopen after this is
  // tracked as a new incident). Keep the rules' reopen window shorter.
  static constexpr double kForgetResolvedAfterSeconds = 7 * 86400.0;

  explicit Escalator(EscalationConfig config);

  // Takes `config` in place of the one it was built with (a config
  // reload), at `now`. Incidents keep where they stand: pages already sent,
  // acknowledgements, silences. A run past the last step of a policy that
  // now has fewer steps pages that last step's rounds afresh; a firing, unacknowledged incident
  // whose policy had no steps (recorded only) starts the new policy from
  // step 0, paging at the next Tick(); one whose policy now has none stops
  // escalating. Schedules and users named by later pages are the new ones.
  void Reconfigure(EscalationConfig config, double now);

  // An engine update: kOpened/kReopened start the policy of the incident's
  // severity from step 0 (unless silenced); kSeverityRaised to a more
  // severe policy starts that policy again from step 0; kResolved stops
  // escalation and, if notify_resolved, sends kResolved pages on the
  // group channels and email of who was paged (never phone).
  EscalationOutput OnIncidentUpdate(const IncidentUpdate& update, double now);

  // An operator takes the incident: re-paging stops; who was paged gets
  // kAcknowledged on group channels and email. kNotFound for an unknown id,
  // kFailedPrecondition when resolved or already acknowledged (and the
  // acknowledgement has not lapsed).
  absl::StatusOr<EscalationOutput> Acknowledge(std::string_view incident_id,
                                               std::string_view who,
                                               double now);
  // Undoes an acknowledgement; escalation starts again from step 0.
  // kNotFound for an unknown id, kFailedPrecondition when not acknowledged.
  absl::StatusOr<EscalationOutput> Unacknowledge(std::string_view incident_id,
                                                 std::string_view who,
                                                 double now);
  // An operator closes the incident (the engine may reopen it later).
  // kNotFound for an unknown id, kFailedPrecondition when resolved.
  absl::StatusOr<EscalationOutput> Resolve(std::string_view incident_id,
                                           std::string_view who, double now);

  // Adds a silence (id unique, kAlreadyExists otherwise); matching firing
  // incidents become silenced at start_ts. kInvalidArgument for a silence
  // without id or matcher, ending before it starts, or already ended.
  absl::StatusOr<EscalationOutput> AddSilence(const Silence& silence,
                                              double now);
  // Ends a silence now (kNotFound for an unknown id).
  absl::StatusOr<EscalationOutput> ExpireSilence(std::string_view id,
                                                 std::string_view who,
                                                 double now);
  // Silences not yet ended at `now`, by start.
  std::vector<Silence> ActiveSilences(double now) const;

  // Pages due by `now`: re-pages and escalations of unacknowledged
  // incidents, lapsed acknowledgements, silences starting or ending (an
  // incident still firing when its silence ends is paged from step 0).
  EscalationOutput Tick(double now);

  // The incident's lifecycle; kNotFound for an unknown id.
  absl::StatusOr<Lifecycle> LifecycleOf(std::string_view incident_id) const;
  // Lifecycle plus {"acknowledged_by", "acknowledged_at", "silenced_by"
  // (silence id), "step", "attempt", "next_page_at"} where set.
  absl::StatusOr<nlohmann::json> StatusOf(std::string_view incident_id) const;

  // Whole state (incidents, silences, counters) as JSON, and back: the
  // server stores it and restores it after a restart. Import replaces the
  // state; kInvalidArgument for a document Export did not write.
  nlohmann::json Export() const;
  absl::Status Import(const nlohmann::json& state);

 private:
  // The escalation of one incident.
  struct Tracked {
    // The incident's id and the labels silences match (severity, kind,
    // job, node, gpu); nothing else is kept.
    Incident labels;
    // The severity whose policy runs (the most severe seen since opening).
    Severity policy = Severity::kP3;
    bool resolved = false;
    double resolved_at = 0;
    bool acknowledged = false;
    std::string acknowledged_by;
    double acknowledged_at = 0;
    // The silence in force, or empty.
    std::string silenced_by;
    // A run of the policy is in progress; `exhausted` once it ended
    // without an acknowledgement.
    bool escalating = false;
    bool exhausted = false;
    int step = 0;
    int attempt = 0;     // pages of `step` sent in this run
    double next_at = 0;  // when the run next pages or moves on
    int rounds = 0;      // page rounds so far: the n of the page keys
    // Everyone named by a page, the group channels paged and the users
    // paged on phone/sms/email: who hears of an ack or a resolution.
    std::vector<std::string> paged_users;
    std::vector<std::string> group_channels;
    std::vector<std::string> personally_paged;
  };

  // The tracked incident `id`, or kNotFound.
  absl::StatusOr<Tracked*> Find(std::string_view id);
  absl::StatusOr<const Tracked*> Find(std::string_view id) const;
  // The latest time seen: an earlier `now` is taken as this one.
  double Clamp(double now) const;
  // Brings every incident from now_ to `now` (silence boundaries, ack
  // lapses, pages due, in time order), drops ended silences and forgets
  // old resolved incidents.
  void Advance(double now, EscalationOutput* out);
  // Brings `t` from `from` to `to`.
  void AdvanceIncident(Tracked& t, double from, double to,
                       EscalationOutput* out);
  // One page round or step change of a due run, at `ts`.
  void StepRun(Tracked& t, double ts, EscalationOutput* out);
  // Sends the page round of the current step and attempt at `ts`.
  void PageRound(Tracked& t, double ts, EscalationOutput* out);
  // kAcknowledged / kResolved notices to whoever was paged.
  void Notify(Tracked& t, PageEvent event, double ts, EscalationOutput* out);
  // Resolves `t` at `now`: escalation stops, kResolved notices go out if
  // the policy says so.
  void Close(Tracked& t, double now, EscalationOutput* out);
  // Starts the policy again from step 0 at `ts`.
  void Restart(Tracked& t, double ts) const;
  // Starts escalating a new or reopened incident at `now`.
  void Start(Tracked& t, double now, EscalationOutput* out);
  // Applies the silence in force at `ts` (events, restart on its end).
  void UpdateSilence(Tracked& t, double ts, std::string_view who,
                     EscalationOutput* out);
  // The silence in force for `t` at `ts` (the matching one ending last),
  // or nullptr.
  const Silence* SilenceAt(const Tracked& t, double ts) const;
  // Whether `t` may page now.
  static bool MayPage(const Tracked& t);
  // Whether the acknowledgement of `t` still holds at `now`.
  bool AckHolds(const Tracked& t, double now) const;
  const EscalationPolicy& PolicyOf(const Tracked& t) const;
  nlohmann::json TrackedToJson(const Tracked& t) const;

  EscalationConfig config_;
  std::map<std::string, Tracked> incidents_;
  std::map<std::string, Silence> silences_;  // not yet ended, by id
  double now_ = 0;
};

// An automatic action asked for by an incident's responses.
struct ActionRequest {
  std::string incident_id;
  Severity severity = Severity::kP3;
  // "checkpoint_then_pause_job", "pause_job", "cordon_node",
  // "uncordon_node", "diagnostic_report".
  std::string action;
  std::string job;
  // For job actions: the node the job was verified on, when it was.
  std::string node;
  // A job action whose job no node's agent verified with the scheduler
  // (proto Frame.verified_job_id): it never runs without an approval.
  bool unverified_job = false;
  // The incident's node is only named by remote-written series' labels (no
  // agent streams it): no action runs without an approval.
  bool unverified_node = false;
};

// What the gate allows.
enum class ActionVerdict : uint8_t {
  kRun,            // send it to the actuator now
  kDryRun,         // record only (dry-run mode)
  kNeedsApproval,  // wait for a human (Approve)
  kHalted,         // the circuit breaker is open: never run automatically
};
// "run", "dry_run", "needs_approval", "halted".
std::string_view ActionVerdictName(ActionVerdict verdict);

struct ActionDecision {
  ActionVerdict verdict = ActionVerdict::kRun;
  std::string reason;  // for the timeline and audit log
  // True on the call that tripped the breaker: page "remediation halted".
  bool tripped = false;
};

// The circuit breaker's count shared with other servers (cluster mode,
// docs/SCALING.md): a cordon or pause that one gate would count must also
// take one of the fleet's slots, so that all servers together stay within
// the limits.
class SharedBreaker {
 public:
  virtual ~SharedBreaker() = default;
  // Takes one of `limit` slots of cordons (`cordon`) or pauses for
  // `window_seconds`: true when taken, false when the fleet already holds
  // `limit`. An error when it cannot be known (the shared store is
  // unreachable).
  virtual absl::StatusOr<bool> Take(bool cordon, int limit, double window_seconds) = 0;
};

// Interlocks for automatic actions: dry-run, approval by severity and a
// circuit breaker over cordons and pauses. Pure; not thread-safe.
class ActionGate {
 public:
  explicit ActionGate(InterlockConfig config);

  // Takes `config` in place of the one it was built with (a config
  // reload); what was counted in the window, cordoned nodes and a tripped
  // breaker stay.
  void Reconfigure(InterlockConfig config) { config_ = std::move(config); }

  // Decides `request` at `now`. `job_nodes` is how many nodes the job has
  // (for the share of a job's nodes); `approved` is true when a human
  // approved it (skips the approval rule, not the breaker). kRun counts
  // towards the breaker (a cordon of a node already cordoned for the job
  // runs and is not counted again). Once tripped, every cordon/pause is
  // kHalted until Reset(); diagnostic_report and uncordon_node are never
  // halted. An unknown action, or a cordon naming no node, is kHalted
  // without tripping.
  //
  // With `shared` (cluster mode), a cordon or pause this gate would count
  // runs only if it also takes a fleet-wide slot: when the fleet is full
  // the breaker trips here too; when the fleet cannot be asked, an action
  // not yet approved waits for a human approval, and an approved one runs
  // (a human decided), both saying so.
  ActionDecision Decide(const ActionRequest& request, int job_nodes,
                        bool approved, double now,
                        SharedBreaker* shared = nullptr);
  // Opens the breaker because another server's did (cluster mode): every
  // later cordon/pause is kHalted with `reason` until Reset().
  void Trip(std::string reason);
  // Closes the breaker (an admin decided the storm is over) and forgets the
  // cordons and pauses counted up to `now`; nodes stay cordoned.
  void Reset(double now);
  // Whether the breaker is open.
  bool tripped() const;

  // State as JSON and back (counted actions in the window, cordoned nodes
  // per job, tripped), for restarts.
  nlohmann::json Export() const;
  absl::Status Import(const nlohmann::json& state);

 private:
  // Forgets counted actions older than the window ending at `now`.
  void Prune(double now);
  // Decides a cordon or pause that no mode or approval rule stopped.
  ActionDecision DecideBreaker(const ActionRequest& request, int job_nodes,
                               bool approved, double now, SharedBreaker* shared);

  InterlockConfig config_;
  // Times of counted (kRun) cordons and pauses, oldest first.
  std::deque<double> cordon_times_;
  std::deque<double> pause_times_;
  // Nodes cordoned per job, until uncordon_node.
  std::map<std::string, std::set<std::string>> cordoned_;
  bool tripped_ = false;
  std::string trip_reason_;
};

}  // namespace vigil

#endif  // VIGIL_ESCALATION_ESCALATION_H_
