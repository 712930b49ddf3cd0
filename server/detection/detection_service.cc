#include "server/detection/detection_service.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/catch_all.h"
#include "common/stable_hash.h"
#include "detector/metric_catalog.h"
#include "rules/incident_json.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr char kIndexStream[] = "incidents";
constexpr char kSnapshotKey[] = "detection";
// Bytes of a snapshot written per hold of a shard's lock.
constexpr size_t kSnapshotPartBytes = 1 << 20;
// How many shards wrote the snapshots (DetectionOptions::shards).
constexpr char kShardCountKey[] = "detection/shards";
constexpr char kIdPrefix[] = "inc-";
constexpr double kInf = std::numeric_limits<double>::infinity();
// Jobs remembered as asked for their profiles (then forgotten wholesale).
constexpr size_t kMaxProfilesAsked = 100000;
// Most events read back for one incident's timeline (oldest first).
constexpr size_t kMaxTimeline = 1000;

std::string EventStream(std::string_view id) {
  return absl::StrCat("incident/", std::string(id));
}

// The number of a server id "inc-N" (or, in a cluster, "inc-SHARD-N"),
// or -1.
int64_t IdNumber(const std::string& id) {
  int64_t n;
  const size_t dash = id.rfind('-');
  if (!absl::StartsWith(id, kIdPrefix) || dash == std::string::npos ||
      !absl::SimpleAtoi(id.substr(dash + 1), &n) || n < 0)
    return -1;
  return n;
}

// Whether `j` has the fields the index filters and sorts on.
bool IsSnapshot(const Json& j) {
  return j.is_object() && j.contains("id") && j["id"].is_string() &&
         j.contains("state") && j["state"].is_string() &&
         j.contains("severity") && j["severity"].is_string() &&
         j.contains("job") && j["job"].is_string() && j.contains("ts") &&
         j["ts"].is_number() && j.contains("node") &&
         (j["node"].is_string() || j["node"].is_null());
}

// `payload` parsed, or a discarded value.
Json Parse(const std::string& payload) {
  return Json::parse(payload, nullptr, false);
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool Matches(const Json& s, const IncidentFilter& f) {
  if (f.state.has_value() &&
      s["state"].get<std::string>() != IncidentStateName(*f.state))
    return false;
  if (!f.severities.empty()) {
    std::optional<Severity> sev = ParseSeverity(s["severity"].get<std::string>());
    if (!sev || std::find(f.severities.begin(), f.severities.end(), *sev) ==
                    f.severities.end())
      return false;
  }
  if (!f.job.empty() && s["job"].get<std::string>() != f.job) return false;
  if (!f.node.empty() &&
      (!s["node"].is_string() || s["node"].get<std::string>() != f.node))
    return false;
  if (!f.text.empty()) {
    const std::string needle = absl::AsciiStrToLower(f.text);
    for (const char* field : {"id", "kind", "job", "node", "summary", "hint"}) {
      auto it = s.find(field);
      if (it != s.end() && it->is_string() &&
          absl::StrContains(absl::AsciiStrToLower(it->get<std::string>()), needle))
        return true;
    }
    return false;
  }
  return true;
}


}  // namespace

DetectionService::DetectionService(DetectionOptions options)
    : options_(std::move(options)),
      families_(options_.detector.lifecycle.family_pattern) {
  const int n = std::max(1, options_.shards);
  for (int k = 0; k < n; ++k) {
    shards_.push_back(std::make_unique<Shard>(options_));
    // Repeat offenders span jobs: each shard learns the others' findings
    // (and, in cluster mode, the other servers').
    if (n > 1 || options_.share_implication)
      shards_.back()->pipeline.set_record_implications(true);
    // Every shard counts fleet-wide faults; the first raises them.
    shards_.back()->pipeline.set_raises_fleet_incidents(
        k == 0 && options_.raises_fleet_incidents);
  }
}

void DetectionService::SetRaisesFleetIncidents(bool raises) {
  Shard& first = *shards_[0];
  std::lock_guard<std::mutex> l(first.mu);
  first.pipeline.set_raises_fleet_incidents(raises);
}

void DetectionService::SetRules(const RuleSet& rules) {
  for (const std::unique_ptr<Shard>& shard : shards_) {
    std::lock_guard<std::mutex> l(shard->mu);
    shard->pipeline.SetRules(rules);
  }
}

