// Escalator::Export / Import: the whole state as one JSON document.
//   {"version": 1, "now": T, "incidents": [...], "silences": [...]}
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "escalation/escalation.h"
#include "escalation/json_checker.h"

namespace vigil {
namespace {

using escalation_internal::Element;
using escalation_internal::JsonChecker;
using escalation_internal::Member;
using json = nlohmann::json;

constexpr int kStateVersion = 1;
constexpr double kAnyTime = std::numeric_limits<double>::lowest();

// Reads required members of one object, reporting what is missing or
// malformed.
class Fields {
 public:
  Fields(JsonChecker* checker, const json* object, std::string path)
      : checker_(checker), object_(object), path_(std::move(path)) {}

  void Text(const char* key, std::string* out) {
    if (const json* v = Find(key)) {
      if (auto s = checker_->Text(*v, Member(path_, key))) *out = *s;
    }
  }
  void Number(const char* key, double* out) {
    if (const json* v = Find(key)) {
      if (auto n = checker_->Number(*v, Member(path_, key), kAnyTime)) {
        *out = *n;
      }
    }
  }
  void Count(const char* key, int* out) {
    if (const json* v = Find(key)) {
      if (auto n = checker_->Integer(*v, Member(path_, key), 0,
                                     std::numeric_limits<int>::max())) {
        *out = static_cast<int>(*n);
      }
    }
  }
  void Bool(const char* key, bool* out) {
    if (const json* v = Find(key)) {
      if (auto b = checker_->Bool(*v, Member(path_, key))) *out = *b;
    }
  }
  void SeverityField(const char* key, Severity* out) {
    if (const json* v = Find(key)) {
      std::optional<Severity> s =
          v->is_string() ? ParseSeverity(v->get<std::string>()) : std::nullopt;
      if (!s) {
        checker_->Error(Member(path_, key),
                        absl::StrCat("not a severity: ", v->dump()));
      } else {
        *out = *s;
      }
    }
  }
  void Strings(const char* key, std::vector<std::string>* out) {
    if (const json* v = Find(key)) {
      const std::string path = Member(path_, key);
      if (!checker_->Array(*v, path)) return;
      for (size_t i = 0; i < v->size(); ++i) {
        if (auto s = checker_->String((*v)[i], Element(path, i))) {
          out->push_back(*s);
        }
      }
    }
  }

 private:
  const json* Find(const char* key) {
    auto it = object_->find(key);
    if (it == object_->end()) {
      checker_->Error(Member(path_, key), "required");
      return nullptr;
    }
    return &*it;
  }

