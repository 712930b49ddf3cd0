#include "agent/simulator_collector.h"

#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "agent/sim/scenario_spec.h"
#include "agent/sim/scenarios.h"
#include "agent/sim/simulator.h"

namespace vigil::agent {
namespace {

// A SimulatorCollector that owns its simulator and the scenario the
// simulator reads.
class OwningSimulatorCollector : public Collector {
 public:
  OwningSimulatorCollector(std::unique_ptr<FaultScenario> scenario,
                           std::unique_ptr<Simulator> sim)
      : scenario_(std::move(scenario)), sim_(std::move(sim)), collector_(sim_.get()) {}

  std::string_view name() const override { return collector_.name(); }
  absl::Status Collect(Tick* tick) override { return collector_.Collect(tick); }

 private:
  const std::unique_ptr<FaultScenario> scenario_;
  const std::unique_ptr<Simulator> sim_;
  SimulatorCollector collector_;
};

}  // namespace

absl::Status SimulatorCollector::Collect(Tick* tick) {
  std::optional<SimFrame> frame = sim_->Tick(tick->ts);
  if (!frame.has_value()) return absl::OkStatus();  // node down
  tick->job = sim_->options().job;
  // The simulated node stands for one whose scheduler confirmed its job
  // (agent/job_identity.h); the actuator still checks with the real
  // scheduler before acting on it.
  tick->verified_job_id = sim_->options().job;
  tick->step = frame->step;
  tick->samples.reserve(tick->samples.size() + frame->samples.size());
  for (const SimSample& s : frame->samples) {
    tick->samples.push_back(Sample{sim_->series()[s.series], s.value});
  }
  return absl::OkStatus();
}

absl::StatusOr<SimulatedNode> MakeSimulatedNode(const SimulatedNodeOptions& o) {
  FaultOverrides overrides;
  overrides.node = o.fault_node;
  overrides.gpu = o.fault_gpu;
  overrides.at_step = o.fault_at_step;
  overrides.at_seconds = o.fault_at_seconds;
  absl::StatusOr<ScenarioSpec> spec = ScenarioSpecFromArg(o.scenario);
  if (!spec.ok()) return spec.status();
  if (absl::Status s =
          ResolveFaultDefaults(overrides, o.node, {}, o.gpus, o.gpus, &*spec);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<ResolvedFault>> faults = ResolveFaults(*spec, o.seed);
  if (!faults.ok()) return faults.status();
  auto scenario = std::make_unique<FaultScenario>(*faults, o.node);

  SimulatorOptions options;
  options.node = o.node;
  options.job = o.job;
  options.gpus = o.gpus;
  options.nics = o.gpus;
  options.seed = o.seed;
  options.start_step = o.start_step;
  AdjustJobOptions(*faults, &options);
  absl::StatusOr<Simulator> sim = Simulator::Create(options, scenario.get());
  if (!sim.ok()) return sim.status();
  SimulatedNode node;
  for (const ResolvedFault& f : *faults) {
    const FaultSpec& s = f.spec;
    std::string when =
        s.at_step.has_value()
            ? "at step " + std::to_string(*s.at_step)
            : "after " + std::to_string(static_cast<int>(*s.at_seconds)) + " s";
    std::string where = IsNodeFault(f)
                            ? s.node + " gpu " + std::to_string(*s.gpu) +
                                  (s.dev.empty() ? "" : " " + s.dev)
                            : "the whole job";
    char magnitude[32];
    std::snprintf(magnitude, sizeof magnitude, "%g", f.magnitude);
    node.faults.push_back("scenario " + spec->name + ": " + s.kind + " on " +
                          where + " " + when + " (magnitude " + magnitude + ")" +
                          (IsNodeFault(f) && s.node != o.node
                               ? " (job-wide effects only here)"
                               : ""));
  }
  node.collector = std::make_unique<OwningSimulatorCollector>(
      std::move(scenario), std::make_unique<Simulator>(std::move(*sim)));
  return node;
}

std::vector<std::pair<std::string, std::string>> SimulatedFaultKinds() {
  std::vector<std::pair<std::string, std::string>> kinds;
  for (const std::string& kind : FaultKindNames())
    kinds.emplace_back(kind, std::string(FaultKindHelp(kind)));
  return kinds;
}

}  // namespace vigil::agent
