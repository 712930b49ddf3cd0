// Silences: parsing an operator's request, JSON, matching incidents.
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "escalation/escalation.h"
#include "escalation/json_checker.h"

namespace vigil {
namespace {

using escalation_internal::Element;
using escalation_internal::JsonChecker;
using escalation_internal::Member;
using json = nlohmann::json;

// The incident's text for matcher `name`, or nullopt for an unknown name.
std::optional<std::string> Label(std::string_view name,
                                 const Incident& incident) {
  if (name == "job") return incident.job;
  if (name == "node") return incident.node;
  if (name == "kind") return incident.kind;
  if (name == "severity") return std::string(SeverityName(incident.severity));
  if (name == "gpu") {
    return incident.gpu ? absl::StrCat(*incident.gpu) : std::string();
  }
  return std::nullopt;
}

bool AllDigits(std::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Why `value` can never match a `name` label, or "" when it can.
std::string ValueProblem(std::string_view name, std::string_view value) {
  const size_t star = value.find('*');
  if (star != std::string_view::npos && star + 1 != value.size()) {
    return "'*' may only end the value (a prefix)";
  }
  const bool prefix = star != std::string_view::npos;
  const std::string_view text = prefix ? value.substr(0, star) : value;
  if (name == "gpu") {
    if (!AllDigits(text) || (!prefix && text.empty())) {
      return absl::StrCat("a gpu is a GPU index such as \"3\", not \"",
                          std::string(value), "\"");
    }
    if (!prefix && text.size() > 1 && text[0] == '0') {
      return absl::StrCat("write the GPU index without leading zeros, not \"",
                          std::string(value), "\"");
    }
  }
  if (name == "severity" && !prefix && !ParseSeverity(text)) {
    return absl::StrCat("a severity is one of P0, P1, P2, P3, not \"",
                        std::string(value), "\"");
  }
  return "";
}

}  // namespace

absl::StatusOr<Silence> ParseSilence(const nlohmann::json& body, double now) {
  JsonChecker checker;
  if (!checker.Object(body, "$")) return checker.ToStatus();
  checker.CheckKeys(
      body, "",
      {"matchers", "starts_at", "ends_at", "duration_minutes", "comment"});
  Silence silence;
  auto matchers = body.find("matchers");
  if (matchers == body.end()) {
    checker.Error("matchers", "required (at least one matcher)");
  } else if (!matchers->is_array() || matchers->empty()) {
    checker.Error("matchers",
                  absl::StrCat("must be a non-empty array of {\"name\", "
                               "\"value\"}, not ",
                               matchers->dump()));
  } else {
    for (size_t i = 0; i < matchers->size(); ++i) {
      const std::string path = Element("matchers", i);
      const json& m = (*matchers)[i];
      if (!checker.Object(m, path)) continue;
      checker.CheckKeys(m, path, {"name", "value"});
      Matcher matcher;
      if (auto it = m.find("name"); it == m.end()) {
        checker.Error(Member(path, "name"), "required");
      } else if (auto name = checker.String(*it, Member(path, "name"))) {
        if (!Label(*name, Incident())) {
          checker.Error(Member(path, "name"),
                        absl::StrCat("unknown matcher name \"", *name,
                                     "\" (known: job, node, gpu, kind, "
                                     "severity)"));
        }
        matcher.name = *name;
      }
      if (auto it = m.find("value"); it == m.end()) {
        checker.Error(Member(path, "value"), "required");
      } else if (auto value = checker.String(*it, Member(path, "value"))) {
        if (std::string problem = ValueProblem(matcher.name, *value);
            !problem.empty()) {
          checker.Error(Member(path, "value"), problem);
        }
        matcher.value = *value;
      }
      silence.matchers.push_back(std::move(matcher));
    }
  }
  silence.start_ts = now;
  if (auto it = body.find("starts_at"); it != body.end()) {
    if (auto t = checker.Time(*it, "starts_at")) silence.start_ts = *t;
  }
  auto ends_at = body.find("ends_at");
  auto duration = body.find("duration_minutes");
  std::optional<double> end;
  if (ends_at != body.end() && duration != body.end()) {
    checker.Error("ends_at",
                  "give \"ends_at\" or \"duration_minutes\", "
                  "not both");
  } else if (ends_at != body.end()) {
    end = checker.Time(*ends_at, "ends_at");
  } else if (duration != body.end()) {
    if (auto m = checker.Number(*duration, "duration_minutes", 0)) {
      if (*m == 0) {
        checker.Error("duration_minutes", "must be positive");
      } else {
        end = silence.start_ts + *m * 60;
      }
    }
  } else {
    checker.Error("ends_at", "required (or \"duration_minutes\")");
  }
  if (end) {
    silence.end_ts = *end;
    const char* path = ends_at != body.end() ? "ends_at" : "duration_minutes";
    if (*end <= silence.start_ts) {
      checker.Error(path, absl::StrCat("the silence must end after it starts "
                                       "(",
                                       silence.start_ts, ")"));
    } else if (*end <= now) {
      checker.Error(
          path,
          absl::StrCat("the silence would already have ended (now ", now, ")"));
    }
  }
  if (auto it = body.find("comment"); it != body.end()) {
    if (auto c = checker.Text(*it, "comment")) silence.comment = *c;
  }
  if (absl::Status s = checker.ToStatus(); !s.ok()) return s;
  return silence;
}

nlohmann::json SilenceToJson(const Silence& silence) {
  json matchers = json::array();
  for (const Matcher& m : silence.matchers) {
    matchers.push_back({{"name", m.name}, {"value", m.value}});
  }
  return {{"id", silence.id},
          {"matchers", std::move(matchers)},
          {"starts_at", silence.start_ts},
          {"ends_at", silence.end_ts},
          {"author", silence.author},
          {"comment", silence.comment}};
}

bool SilenceMatches(const Silence& silence, const Incident& incident) {
  if (silence.matchers.empty()) return false;
  for (const Matcher& m : silence.matchers) {
    const std::optional<std::string> label = Label(m.name, incident);
    if (!label) return false;
    if (m.value.ends_with('*')) {
      if (!label->starts_with(
              std::string_view(m.value).substr(0, m.value.size() - 1))) {
        return false;
      }
    } else if (*label != m.value) {
      return false;
    }
  }
  return true;
}

}  // namespace vigil