  JsonChecker* checker_;
  const json* object_;
  std::string path_;
};

}  // namespace

nlohmann::json Escalator::TrackedToJson(const Tracked& t) const {
  json j = {{"id", t.labels.id},
            {"severity", SeverityName(t.labels.severity)},
            {"kind", t.labels.kind},
            {"job", t.labels.job},
            {"node", t.labels.node},
            {"policy", SeverityName(t.policy)},
            {"resolved", t.resolved},
            {"resolved_at", t.resolved_at},
            {"acknowledged", t.acknowledged},
            {"acknowledged_by", t.acknowledged_by},
            {"acknowledged_at", t.acknowledged_at},
            {"silenced_by", t.silenced_by},
            {"escalating", t.escalating},
            {"exhausted", t.exhausted},
            {"step", t.step},
            {"attempt", t.attempt},
            {"next_at", t.next_at},
            {"rounds", t.rounds},
            {"paged_users", t.paged_users},
            {"group_channels", t.group_channels},
            {"personally_paged", t.personally_paged}};
  if (t.labels.gpu) j["gpu"] = *t.labels.gpu;
  return j;
}

nlohmann::json Escalator::Export() const {
  json incidents = json::array();
  for (const auto& [id, t] : incidents_) incidents.push_back(TrackedToJson(t));
  json silences = json::array();
  for (const auto& [id, s] : silences_) silences.push_back(SilenceToJson(s));
  return {{"version", kStateVersion},
          {"now", now_},
          {"incidents", std::move(incidents)},
          {"silences", std::move(silences)}};
}

absl::Status Escalator::Import(const nlohmann::json& state) {
  JsonChecker checker;
  if (!checker.Object(state, "$")) return checker.ToStatus();
  checker.CheckKeys(state, "", {"version", "now", "incidents", "silences"});
  Fields top(&checker, &state, "");
  int version = 0;
  top.Count("version", &version);
  if (state.contains("version") && version != kStateVersion) {
    checker.Error(
        "version",
        absl::StrCat("unsupported state version ", state["version"].dump(),
                     " (this build reads ", kStateVersion, ")"));
  }
  double now = 0;
  top.Number("now", &now);

  std::map<std::string, Tracked> incidents;
  if (auto it = state.find("incidents"); it == state.end()) {
    checker.Error("incidents", "required");
  } else if (checker.Array(*it, "incidents")) {
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string path = Element("incidents", i);
      const json& j = (*it)[i];
      if (!checker.Object(j, path)) continue;
      checker.CheckKeys(j, path,
                        {"id",
                         "severity",
                         "kind",
                         "job",
                         "node",
                         "gpu",
                         "policy",
                         "resolved",
                         "resolved_at",
                         "acknowledged",
                         "acknowledged_by",
                         "acknowledged_at",
                         "silenced_by",
                         "escalating",
                         "exhausted",
                         "step",
                         "attempt",
                         "next_at",
                         "rounds",
                         "paged_users",
                         "group_channels",
                         "personally_paged"});
      Fields f(&checker, &j, path);
      Tracked t;
      f.Text("id", &t.labels.id);
      f.SeverityField("severity", &t.labels.severity);
      f.Text("kind", &t.labels.kind);
      f.Text("job", &t.labels.job);
      f.Text("node", &t.labels.node);
      if (auto gpu = j.find("gpu"); gpu != j.end()) {
        if (auto n = checker.Integer(*gpu, Member(path, "gpu"), 0, 1 << 20)) {
          t.labels.gpu = static_cast<int>(*n);
        }
      }
      f.SeverityField("policy", &t.policy);
      f.Bool("resolved", &t.resolved);
      f.Number("resolved_at", &t.resolved_at);
      f.Bool("acknowledged", &t.acknowledged);
      f.Text("acknowledged_by", &t.acknowledged_by);
      f.Number("acknowledged_at", &t.acknowledged_at);
      f.Text("silenced_by", &t.silenced_by);
      f.Bool("escalating", &t.escalating);
      f.Bool("exhausted", &t.exhausted);
      f.Count("step", &t.step);
      f.Count("attempt", &t.attempt);
      f.Number("next_at", &t.next_at);
      f.Count("rounds", &t.rounds);
      f.Strings("paged_users", &t.paged_users);
      f.Strings("group_channels", &t.group_channels);
      f.Strings("personally_paged", &t.personally_paged);
      if (t.labels.id.empty()) {
        checker.Error(Member(path, "id"), "must not be empty");
      } else if (!incidents.emplace(t.labels.id, std::move(t)).second) {
        checker.Error(Member(path, "id"), "duplicate incident");
      }
    }
  }

  std::map<std::string, Silence> silences;
  if (auto it = state.find("silences"); it == state.end()) {
    checker.Error("silences", "required");
  } else if (checker.Array(*it, "silences")) {
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string path = Element("silences", i);
      const json& j = (*it)[i];
      if (!checker.Object(j, path)) continue;
      checker.CheckKeys(
          j, path,
          {"id", "matchers", "starts_at", "ends_at", "author", "comment"});
      Fields f(&checker, &j, path);
      std::string id, author;
      double start = 0;
      f.Text("id", &id);
      f.Text("author", &author);
      f.Number("starts_at", &start);
      // The rest is what an operator's request holds: parse it as one.
      json body = j;
      body.erase("id");
      body.erase("author");
      absl::StatusOr<Silence> silence = ParseSilence(body, start);
      if (!silence.ok()) {
        checker.Error(path, std::string(silence.status().message()));
        continue;
      }
      silence->id = id;
      silence->author = author;
      if (id.empty()) {
        checker.Error(Member(path, "id"), "must not be empty");
      } else if (!silences.emplace(id, *std::move(silence)).second) {
        checker.Error(Member(path, "id"), "duplicate silence");
      }
    }
  }
  if (absl::Status s = checker.ToStatus(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not an escalation state written by Export: ", s.message()));
  }
  incidents_ = std::move(incidents);
  silences_ = std::move(silences);
  now_ = now;
  return absl::OkStatus();
}

}  // namespace vigil
