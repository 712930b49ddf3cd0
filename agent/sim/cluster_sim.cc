#include "agent/sim/cluster_sim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/sim/simulator.h"
#include "nlohmann/json.hpp"

namespace vigil::agent {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kChunkBytes = 1 << 20;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform [-1, 1) fixed by `bits`.
double Signed(uint64_t bits) { return 2 * ((Mix(bits) >> 11) * 0x1.0p-53) - 1; }

void AppendNumber(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("\"nan\"");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "\"inf\"" : "\"-inf\"");
  } else {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    out->append(buf, end);
  }
}

// `{"m": "name", "gpu": 3, "v": ` for each series of a simulator.
std::vector<std::string> SamplePrefixes(const Simulator& sim) {
  std::vector<std::string> out;
  for (const SeriesKey& key : sim.series()) {
    std::string p = absl::StrCat("{\"m\": ", json(key.metric).dump());
    for (const Label& l : key.labels) {
      if (l.first == "gpu") {
        absl::StrAppend(&p, ", \"gpu\": ", l.second);  // digits
      } else {
        absl::StrAppend(&p, ", ", json(l.first).dump(), ": ",
                        json(l.second).dump());
      }
    }
    p += ", \"v\": ";
    out.push_back(std::move(p));
  }
  return out;
}

struct Node {
  std::string header;  // `", "node": "n000", "job": "llama-70b"`
  std::unique_ptr<FaultScenario> scenario;
  std::unique_ptr<Simulator> sim;
  double phase = 0;  // fixed offset from the grid
};

}  // namespace

std::vector<std::string> ClusterNodeNames(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(absl::StrFormat("n%03d", i));
  return names;
}

absl::StatusOr<ClusterRun> SimulateCluster(
    const ClusterOptions& options, const ScenarioSpec& spec,
    const std::function<void(std::string_view)>& sink) {
  if (options.nodes < 1 || options.nodes > 4096) {
    return absl::InvalidArgumentError("nodes must be 1..4096");
  }
  if (!(options.interval_seconds >= 0.1) || !(options.seconds > 0) ||
      !std::isfinite(options.seconds) || !std::isfinite(options.start_ts) ||
      !(options.jitter_seconds >= 0)) {
    return absl::InvalidArgumentError(
        "interval must be >= 0.1 s, seconds > 0, jitter >= 0, start_ts "
        "finite");
  }
  ClusterRun run;
  absl::StatusOr<std::vector<ResolvedFault>> faults =
      ResolveFaults(spec, options.seed);
  if (!faults.ok()) return faults.status();
  run.faults = *faults;

  const double jitter =
      std::min(options.jitter_seconds, options.interval_seconds / 4);
  std::vector<Node> nodes;
  for (const std::string& name : ClusterNodeNames(options.nodes)) {
    Node n;
    n.header = absl::StrCat(", \"node\": ", json(name).dump(),
                            ", \"job\": ", json(options.job).dump());
    n.scenario = std::make_unique<FaultScenario>(*faults, name);
    SimulatorOptions so;
    so.node = name;
    so.job = options.job;
    so.gpus = options.gpus;
    so.nics = options.gpus;
    so.seed = options.seed;
    so.start_step = options.start_step;
    AdjustJobOptions(*faults, &so);
    absl::StatusOr<Simulator> sim = Simulator::Create(so, n.scenario.get());
    if (!sim.ok()) return sim.status();
    n.sim = std::make_unique<Simulator>(std::move(*sim));
    n.phase = 0.8 * jitter * Signed(options.seed ^ Mix(nodes.size() + 1));
    nodes.push_back(std::move(n));
  }
  // All nodes have the same catalogue.
  const std::vector<std::string> prefixes = SamplePrefixes(*nodes[0].sim);

  struct Pending {
    double ts;
    size_t node;
    SimFrame frame;
  };
  std::string buf;
  buf.reserve(kChunkBytes + (1 << 16));
  std::vector<Pending> tick_frames;
  const int64_t ticks = static_cast<int64_t>(
      std::ceil(options.seconds / options.interval_seconds - 1e-9));
  for (int64_t k = 0; k < ticks; ++k) {
    tick_frames.clear();
    for (size_t i = 0; i < nodes.size(); ++i) {
      double offset =
          nodes[i].phase +
          0.2 * jitter * Signed(options.seed ^ Mix((k << 12) + i + 7777));
      double ts = std::round((options.start_ts + k * options.interval_seconds +
                              offset) *
                             1000.0) /
                  1000.0;
      std::optional<SimFrame> f = nodes[i].sim->Tick(ts);
      if (f.has_value()) tick_frames.push_back({ts, i, std::move(*f)});
    }
    std::sort(tick_frames.begin(), tick_frames.end(),
              [](const Pending& a, const Pending& b) {
                return a.ts != b.ts ? a.ts < b.ts : a.node < b.node;
              });
    for (const Pending& p : tick_frames) {
      buf += "{\"ts\": ";
      AppendNumber(p.ts, &buf);
      buf += nodes[p.node].header;
      buf += ", \"step\": ";
      buf += std::to_string(p.frame.step);
      buf += ", \"samples\": [";
      bool first = true;
      for (const SimSample& s : p.frame.samples) {
        if (!first) buf += ", ";
        first = false;
        buf += prefixes[s.series];
        AppendNumber(s.value, &buf);
        buf += '}';
      }
      buf += "]}\n";
      ++run.frames;
      run.samples += p.frame.samples.size();
      run.end_ts = std::max(run.end_ts, p.ts);
      if (buf.size() >= kChunkBytes) {
        sink(buf);
        buf.clear();
      }
    }
  }
  if (!buf.empty()) sink(buf);

  const std::vector<std::string> names = ClusterNodeNames(options.nodes);
  for (size_t i = 0; i < run.faults.size(); ++i) {
    std::optional<FaultOnset> onset;
    for (size_t n = 0; n < nodes.size(); ++n) {
      std::optional<FaultOnset> o = nodes[n].scenario->onset(i);
      if (IsNodeFault(run.faults[i]) && run.faults[i].spec.node != names[n]) {
        continue;
      }
      if (o.has_value() && (!onset.has_value() || o->ts < onset->ts)) {
        onset = o;
      }
    }
    run.onsets.push_back(onset);
  }
  return run;
}