void DetectionService::ShareImplications(int from) {
  if (shards_.size() == 1 && !options_.share_implication) return;
  std::vector<IncidentEngine::NodeImplication> found;
  {
    Shard& shard = *shards_[from];
    std::lock_guard<std::mutex> l(shard.mu);
    shard.pipeline.TakeImplications(&found);
  }
  if (found.empty()) return;
  {
    // Others know the incident by the id this server published it under.
    std::lock_guard<std::mutex> p(publish_mu_);
    for (auto& i : found) {
      auto it = server_ids_.find(absl::StrCat(from, "/", i.id));
      if (it != server_ids_.end()) i.id = it->second;
    }
  }
  if (options_.share_implication) {
    for (const auto& i : found) options_.share_implication(i);
  }
  // One shard lock at a time. Two shards implicating one node at the same
  // moment may each count without the other's, and miss the offender
  // until its next incident.
  for (int k = 0; k < shards(); ++k) {
    if (k == from) continue;
    Shard& other = *shards_[k];
    std::lock_guard<std::mutex> l(other.mu);
    for (const auto& i : found) other.pipeline.AddImplication(i);
  }
}

void DetectionService::AddImplications(
    const std::vector<IncidentEngine::NodeImplication>& implications) {
  if (implications.empty()) return;
  for (auto& shard : shards_) {
    std::lock_guard<std::mutex> l(shard->mu);
    for (const auto& i : implications) shard->pipeline.AddImplication(i);
  }
}

Json ImplicationToJson(const IncidentEngine::NodeImplication& i) {
  Json out = {{"node", i.node}, {"ts", i.ts}, {"job", i.job}, {"id", i.id}, {"kind", i.kind}};
  if (!i.cause.empty()) out["cause"] = i.cause;
  if (i.gpu) out["gpu"] = *i.gpu;
  return out;
}

absl::StatusOr<IncidentEngine::NodeImplication> ImplicationFromJson(const Json& in) {
  if (!in.is_object()) return absl::InvalidArgumentError("implication: not an object");
  IncidentEngine::NodeImplication i;
  for (auto [key, out] : {std::pair<const char*, std::string*>{"node", &i.node},
                          {"job", &i.job},
                          {"id", &i.id},
                          {"kind", &i.kind}}) {
    auto it = in.find(key);
    if (it == in.end() || !it->is_string())
      return absl::InvalidArgumentError(absl::StrCat("implication: \"", key, "\" must be a string"));
    *out = it->get<std::string>();
  }
  auto ts = in.find("ts");
  if (ts == in.end() || !ts->is_number() || !std::isfinite(ts->get<double>()))
    return absl::InvalidArgumentError("implication: \"ts\" must be a number");
  i.ts = ts->get<double>();
  if (auto cause = in.find("cause"); cause != in.end()) {
    if (!cause->is_string())
      return absl::InvalidArgumentError("implication: \"cause\" must be a string");
    i.cause = cause->get<std::string>();
  }
  if (i.node.empty() == i.cause.empty())
    return absl::InvalidArgumentError(
        "implication: exactly one of \"node\" and \"cause\" must be set");
  if (auto gpu = in.find("gpu"); gpu != in.end()) {
    if (!gpu->is_number_integer())
      return absl::InvalidArgumentError("implication: \"gpu\" must be an integer");
    i.gpu = gpu->get<int>();
  }
  return i;
}

int DetectionService::ShardOf(std::string_view job) const {
  if (shards_.size() == 1) return 0;
  const std::string family = families_.FamilyOf(job);
  return static_cast<int>(StableHash(family.empty() ? job : family) %
                          shards_.size());
}

std::string DetectionService::SnapshotKey(int k) const {
  if (shards_.size() == 1) return kSnapshotKey;
  return absl::StrCat(kSnapshotKey, "/", k, "-of-", shards_.size());
}

DetectionService::~DetectionService() { Stop(); }

