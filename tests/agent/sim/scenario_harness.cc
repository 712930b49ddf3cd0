#include "tests/agent/sim/scenario_harness.h"

#include <cmath>
#include <memory>
#include <utility>

#include "agent/sim/cluster_sim.h"
#include "agent/sim/simulator.h"
#include "gtest/gtest.h"

namespace vigil::agent {

HarnessRun RunScenario(const std::string& name, const HarnessOptions& options) {
  absl::StatusOr<ScenarioSpec> spec = ScenarioSpecFromName(name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return RunSpec(*spec, options);
}

HarnessRun RunSpec(ScenarioSpec spec, const HarnessOptions& options) {
  HarnessRun run;
  std::vector<std::string> names = ClusterNodeNames(options.nodes);
  absl::Status s =
      ResolveFaultDefaults(options.overrides, names[options.nodes > 1 ? 1 : 0],
                           names, options.gpus, options.gpus, &spec);
  EXPECT_TRUE(s.ok()) << s;
  absl::StatusOr<std::vector<ResolvedFault>> faults =
      ResolveFaults(spec, options.seed);
  EXPECT_TRUE(faults.ok()) << faults.status();
  run.faults = *faults;
  std::vector<std::unique_ptr<FaultScenario>> scenarios;
  std::vector<Simulator> sims;
  for (const std::string& name : names) {
    scenarios.push_back(std::make_unique<FaultScenario>(*faults, name));
    SimulatorOptions so;
    so.node = name;
    so.gpus = options.gpus;
    so.nics = options.gpus;
    so.seed = options.seed;
    so.start_step = options.start_step;
    AdjustJobOptions(*faults, &so);
    absl::StatusOr<Simulator> sim =
        Simulator::Create(so, scenarios.back().get());
    EXPECT_TRUE(sim.ok()) << sim.status();
    sims.push_back(std::move(*sim));
    run.nodes.push_back({name, {}, {}, {}});
  }
  for (int t = 0; t < options.ticks; ++t) {
    for (size_t n = 0; n < sims.size(); ++n) {
      // A few ms apart, as real agents are.
      std::optional<SimFrame> f = sims[n].Tick(kHarnessStart + t + 0.004 * n);
      if (!f.has_value()) continue;
      NodeFrames& out = run.nodes[n];
      out.ts.push_back(f->ts);
      out.steps.push_back(f->step);
      std::map<std::string, double> v;
      for (const SimSample& sample : f->samples) {
        const SeriesKey& key = sims[n].series()[sample.series];
        v[key.labels.empty() ? key.metric : key.ToString()] = sample.value;
      }
      out.values.push_back(std::move(v));
    }
  }
  for (size_t i = 0; i < faults->size(); ++i) {
    size_t n = 0;
    while (n + 1 < names.size() && names[n] != (*faults)[i].spec.node) ++n;
    run.onsets.push_back(scenarios[n]->onset(i));
  }
  return run;
}

std::string GpuKey(const char* metric, int gpu) {
  return std::string(metric) + "{gpu=\"" + std::to_string(gpu) + "\"}";
}

std::string DevKey(const char* metric, const std::string& dev) {
  return std::string(metric) + "{dev=\"" + dev + "\"}";
}

double Mean(const NodeFrames& n, const std::string& key, size_t from,
            size_t to) {
  double sum = 0;
  int count = 0;
  for (size_t i = from; i < to && i < n.values.size(); ++i) {
    auto it = n.values[i].find(key);
    if (it == n.values[i].end()) continue;
    sum += it->second;
    ++count;
  }
  return count > 0 ? sum / count : NAN;
}

double Increase(const NodeFrames& n, const std::string& key, size_t from,
                size_t to) {
  return n.values.at(to).at(key) - n.values.at(from).at(key);
}

}  // namespace vigil::agent
