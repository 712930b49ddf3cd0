#include "ctl/output.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace vigil::ctl {
namespace {

using Json = nlohmann::json;

constexpr double kNoTime = std::numeric_limits<double>::quiet_NaN();

// Characters (UTF-8 code points) in `text`.
size_t Width(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  });
}

// `text` cut to `max_chars` characters, the last three being "...".
std::string Cut(const std::string& text, size_t max_chars) {
  if (Width(text) <= max_chars) return text;
  const size_t keep = max_chars > 3 ? max_chars - 3 : 0;
  size_t kept = 0;
  size_t end = 0;
  while (end < text.size()) {
    if ((static_cast<unsigned char>(text[end]) & 0xC0) != 0x80 &&
        ++kept > keep) {
      break;
    }
    ++end;
  }
  return absl::StrCat(text.substr(0, end), "...");
}

// A JSON value as a table cell: strings as they are, whole numbers without
// a fraction, lists of scalars comma-separated, null as "-".
std::string Cell(const Json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    return text.empty() ? "-" : text;
  }
  if (value.is_boolean()) return value.get<bool>() ? "yes" : "no";
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (number == std::floor(number) && std::fabs(number) < 1e15) {
      return absl::StrCat(static_cast<int64_t>(number));
    }
    return absl::StrFormat("%.4g", number);
  }
  if (value.is_array()) {
    std::vector<std::string> parts;
    for (const Json& item : value) parts.push_back(Cell(item));
    return parts.empty() ? "-" : absl::StrJoin(parts, ",");
  }
  return value.dump();
}

// The cell of `object[key]`; "-" when `object` is no object or lacks it.
std::string Field(const Json& object, const char* key) {
  if (!object.is_object()) return "-";
  auto it = object.find(key);
  return it == object.end() ? "-" : Cell(*it);
}

// `object[key]` as a number; NaN when missing or not a number.
double Number(const Json& object, const char* key) {
  if (!object.is_object()) return kNoTime;
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : kNoTime;
}

// `body[key]` when it is a list; an empty list otherwise.
const Json& List(const Json& body, const char* key) {
  static const Json* const kEmpty = new Json(Json::array());
  if (!body.is_object()) return *kEmpty;
  auto it = body.find(key);
  return it != body.end() && it->is_array() ? *it : *kEmpty;
}

// The age of `object[key]` at `now`: "3m"; "-" without a time.
std::string Age(const Json& object, const char* key, double now) {
  const double ts = Number(object, key);
  return std::isnan(ts) ? "-" : FormatSpan(std::max(0.0, now - ts));
}

std::string Relative(const Json& object, const char* key, double now) {
  const double ts = Number(object, key);
  return std::isnan(ts) || ts <= 0 ? "-" : FormatRelative(ts, now);
}

// "2026-11-24T15:00:00Z".
std::string Utc(double ts) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                          absl::FromUnixMicros(static_cast<int64_t>(ts * 1e6)),
                          absl::UTCTimeZone());
}

// The elements of `list` sorted by `key`, newest first.
std::vector<Json> NewestFirst(const Json& list, const char* key) {
  std::vector<Json> items(list.begin(), list.end());
  std::stable_sort(items.begin(), items.end(),
                   [key](const Json& a, const Json& b) {
                     const double ta = Number(a, key), tb = Number(b, key);
                     return (std::isnan(tb) && !std::isnan(ta)) || ta > tb;
                   });
  return items;
}