absl::Status DetectionService::Start() {
  if (started_) return absl::FailedPreconditionError("detection already started");
  absl::Status loaded = LoadStored();
  if (!loaded.ok()) return loaded;
  if (options_.live) {
    int restored = 0, missing = 0;
    for (int k = 0; k < shards(); ++k) {
      absl::StatusOr<std::string> snapshot = options_.store->GetState(SnapshotKey(k));
      if (!snapshot.ok()) {
        ++missing;
        continue;
      }
      Shard& shard = *shards_[k];
      std::lock_guard<std::mutex> l(shard.mu);
      absl::Status s = shard.pipeline.RestoreState(*snapshot);
      if (s.ok()) {
        ++restored;
      } else {
        // A snapshot of another version or a damaged one: learn afresh.
        std::fprintf(stderr, "vigil-server: detection snapshot %s not used: %s\n",
                     SnapshotKey(k).c_str(), std::string(s.message()).c_str());
      }
    }
    restored_ = restored > 0;
    absl::StatusOr<std::string> count = options_.store->GetState(kShardCountKey);
    if (restored == 0 && missing == shards() && count.ok() &&
        *count != absl::StrCat(shards())) {
      // Its jobs were split differently: each would meet another's state.
      std::fprintf(stderr,
                   "vigil-server: the detection snapshot was written by %s "
                   "detection shards (detection.workers) and this process "
                   "has %d: what detection learned is learned afresh\n",
                   count->c_str(), shards());
    }
  }
  started_ = true;
  last_tick_.store(options_.clock->Now());
  // The first tick is due one period after Start(), not after the thread
  // happens to run: a clock moved in between must still be noticed.
  const double first_tick = options_.clock->Now() + options_.tick_seconds;
  if (options_.live)
    tick_thread_ = std::thread([this, first_tick] { TickLoop(first_tick); });
  if (options_.live && options_.job_state && options_.scheduler_poll_seconds > 0)
    scheduler_thread_ = std::thread([this] { SchedulerLoop(); });
  return absl::OkStatus();
}

void DetectionService::Stop() {
  if (!tick_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  tick_thread_.join();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (options_.snapshot_seconds > 0) (void)Snapshot();
}

absl::Status DetectionService::Snapshot() {
  uint64_t bytes = 0;
  uint64_t learning = 0;
  const auto failed = [this](absl::Status s) {
    snapshot_errors_.fetch_add(1);
    std::fprintf(stderr, "vigil-server: detection snapshot not written: %s\n",
                 std::string(s.message()).c_str());
    return s;
  };
  for (int k = 0; k < shards(); ++k) {
    // Part by part, the shard's lock held for one part at a time: the
    // snapshot (hundreds of MiB while a large cluster's series learn) is
    // never in memory whole, and detection goes on between parts.
    absl::StatusOr<std::unique_ptr<StateWriter>> writer =
        options_.store->NewStateWriter(SnapshotKey(k));
    if (!writer.ok()) return failed(writer.status());
    Shard& shard = *shards_[k];
    PipelineSnapshotCursor cursor;
    std::string part;
    while (!cursor.done()) {
      part.clear();
      {
        std::lock_guard<std::mutex> l(shard.mu);
        shard.pipeline.SaveStatePart(&cursor, kSnapshotPartBytes, &part);
      }
      if (absl::Status s = (*writer)->Append(part); !s.ok()) return failed(s);
      bytes += part.size();
    }
    learning += static_cast<uint64_t>(cursor.detector.still_to_learn);
    if (absl::Status s = (*writer)->Commit(); !s.ok()) return failed(s);
  }
  if (absl::Status s = options_.store->PutState(kShardCountKey, absl::StrCat(shards()));
      !s.ok()) {
    return failed(s);
  }
  snapshots_.fetch_add(1);
  snapshot_bytes_.store(bytes);
  snapshot_learning_series_.store(learning);
  return absl::OkStatus();
}

absl::Status DetectionService::LoadStored() {
  SeriesStore& store = *options_.store;
  int64_t highest = 0;
  std::map<std::string, Json> loaded;
  for (const Event& e : store.ListEvents(kIndexStream, -kInf, kInf,
                                         std::numeric_limits<size_t>::max())) {
    Json entry = Parse(e.payload);
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_string() ||
        IdNumber(entry["id"].get<std::string>()) < 0) {
      ++unreadable_;
      continue;
    }
    const std::string id = entry["id"].get<std::string>();
    highest = std::max(highest, IdNumber(id));
    // The latest event is the one with the highest seq (events are listed
    // by ts, which need not follow the order they were stored in).
    const Event* latest = nullptr;
    std::vector<Event> events = store.ListEvents(
        EventStream(id), -kInf, kInf, std::numeric_limits<size_t>::max());
    for (const Event& ev : events) {
      if (latest == nullptr || ev.seq > latest->seq) latest = &ev;
    }
    // An id without events was allocated just before a crash: skip it
    // (its number stays used).
    if (latest == nullptr) continue;
    Json payload = Parse(latest->payload);
    if (!payload.is_object() || !payload.contains("incident") ||
        !IsSnapshot(payload["incident"]) || payload["incident"]["id"] != id) {
      ++unreadable_;
      continue;
    }
    loaded[id] = std::move(payload["incident"]);
  }
  std::vector<Inherited> inherited;
  for (const auto& entry : loaded) {
    const std::string& id = entry.first;
    const Json& incident = entry.second;
    if (incident.value("state", "") != IncidentStateName(IncidentState::kFiring)) continue;
    auto text = [&incident](const char* key) {
      const Json v = incident.contains(key) ? incident[key] : Json(nullptr);
      return v.is_string() ? v.get<std::string>() : v.is_number() ? v.dump() : "";
    };
    std::vector<std::string> nodes;
    if (auto list = incident.find("nodes"); list != incident.end() && list->is_array())
      for (const Json& n : *list)
        if (n.is_string()) nodes.push_back(n.get<std::string>());
    const Json ts = incident.contains("ts") ? incident["ts"] : Json(nullptr);
    inherited.push_back(Inherited{.id = id,
                                  .job = text("job"),
                                  .node = text("node"),
                                  .gpu = text("gpu"),
                                  .hint_category = text("hint_category"),
                                  .nodes = std::move(nodes),
                                  .ts = ts.is_number() ? ts.get<double>() : 0.0,
                                  .severity = text("severity"),
                                  .kind = text("kind"),
                                  .summary = text("summary"),
                                  .hint = text("hint")});
  }
  {
    std::lock_guard<std::mutex> l(publish_mu_);
    next_id_ = highest + 1;
    inherited_ = std::move(inherited);
    has_inherited_.store(!inherited_.empty());
  }
  std::lock_guard<std::mutex> l(index_mu_);
  index_ = std::move(loaded);
  return absl::OkStatus();
}

