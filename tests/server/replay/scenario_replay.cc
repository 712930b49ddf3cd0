#include "tests/server/replay/scenario_replay.h"

#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using json = nlohmann::json;

int Rank(const json& severity) {
  return severity.is_string() ? severity.get<std::string>()[1] - '0' : 9;
}

bool Contains(const json& list, const json& value) {
  for (const json& v : list) {
    if (v == value) return true;
  }
  return false;
}

// Whether `line`'s localisation does not contradict `entry` / `fault`.
bool Localised(const json& line, const json& entry, const json& fault,
               bool required) {
  for (const char* field : {"node", "gpu"}) {
    if (entry[field].is_null()) continue;
    if (line[field].is_null() ? required : line[field] != fault[field]) {
      return false;
    }
  }
  // rack_down: one incident naming exactly the nodes that went down.
  if (entry.contains("nodes") && !entry["nodes"].is_null()) {
    if (!line.contains("nodes") || line["nodes"].is_null()) return !required;
    std::set<json> want(entry["nodes"].begin(), entry["nodes"].end());
    std::set<json> got(line["nodes"].begin(), line["nodes"].end());
    if (want != got) return false;
  }
  return true;
}

}  // namespace

ScenarioReplay RunAndReplay(const ScenarioRunOptions& options) {
  ScenarioReplay out;
  absl::StatusOr<agent::ScenarioSpec> spec =
      agent::ScenarioSpecFromName(options.scenario);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return out;
  const std::vector<std::string> nodes =
      agent::ClusterNodeNames(options.cluster.nodes);
  absl::Status resolved = agent::ResolveFaultDefaults(
      options.overrides, nodes[std::min<size_t>(1, nodes.size() - 1)], nodes,
      options.cluster.gpus, options.cluster.gpus, &*spec);
  EXPECT_TRUE(resolved.ok()) << resolved;

  ReplaySink sink;
  sink.write = [&out](std::string_view line) {
    out.lines.push_back(json::parse(line));
  };
  sink.bad_line = [&out](int64_t line, std::string_view reason) {
    out.bad_lines.push_back(absl::StrCat(line, ": ", std::string(reason)));
  };
  Replayer replayer(ReplayOptions(), std::move(sink));
  absl::StatusOr<agent::ClusterRun> run = agent::SimulateCluster(
      options.cluster, *spec,
      [&replayer](std::string_view chunk) { replayer.Feed(chunk); });
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return out;
  replayer.Finish();
  out.stats = replayer.stats();
  out.truth = json::parse(agent::TruthJson(options.cluster, spec->name, *run));
  return out;
}

bool Score::Detected() const {
  for (const EntryResult& e : entries) {
    if (!e.hit) return false;
  }
  return true;
}

std::string Score::Describe(const ScenarioReplay& replay) const {
  std::string s = "expected:\n";
  for (const EntryResult& e : entries) {
    absl::StrAppend(&s, "  ", e.expected.dump(), "\n    -> ",
                    e.hit ? absl::StrCat("met after ", e.delay_s, " s by ",
                                         (*e.hit)["id"].dump(), " ",
                                         (*e.hit)["kind"].dump())
                          : std::string("MISSED"),
                    "\n");
  }
  absl::StrAppend(&s, "fault: ",
                  replay.truth["faults"].empty()
                      ? std::string("none")
                      : replay.truth["faults"][0]
                            .value("kind", std::string("?")),
                  " start_ts ",
                  replay.truth["faults"].empty()
                      ? std::string("-")
                      : replay.truth["faults"][0]["start_ts"].dump(),
                  "\nincident lines:\n");
  for (const json& l : replay.lines) {
    absl::StrAppend(&s, "  ", l.value("event", std::string("opened")), " ",
                    l["id"].dump(), " ", l["severity"].dump(), " ",
                    l["kind"].dump(), " node=", l["node"].dump(),
                    " gpu=", l["gpu"].dump(), " ts=", l["ts"].dump(), ": ",
                    l["summary"].dump(), "\n");
  }
  absl::StrAppend(&s, "false alarms: ", false_alarms.size(), "\n");
  return s;
}

Score ScoreReplay(const ScenarioReplay& replay) {
  Score score;
  std::set<std::string> explained;
  const json& faults = replay.truth["faults"];
  for (const json& fault : faults) {
    if (fault["start_ts"].is_null()) continue;
    const double start = fault["start_ts"].get<double>();
    std::string primary_id;
    for (const json& entry : fault["expected"]) {
      EntryResult r;
      r.expected = entry;
      for (const json& line : replay.lines) {
        if (line["ts"].get<double>() < start) continue;
        if (line["severity"] != entry["severity"]) continue;
        const bool kind_ok = Contains(entry["kinds"], line["kind"]) ||
                             (!primary_id.empty() && line["id"] == primary_id);
        if (!kind_ok || !Localised(line, entry, fault, true)) continue;
        r.hit = line;
        r.delay_s = line["ts"].get<double>() - start;
        explained.insert(line["id"].get<std::string>());
        break;
      }
      if (primary_id.empty() && r.hit) {
        primary_id = (*r.hit)["id"].get<std::string>();
      }
      score.entries.push_back(std::move(r));
    }
  }
  for (const json& line : replay.lines) {
    if (Rank(line["severity"]) > 2) continue;
    if (explained.count(line["id"].get<std::string>())) continue;
    bool ok = false;
    for (const json& fault : faults) {
      if (fault["start_ts"].is_null() ||
          line["ts"].get<double>() < fault["start_ts"].get<double>()) {
        continue;
      }
      if (Contains(fault["side_effect_kinds"], line["kind"])) ok = true;
      for (const json& entry : fault["expected"]) {
        if (Contains(entry["kinds"], line["kind"]) &&
            Localised(line, entry, fault, false)) {
          ok = true;
        }
      }
    }
    if (!ok) score.false_alarms.push_back(line);
  }
  return score;
}

}  // namespace vigil