// "job=a,node=b*" from [{"name", "value"}].
std::string Matchers(const Json& silence) {
  std::vector<std::string> parts;
  for (const Json& m : List(silence, "matchers")) {
    parts.push_back(absl::StrCat(Field(m, "name"), "=", Field(m, "value")));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

// The value of field `key` as text; times (numbers named "ts", "*_ts" or
// "*_at") relative to `now`.
std::string FieldText(const std::string& key, const Json& value, double now) {
  const bool time = key == "ts" || key.ends_with("_ts") || key.ends_with("_at");
  if (!time || !value.is_number()) return Cell(value);
  const double ts = value.get<double>();
  return ts > 0 ? FormatRelative(ts, now) : "-";
}

// "key=value ..." of the set fields of `object` except `skip`.
std::string Details(const Json& object, const std::vector<std::string>& skip,
                    double now) {
  if (!object.is_object()) return Cell(object);
  std::vector<std::string> parts;
  for (const auto& [key, value] : object.items()) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    if (value.is_null() || (value.is_string() && value.empty())) continue;
    parts.push_back(absl::StrCat(key, "=", FieldText(key, value, now)));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

// "key:  value" lines, aligned, of every field of `object`.
std::string KeyValues(const Json& object, double now) {
  if (!object.is_object()) return absl::StrCat(object.dump(2), "\n");
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : object.items()) {
    rows.push_back({absl::StrCat(key, ":"), FieldText(key, value, now)});
  }
  return RenderTable({}, rows, /*max_cell_chars=*/0);
}

int SeverityRank(const Json& incident) {
  const std::string severity = Field(incident, "severity");
  return severity.size() == 2 && severity[0] == 'P' ? severity[1] - '0' : 9;
}

std::string Lifecycle(const Json& incident) {
  std::string lifecycle = Field(incident, "lifecycle");
  return lifecycle == "-" ? Field(incident, "state") : lifecycle;
}

std::string Incidents(const Json& body, double now) {
  std::vector<Json> incidents = NewestFirst(List(body, "incidents"), "ts");
  if (incidents.empty()) return "no incidents\n";
  std::stable_sort(incidents.begin(), incidents.end(),
                   [](const Json& a, const Json& b) {
                     return SeverityRank(a) < SeverityRank(b);
                   });
  std::vector<std::vector<std::string>> rows;
  for (const Json& i : incidents) {
    rows.push_back({Field(i, "severity"), Field(i, "id"), Age(i, "ts", now),
                    Lifecycle(i), Field(i, "kind"), Field(i, "job"),
                    Field(i, "node"), Field(i, "gpu"), Field(i, "summary")});
  }
  return RenderTable(
      {"SEV", "ID", "AGE", "STATE", "KIND", "JOB", "NODE", "GPU", "SUMMARY"},
      rows);
}

std::string Incident(const Json& incident, double now) {
  std::string text = absl::StrCat(
      Field(incident, "severity"), " ", Field(incident, "id"), "  ",
      Lifecycle(incident), "  ", Field(incident, "kind"),
      "  job=", Field(incident, "job"), " node=", Field(incident, "node"),
      " gpu=", Field(incident, "gpu"), "\n");
  std::vector<std::vector<std::string>> rows;
  if (double ts = Number(incident, "ts"); !std::isnan(ts)) {
    rows.push_back(
        {"since:", absl::StrCat(FormatRelative(ts, now), " (", Utc(ts), ")")});
  }
  rows.push_back({"summary:", Field(incident, "summary")});
  rows.push_back({"hint:", Field(incident, "hint")});
  if (incident.is_object() && incident.contains("escalation")) {
    rows.push_back({"escalation:", Details(incident["escalation"], {}, now)});
  }
  for (std::vector<std::string>& row : rows) row[0].insert(0, "  ");
  text += RenderTable({}, rows, /*max_cell_chars=*/0);
  std::vector<Json> timeline(List(incident, "timeline").begin(),
                             List(incident, "timeline").end());
  if (timeline.empty()) return text;
  std::stable_sort(timeline.begin(), timeline.end(),
                   [](const Json& a, const Json& b) {
                     return Number(a, "ts") < Number(b, "ts");
                   });
  rows.clear();
  for (const Json& event : timeline) {
    rows.push_back({Age(event, "ts", now), Field(event, "type"),
                    Field(event, "who"),
                    Details(event, {"type", "ts", "who"}, now)});
  }
  return absl::StrCat(text, "\ntimeline (oldest first):\n",
                      RenderTable({"AGE", "TYPE", "WHO", "DETAIL"}, rows));
}

std::string Silences(const Json& body, double now) {
  const Json& silences = List(body, "silences");
  if (silences.empty()) return "no silences\n";
  std::vector<std::vector<std::string>> rows;
  for (const Json& s : silences) {
    rows.push_back({Field(s, "id"), Matchers(s), Relative(s, "starts_at", now),
                    Relative(s, "ends_at", now), Field(s, "author"),
                    Field(s, "comment")});
  }
  return RenderTable({"ID", "MATCHERS", "STARTS", "ENDS", "AUTHOR", "COMMENT"},
                     rows);
}

std::string Deliveries(const Json& body, double now) {
  std::vector<Json> deliveries =
      NewestFirst(List(body, "deliveries"), "created_ts");
  if (deliveries.empty()) return "no deliveries\n";
  std::vector<std::vector<std::string>> rows;
  for (const Json& d : deliveries) {
    std::string detail = Field(d, "last_detail");
    if (detail == "-") detail = Field(d, "description");
    rows.push_back({Age(d, "created_ts", now), Field(d, "state"),
                    Field(d, "kind"), Field(d, "receiver"),
                    Field(d, "incident_id"), Field(d, "attempts"),
                    Relative(d, "next_attempt_ts", now), detail});
  }
  return RenderTable({"AGE", "STATE", "KIND", "RECEIVER", "INCIDENT", "TRIES",
                      "NEXT", "DETAIL"},
                     rows);
}

std::string Actions(const Json& body, double now) {
  std::vector<Json> actions = NewestFirst(List(body, "actions"), "created_ts");
  if (actions.empty()) return "no actions\n";
  std::vector<std::vector<std::string>> rows;
  for (const Json& a : actions) {
    rows.push_back({Field(a, "id"), Age(a, "created_ts", now),
                    Field(a, "state"), Field(a, "verdict"), Field(a, "action"),
                    Field(a, "job"), Field(a, "node"), Field(a, "incident_id"),
                    Field(a, "requested_by"), Field(a, "approved_by"),
                    Field(a, "reason")});
  }
  return RenderTable({"ID", "AGE", "STATE", "VERDICT", "ACTION", "JOB", "NODE",
                      "INCIDENT", "BY", "APPROVED", "REASON"},
                     rows);
}

std::string Action(const Json& action) {
  std::string text = absl::StrCat(
      "action ", Field(action, "id"), " ", Field(action, "action"),
      " job=", Field(action, "job"), " node=", Field(action, "node"),
      ": state ", Field(action, "state"), ", verdict ",
      Field(action, "verdict"), "\n");
  if (std::string reason = Field(action, "reason"); reason != "-") {
    absl::StrAppend(&text, "  reason: ", reason, "\n");
  }
  if (std::string detail = Field(action, "detail"); detail != "-") {
    absl::StrAppend(&text, "  detail: ", detail, "\n");
  }
  return text;
}

// What a config reload changed (POST /-/reload).
std::string Reloaded(const Json& body) {
  auto keys = [&body](const char* name) {
    std::vector<std::string> out;
    if (const auto it = body.find(name); it != body.end() && it->is_array())
      for (const Json& key : *it)
        if (key.is_string()) out.push_back(key.get<std::string>());
    return out;
  };
  const std::vector<std::string> applied = keys("applied");
  const std::vector<std::string> waiting = keys("restart_required");
  std::string text = absl::StrCat(
      "config reloaded; in force now: ", applied.empty() ? "no change" : absl::StrJoin(applied, ", "),
      "\n");
  if (!waiting.empty())
    absl::StrAppend(&text, "changed, in force after a restart: ", absl::StrJoin(waiting, ", "),
                    "\n");
  return text;
}

std::string Remediation(const Json& body, double now) {
  std::string text = KeyValues(body, now);
  if (body.is_object() && body.value("tripped", false)) {
    text +=
        "\nThe circuit breaker is TRIPPED: automatic cordons and pauses are "
        "halted.\nOnce the storm is understood: vigilctl remediation reset\n";
  }
  return text;
}

std::string Audit(const Json& body, double now) {
  const Json& entries = List(body, "entries");
  if (entries.empty()) return "no audit entries\n";
  std::vector<std::vector<std::string>> rows;
  for (const Json& e : entries) {
    rows.push_back({Age(e, "ts", now), Field(e, "who"), Field(e, "role"),
                    Field(e, "action"), Field(e, "target"), Field(e, "result"),
                    Field(e, "detail")});
  }
  return RenderTable(
      {"AGE", "WHO", "ROLE", "ACTION", "TARGET", "RESULT", "DETAIL"}, rows);
}

std::string OnCall(const Json& body) {
  const Json& schedules = List(body, "schedules");
  if (schedules.empty()) return "no on-call schedules configured\n";
  std::vector<std::vector<std::string>> rows;
  for (const Json& s : schedules) {
    std::string user = Field(s, "user");
    rows.push_back({Field(s, "name"), user == "-" ? "(nobody)" : user});
  }
  return RenderTable({"SCHEDULE", "ON CALL"}, rows);
}

}  // namespace

std::string FormatResponse(const Invocation& invocation, const Json& body,
                           double now) {
  const std::string& command = invocation.command;
  if (command == "incidents") return Incidents(body, now);
  if (command == "incident") return Incident(body, now);
  if (command == "ack" || command == "unack" || command == "resolve") {
    return absl::StrCat("incident ", Field(body, "id"), ": ",
                        Field(body, "lifecycle"), "\n");
  }
  if (command == "silences") return Silences(body, now);
  if (command == "silence add") {
    return absl::StrCat("silence ", Field(body, "id"),
                        " created: ", Matchers(body), "; starts ",
                        Relative(body, "starts_at", now), ", ends ",
                        Relative(body, "ends_at", now), "\n");
  }
  if (command == "silence expire") {
    return absl::StrCat("silence ", Field(body, "id"), " expired\n");
  }
  if (command == "deliveries") return Deliveries(body, now);
  if (command == "actions") return Actions(body, now);
  if (command == "action run" || command == "approve") return Action(body);
  if (command == "remediation") return Remediation(body, now);
  if (command == "remediation reset") {
    return absl::StrCat("circuit breaker reset\n", KeyValues(body, now));
  }
  if (command == "reload") return Reloaded(body);
  if (command == "audit") return Audit(body, now);
  if (command == "oncall") return OnCall(body);
  if (command == "whoami") {
    return absl::StrCat(Field(body, "name"), " (", Field(body, "role"), ")\n");
  }
  return absl::StrCat(body.dump(2), "\n");
}

std::string FormatSpan(double seconds) {
  const auto whole = static_cast<int64_t>(seconds);
  if (whole < 60) return absl::StrCat(whole, "s");
  if (whole < 3600) return absl::StrCat(whole / 60, "m");
  if (whole < 86400) return absl::StrCat(whole / 3600, "h");
  return absl::StrCat(whole / 86400, "d");
}

std::string FormatRelative(double ts, double now) {
  if (std::fabs(ts - now) < 1) return "now";
  if (ts > now) return absl::StrCat("in ", FormatSpan(ts - now));
  return absl::StrCat(FormatSpan(now - ts), " ago");
}

std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        size_t max_cell_chars) {
  std::vector<std::vector<std::string>> lines;
  if (!header.empty()) lines.push_back(header);
  for (const std::vector<std::string>& row : rows) {
    lines.emplace_back();
    for (const std::string& cell : row) {
      lines.back().push_back(max_cell_chars == 0 ? cell
                                                 : Cut(cell, max_cell_chars));
    }
  }
  std::vector<size_t> widths;
  for (const std::vector<std::string>& line : lines) {
    widths.resize(std::max(widths.size(), line.size()), 0);
    for (size_t c = 0; c < line.size(); ++c) {
      widths[c] = std::max(widths[c], Width(line[c]));
    }
  }
  std::string text;
  for (const std::vector<std::string>& line : lines) {
    std::string out;
    for (size_t c = 0; c < line.size(); ++c) {
      out += line[c];
      if (c + 1 < line.size()) {
        out.append(widths[c] - Width(line[c]) + 2, ' ');
      }
    }
    absl::StrAppend(&text, out, "\n");
  }
  return text;
}

}  // namespace vigil::ctl