void DetectionService::OnFrame(const FrameView& frame) {
  OnFrame(ShardOf(frame.job), frame);
}

void DetectionService::MaybeFetchProfiles(Shard& shard, std::string_view job) {
  {
    std::lock_guard<std::mutex> l(shard.mu);
    if (shard.profiles_asked.size() >= kMaxProfilesAsked) shard.profiles_asked.clear();
    if (!shard.profiles_asked.insert(std::string(job)).second) return;
  }
  std::optional<std::string> data = options_.fetch_profiles(std::string(job));
  if (!data.has_value()) return;
  std::lock_guard<std::mutex> l(shard.mu);
  if (absl::Status s = shard.pipeline.ImportProfiles(*data); !s.ok()) {
    std::fprintf(stderr, "vigil-server: profiles of job %s from its previous shard: %s\n",
                 std::string(job).c_str(), std::string(s.message()).c_str());
    return;
  }
  profiles_imported_.fetch_add(1, std::memory_order_relaxed);
}

std::string DetectionService::ExportProfiles(std::string_view job) const {
  Shard& shard = *shards_[ShardOf(job)];
  std::lock_guard<std::mutex> l(shard.mu);
  return shard.pipeline.ExportProfiles(job);
}

void DetectionService::OnFrame(int k, const FrameView& frame) {
  if (!options_.live) return;
  Shard& shard = *shards_[k];
  if (options_.fetch_profiles != nullptr && !frame.job.empty()) {
    MaybeFetchProfiles(shard, frame.job);
  }
  std::unique_lock<std::mutex> l(shard.mu);
  DetectionPipeline& pipeline = shard.pipeline;
  for (uint32_t id : frame.ids) {
    if (pipeline.HasSeries(id)) continue;
    absl::StatusOr<SeriesKey> key = options_.store->Key(id);
    // A series the pipeline refuses stays unregistered; the detector counts
    // its samples (DetectorStats::unregistered_samples).
    if (!key.ok() || !pipeline.RegisterSeries(id, *key).ok()) continue;
    if (LookupMetric(key->metric).counter) PrimeFromStore(shard, id, frame.ts);
  }
  shard.seen_frame = true;
  const double now = options_.clock->Now();
  if (has_inherited_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> p(publish_mu_);
    NoteInheritedSeen(frame, now);
  }
  pipeline.ProcessFrame(frame, &shard.updates, now);
  frames_.fetch_add(1, std::memory_order_relaxed);
  if (shard.updates.empty()) return;
  Publish(k, shard.updates);
  l.unlock();
  ShareImplications(k);
}

void DetectionService::NodeMovedAway(int k, const FrameView& frame, bool handed_over) {
  if (!options_.live) return;
  Shard& shard = *shards_[k];
  {
    std::lock_guard<std::mutex> l(shard.mu);
    shard.pipeline.NodeMovedAway(frame, &shard.updates, handed_over);
    if (shard.updates.empty()) return;
    Publish(k, shard.updates);
  }
  ShareImplications(k);
}