std::string TruthJson(const ClusterOptions& options, std::string_view scenario,
                      const ClusterRun& run) {
  json t;
  t["scenario"] = std::string(scenario);
  t["job"] = options.job;
  t["nodes"] = ClusterNodeNames(options.nodes);
  t["gpus_per_node"] = options.gpus;
  t["interval_seconds"] = options.interval_seconds;
  t["seed"] = options.seed;
  t["start_ts"] = options.start_ts;
  t["end_ts"] = run.end_ts;
  t["frames"] = run.frames;
  t["samples"] = run.samples;
  t["faults"] = json::array();
  const char* const kSeverities[] = {"P3", "P2", "P1", "P0"};
  for (size_t i = 0; i < run.faults.size(); ++i) {
    const ResolvedFault& f = run.faults[i];
    const std::optional<FaultOnset>& onset = run.onsets[i];
    std::vector<ExpectedIncident> expected = ExpectedIncidents(f);
    bool on_node = false, on_gpu = false;
    int worst = 0;
    json ex = json::array();
    for (const ExpectedIncident& e : expected) {
      on_node = on_node || e.node;
      on_gpu = on_gpu || e.gpu;
      for (int s = 0; s < 4; ++s) {
        if (e.severity == kSeverities[s]) worst = std::max(worst, s);
      }
      json j;
      j["kinds"] = e.kinds;
      j["severity"] = e.severity;
      j["node"] = e.node ? json(f.spec.node) : json(nullptr);
      j["gpu"] = e.gpu ? json(*f.spec.gpu) : json(nullptr);
      j["ts"] =
          onset.has_value() ? json(onset->ts + e.after_seconds) : json(nullptr);
      if (e.nodes) j["nodes"] = f.spec.nodes;  // rack_down
      ex.push_back(std::move(j));
    }
    json j;
    j["kind"] = f.spec.kind;
    j["node"] = on_node ? json(f.spec.node) : json(nullptr);
    j["gpu"] = on_gpu ? json(*f.spec.gpu) : json(nullptr);
    j["dev"] = f.spec.dev.empty() ? json(nullptr) : json(f.spec.dev);
    if (!f.spec.nodes.empty()) j["nodes"] = f.spec.nodes;  // rack_down
    j["magnitude"] = f.magnitude;
    j["job_speed"] = f.job_speed;
    j["start_ts"] = onset.has_value() ? json(onset->ts) : json(nullptr);
    j["start_step"] = onset.has_value() ? json(onset->step) : json(nullptr);
    j["end_ts"] = onset.has_value() && f.spec.duration_seconds.has_value()
                      ? json(onset->ts + *f.spec.duration_seconds)
                      : json(nullptr);
    j["severity"] = expected.empty() ? json(nullptr) : json(kSeverities[worst]);
    j["expected"] = std::move(ex);
    j["side_effect_kinds"] = SideEffectKinds(f);
    t["faults"].push_back(std::move(j));
  }
  return t.dump(2) + "\n";
}

}  // namespace vigil::agent