void DetectionService::PrimeFromStore(Shard& shard, uint32_t id, double ts) {
  // Samples before this frame: the current one is already stored.
  absl::StatusOr<std::vector<Sample>> before =
      options_.store->Query(id, ts - options_.prime_counters_seconds, ts);
  if (!before.ok() || before->empty()) return;
  shard.pipeline.PrimeCounter(id, before->back().ts, before->back().value);
  counters_primed_.fetch_add(1, std::memory_order_relaxed);
}

void DetectionService::AdvanceTime(double now) {
  if (!options_.live) return;
  bool awaiting = false, seen = false;
  for (int k = 0; k < shards(); ++k) {
    Shard& shard = *shards_[k];
    bool published = false;
    {
      std::lock_guard<std::mutex> l(shard.mu);
      if (shard.seen_frame) {
        seen = true;
        shard.pipeline.AdvanceTime(now, &shard.updates);
      } else if (k == 0) {
        // Liveness is judged after a first frame, but the first shard
        // raises the fleet-wide faults other shards report all the same.
        shard.pipeline.AdvanceIncidents(now, &shard.updates);
      } else {
        continue;
      }
      published = !shard.updates.empty();
      if (published) Publish(k, shard.updates);
      awaiting = awaiting || (options_.job_state &&
                              !shard.pipeline.JobsAwaitingScheduler().empty());
    }
    if (published) ShareImplications(k);
  }
  if (!seen) return;
  if (has_inherited_.load()) {
    std::lock_guard<std::mutex> p(publish_mu_);
    ResolveQuietInherited(now);
  }
  if (awaiting) {
    {
      std::lock_guard<std::mutex> l(tick_mu_);
      ask_now_ = true;
    }
    tick_cv_.notify_all();
  }
}

void DetectionService::SchedulerLoop() {
  Clock& clock = *options_.clock;
  std::unique_lock<std::mutex> lock(tick_mu_);
  double next = clock.Now() + options_.scheduler_poll_seconds;
  while (!stopping_) {
    if (!ask_now_) clock.WaitUntil(lock, tick_cv_, next);
    if (stopping_) break;
    if (!ask_now_ && clock.Now() < next) continue;
    ask_now_ = false;
    next = clock.Now() + options_.scheduler_poll_seconds;
    lock.unlock();
    if (std::string error = CatchAll([&] { AskScheduler(); }); !error.empty())
      std::fprintf(stderr, "vigil-server: scheduler query threw %s\n",
                   error.c_str());
    lock.lock();
  }
}

void DetectionService::AskScheduler() {
  std::vector<std::string> jobs;
  for (const std::unique_ptr<Shard>& shard : shards_) {
    std::lock_guard<std::mutex> l(shard->mu);
    for (std::string& j : shard->pipeline.RunningJobs()) jobs.push_back(std::move(j));
    for (std::string& j : shard->pipeline.JobsAwaitingScheduler()) {
      if (std::find(jobs.begin(), jobs.end(), j) == jobs.end()) {
        jobs.push_back(std::move(j));
      }
    }
  }
  if (jobs.empty()) return;
  scheduler_queries_.fetch_add(1);
  absl::StatusOr<std::vector<SchedulerJobStatus>> answer =
      options_.job_state(jobs);
  if (!answer.ok()) {
    // No word from the scheduler: stops are read from the frames alone
    // once the wait (LifecycleOptions::await_scheduler_s) is over.
    if (scheduler_errors_.fetch_add(1) % 100 == 0) {
      std::fprintf(stderr, "vigil-server: scheduler query failed: %s\n",
                   std::string(answer.status().message()).c_str());
    }
    return;
  }
  const double now = options_.clock->Now();
  for (const SchedulerJobStatus& job : *answer) {
    JobRunState state;
    switch (job.state) {
      case SchedulerJobState::kRunning:
        state = JobRunState::kRunning;
        break;
      case SchedulerJobState::kEnded:
      case SchedulerJobState::kPending:    // requeued: this run is over
      case SchedulerJobState::kSuspended:  // paused: it will resume
        state = JobRunState::kEnded;
        break;
      case SchedulerJobState::kNotFound:
      case SchedulerJobState::kUnknown:
      default:
        continue;  // no conclusion: the frames decide
    }
    const int k = ShardOf(job.job);
    Shard& shard = *shards_[k];
    {
      std::lock_guard<std::mutex> l(shard.mu);
      shard.pipeline.SetJobState(job.job, state, now, &shard.updates);
      if (shard.updates.empty()) continue;
      Publish(k, shard.updates);
    }
    ShareImplications(k);
  }
}

void DetectionService::Publish(int shard, std::vector<IncidentUpdate>& updates) {
  std::lock_guard<std::mutex> l(publish_mu_);
  PublishLocked(shard, updates);
}

void DetectionService::PublishLocked(int shard,
                                     std::vector<IncidentUpdate>& updates) {
  SeriesStore& store = *options_.store;
  for (IncidentUpdate& u : updates) {
    auto [it, inserted] = server_ids_.try_emplace(
        shard < 0 ? u.incident.id : absl::StrCat(shard, "/", u.incident.id));
    if (inserted && u.type == UpdateType::kOpened &&
        !absl::StartsWith(u.incident.id, "external-")) {
      // The same fault as an incident firing before a restart: adopt it.
      const std::string gpu = u.incident.gpu ? std::to_string(*u.incident.gpu) : "";
      auto match = std::find_if(inherited_.begin(), inherited_.end(), [&](const Inherited& h) {
        return h.job == u.incident.job && h.node == u.incident.node && h.gpu == gpu &&
               h.hint_category == HintCategoryName(u.incident.hint_category);
      });
      if (match != inherited_.end()) {
        it->second = match->id;
        u.incident.ts = std::min(u.incident.ts, match->ts);
        const std::optional<Severity> before = ParseSeverity(match->severity);
        u.type = before && u.incident.severity < *before ? UpdateType::kSeverityRaised
                                                         : UpdateType::kEvidenceAdded;
        adopted_heads_[match->id] = *match;
        inherited_.erase(match);
        has_inherited_.store(!inherited_.empty());
        adopted_.fetch_add(1);
        inserted = false;
      }
    }
    if (inserted) {
      it->second = absl::StrFormat("%s%s%06d", kIdPrefix,
                                   options_.id_shard.empty() ? "" : options_.id_shard + "-",
                                   next_id_++);
      Event index_event{kIndexStream, u.ts, 0, Dump(Json{{"id", it->second}})};
      if (!store.AppendEvent(index_event).ok()) persist_errors_.fetch_add(1);
    }
    u.incident.id = it->second;
    if (auto head = adopted_heads_.find(it->second); head != adopted_heads_.end()) {
      const std::optional<Severity> stored = ParseSeverity(head->second.severity);
      if (stored && *stored < u.incident.severity) {
        u.incident.severity = *stored;
        u.incident.kind = head->second.kind;
        u.incident.summary = head->second.summary;
        u.incident.hint = head->second.hint;
      }
      if (u.type == UpdateType::kResolved) adopted_heads_.erase(head);
    }
    Record(u, it->second, IncidentToJson(u.incident, /*full=*/true));
  }
  updates.clear();
}

void DetectionService::Record(const IncidentUpdate& update, const std::string& id,
                              Json snapshot) {
  Json payload = {{"type", std::string(UpdateTypeName(update.type))},
                  {"ts", update.ts},
                  {"incident", snapshot}};
  Event event{EventStream(id), update.ts, 0, Dump(payload)};
  if (!options_.store->AppendEvent(event).ok()) persist_errors_.fetch_add(1);
  updates_by_type_[static_cast<size_t>(update.type)].fetch_add(1);
  {
    std::lock_guard<std::mutex> l(index_mu_);
    index_[id] = std::move(snapshot);
  }
  if (listener_ != nullptr) listener_->OnIncidentUpdate(update);
}

Incident DetectionService::HeaderOf(const Inherited& h) {
  Incident incident;
  incident.id = h.id;
  incident.severity = ParseSeverity(h.severity).value_or(Severity::kP3);
  incident.kind = h.kind;
  incident.job = h.job;
  incident.node = h.node;
  if (int gpu; absl::SimpleAtoi(h.gpu, &gpu)) incident.gpu = gpu;
  incident.nodes = h.nodes;
  incident.ts = h.ts;
  incident.last_update_ts = h.ts;
  incident.summary = h.summary;
  incident.hint_category =
      ParseHintCategory(h.hint_category).value_or(HintCategory::kGeneral);
  incident.hint = h.hint;
  return incident;
}

std::optional<Incident> DetectionService::ClaimInherited(std::string_view kind) {
  std::lock_guard<std::mutex> l(publish_mu_);
  auto h = std::find_if(inherited_.begin(), inherited_.end(),
                        [&](const Inherited& i) { return i.kind == kind; });
  if (h == inherited_.end()) return std::nullopt;
  // As PublishExternal would have registered it.
  const std::string engine_id = absl::StrCat("external-", external_.size() + 1);
  server_ids_[engine_id] = h->id;
  external_.emplace(h->id, engine_id);
  Incident incident = HeaderOf(*h);
  inherited_.erase(h);
  has_inherited_.store(!inherited_.empty());
  return incident;
}

void DetectionService::NoteInheritedSeen(const FrameView& frame, double now) {
  for (Inherited& h : inherited_) {
    if (!std::isnan(h.seen_since)) continue;
    const bool ours =
        !h.node.empty() ? h.node == frame.node
        : !h.nodes.empty()
            ? std::find(h.nodes.begin(), h.nodes.end(), frame.node) != h.nodes.end()
            : h.job == frame.job;
    if (ours) h.seen_since = now;
  }
}

void DetectionService::ResolveQuietInherited(double now) {
  for (auto h = inherited_.begin(); h != inherited_.end();) {
    if (std::isnan(h->seen_since) ||
        now - h->seen_since < options_.restart_resolve_seconds) {
      ++h;
      continue;
    }
    Json snapshot;
    {
      std::lock_guard<std::mutex> l(index_mu_);
      auto stored = index_.find(h->id);
      if (stored != index_.end()) snapshot = stored->second;
    }
    if (snapshot.value("state", "") != IncidentStateName(IncidentState::kFiring)) {
      h = inherited_.erase(h);  // resolved meanwhile (by an operator)
      continue;
    }
    // The stored snapshot, resolved: its evidence and history stay.
    snapshot["state"] = std::string(IncidentStateName(IncidentState::kResolved));
    snapshot["resolved_ts"] = now;
    snapshot["last_update_ts"] = now;
    IncidentUpdate update;
    update.type = UpdateType::kResolved;
    update.ts = now;
    update.incident = HeaderOf(*h);
    update.incident.last_update_ts = now;
    update.incident.state = IncidentState::kResolved;
    update.incident.resolved_ts = now;
    Record(update, h->id, std::move(snapshot));
    restart_resolved_.fetch_add(1);
    h = inherited_.erase(h);
  }
  has_inherited_.store(!inherited_.empty());
}

absl::StatusOr<std::string> DetectionService::PublishExternal(
    IncidentUpdate update) {
  std::string engine_id;
  std::lock_guard<std::mutex> l(publish_mu_);
  if (update.type == UpdateType::kOpened) {
    if (!update.incident.id.empty())
      return absl::InvalidArgumentError("a new external incident has no id yet");
    engine_id = absl::StrCat("external-", external_.size() + 1);
  } else {
    auto it = external_.find(update.incident.id);
    if (it == external_.end())
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", update.incident.id, "\" is not an external incident"));
    engine_id = it->second;
  }
  update.incident.id = engine_id;
  std::vector<IncidentUpdate> updates = {std::move(update)};
  PublishLocked(-1, updates);
  const std::string server_id = server_ids_.at(engine_id);
  external_.emplace(server_id, engine_id);
  return server_id;
}

void DetectionService::TickLoop(double first_tick) {
  Clock& clock = *options_.clock;
  std::unique_lock<std::mutex> lock(tick_mu_);
  double next = first_tick;
  double next_snapshot = first_tick - options_.tick_seconds +
                         options_.snapshot_seconds;
  while (!stopping_) {
    clock.WaitUntil(lock, tick_cv_, next);
    if (stopping_) break;
    const double now = clock.Now();
    if (now < next) continue;
    next = now + options_.tick_seconds;
    lock.unlock();
    // A bug in one tick must not end the thread that finds silent nodes.
    if (std::string error = CatchAll([&] {
          AdvanceTime(now);
          last_tick_.store(now);
          if (options_.snapshot_seconds > 0 && now >= next_snapshot) {
            // Every baseline learned: what the next one would add is their
            // slow adaptation, so it can wait longer (a failed one is
            // tried again soon).
            const bool learned =
                Snapshot().ok() && snapshot_learning_series_.load() == 0;
            next_snapshot = now + (learned ? std::max(options_.snapshot_seconds,
                                                      options_.learned_snapshot_seconds)
                                           : options_.snapshot_seconds);
          }
        });
        !error.empty())
      std::fprintf(stderr, "vigil-server: detection tick threw %s\n",
                   error.c_str());
    lock.lock();
  }
}

std::vector<Json> DetectionService::ListIncidents(
    const IncidentFilter& filter) const {
  std::vector<const Json*> matched;
  std::lock_guard<std::mutex> l(index_mu_);
  for (const auto& [id, snapshot] : index_) {
    if (Matches(snapshot, filter)) matched.push_back(&snapshot);
  }
  // Newest first; ids break ties (later ids are newer).
  std::sort(matched.begin(), matched.end(), [](const Json* a, const Json* b) {
    const double ta = (*a)["ts"].get<double>(), tb = (*b)["ts"].get<double>();
    if (ta != tb) return ta > tb;
    return IdNumber((*a)["id"].get<std::string>()) >
           IdNumber((*b)["id"].get<std::string>());
  });
  if (matched.size() > filter.limit) matched.resize(filter.limit);
  std::vector<Json> out;
  out.reserve(matched.size());
  for (const Json* j : matched) out.push_back(*j);
  return out;
}

FiringCounts DetectionService::CountFiring() const {
  FiringCounts counts;
  const std::string firing(IncidentStateName(IncidentState::kFiring));
  std::lock_guard<std::mutex> l(index_mu_);
  for (const auto& [id, s] : index_) {
    if (s["state"] != firing) continue;
    std::optional<Severity> severity = ParseSeverity(s["severity"].get<std::string>());
    if (!severity) continue;
    const int i = static_cast<int>(*severity);
    ++counts.by_job[s["job"].get<std::string>()][i];
    if (s["node"].is_string()) ++counts.by_node[s["node"].get<std::string>()][i];
  }
  return counts;
}

absl::StatusOr<Json> DetectionService::GetIncident(std::string_view id) const {
  Json incident;
  {
    std::lock_guard<std::mutex> l(index_mu_);
    auto it = index_.find(std::string(id));
    if (it == index_.end())
      return absl::NotFoundError(
          absl::StrCat("incident '", std::string(id), "' not found"));
    incident = it->second;
  }
  Json timeline = Json::array();
  for (const Event& e :
       options_.store->ListEvents(EventStream(id), -kInf, kInf, kMaxTimeline)) {
    Json payload = Parse(e.payload);
    if (!payload.is_object() || !payload.contains("incident") ||
        !IsSnapshot(payload["incident"]) || !payload.contains("type"))
      continue;
    timeline.push_back({{"type", payload["type"]},
                        {"ts", e.ts},
                        {"severity", payload["incident"]["severity"]},
                        {"state", payload["incident"]["state"]}});
  }
  incident["timeline"] = std::move(timeline);
  return incident;
}

absl::StatusOr<SeriesBaseline> DetectionService::Baseline(SeriesId id) const {
  std::optional<SeriesBaseline> baseline;
  for (const std::unique_ptr<Shard>& shard : shards_) {
    std::lock_guard<std::mutex> l(shard->mu);
    baseline = shard->pipeline.Baseline(id);
    if (baseline) break;
  }
  if (!baseline)
    return absl::NotFoundError(absl::StrCat(
        "series ", id, " has no baseline in this server process (not seen "
        "by detection since it started)"));
  return *baseline;
}

DetectionCounters DetectionService::counters() const {
  DetectionCounters c;
  c.frames = frames_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < c.updates.size(); ++i)
    c.updates[i] = updates_by_type_[i].load();
  c.persist_errors = persist_errors_.load();
  c.unreadable = unreadable_;
  c.adopted = adopted_.load();
  c.counters_primed = counters_primed_.load();
  c.restart_resolved = restart_resolved_.load();
  c.scheduler_queries = scheduler_queries_.load();
  c.scheduler_errors = scheduler_errors_.load();
  c.snapshots = snapshots_.load();
  c.snapshot_errors = snapshot_errors_.load();
  c.snapshot_bytes = snapshot_bytes_.load();
  c.snapshot_learning_series = snapshot_learning_series_.load();
  c.restored = restored_;
  std::lock_guard<std::mutex> l(index_mu_);
  for (const auto& [id, snapshot] : index_) {
    if (snapshot["state"].get<std::string>() !=
        IncidentStateName(IncidentState::kFiring))
      continue;
    if (std::optional<Severity> s =
            ParseSeverity(snapshot["severity"].get<std::string>()))
      ++c.open[static_cast<size_t>(*s)];
  }
  return c;
}

}  // namespace vigil
