// Fault scenarios: a ScenarioSpec turned into the Scenario one node's
// Simulator runs. Every node of a job gets its own FaultScenario built from
// the same spec and seed: the node a fault sits on shows its signature, and
// every node shows its job-wide effects (a straggler or a hung ring slows or
// stops the whole synchronous job; NaN loss reaches every rank).
//
// Strengths left unset in the spec are drawn from the seed (a few percent
// around the kind's default), from the seed only, so all nodes agree.
#ifndef VIGIL_AGENT_SIM_SCENARIOS_H_
#define VIGIL_AGENT_SIM_SCENARIOS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/sim/scenario_spec.h"
#include "agent/sim/simulator.h"

namespace vigil::agent {

// A fault with every default resolved and its strength drawn.
struct ResolvedFault {
  FaultSpec spec;  // node, gpu, dev and start filled in
  // Strength in the kind's unit (FaultKindHelp).
  double magnitude = 0;
  // Speed of the job once the fault has fully developed (1 = unaffected,
  // 0 = hung).
  double job_speed = 1;
  double hang_after_seconds = 0;  // packet_loss_hang
  int period_steps = 0;           // dataloader_stall
  bool ends_in_nan = false;       // grad_explosion
  int xid_code = 0;               // xid_storm: the code reported
  uint64_t seed = 0;              // of the fault's own randomness
};

// When a fault began on one node: the tick's time and the step the node
// was on.
struct FaultOnset {
  double ts = 0;
  int64_t step = 0;
};

// An incident the default rules should raise for a fault (truth files).
struct ExpectedIncident {
  // Acceptable incident kinds (rule names of rules/catalog.cc), preferred
  // first.
  std::vector<std::string> kinds;
  // "P0".."P3".
  std::string severity;
  // Localization the incident should carry.
  bool node = false;
  bool gpu = false;
  // Seconds after the fault's start at which the condition exists (the
  // hang of packet_loss_hang comes later than the loss).
  double after_seconds = 0;
  // rack_down: one incident naming exactly the fault's nodes
  // (FaultSpec::nodes) rather than one node.
  bool nodes = false;
};

// What the rules should make of `fault`: its incidents, in order (a later
// one may be the same incident rising in severity), and kinds that are
// consequences of it and so not false alarms.
std::vector<ExpectedIncident> ExpectedIncidents(const ResolvedFault& fault);
std::vector<std::string> SideEffectKinds(const ResolvedFault& fault);

// True if `fault` sits on one node (its spec's node; rack_down: its spec's
// nodes, the first being its node); false for job-wide kinds (loss_nan,
// grad_explosion, loss_oscillation, throughput drops, low_mfu,
// loss_scale_thrash), which every node shows alike.
bool IsNodeFault(const ResolvedFault& fault);
// True if `fault` shows its signature on `node`: any node for job-wide
// kinds.
bool FaultHitsNode(const ResolvedFault& fault, const std::string& node);
// True if `fault` stops the job for good (the job is cancelled or requeued
// when it ends): node_down, rack_down, gpu_fell_off_bus, ecc_dbe,
// packet_loss_hang, loss_nan, and grad_explosion ending in NaN.
bool FaultKillsJob(const ResolvedFault& fault);

// Resolves `spec`'s faults (defaults filled by ResolveFaultDefaults) with
// strengths drawn from `seed`. kInvalidArgument on an unknown kind.
absl::StatusOr<std::vector<ResolvedFault>> ResolveFaults(
    const ScenarioSpec& spec, uint64_t seed);

// Sets what the job must be for the faults to make sense (fp16 for
// loss_scale_thrash). Call on every node's options. A loss_scale_thrash
// fault continues the job's loss scale when it has one.
void AdjustJobOptions(const std::vector<ResolvedFault>& faults,
                      SimulatorOptions* options);

// The scenario of one node. Keeps per-node state (onsets, the loss scale):
// one instance per Simulator, used from one thread.
class FaultScenario : public Scenario {
 public:
  // The scenario node `node` runs.
  FaultScenario(std::vector<ResolvedFault> faults, std::string node);

  double StepSpeed(const ScenarioContext& ctx) const override;
  double BarrierShare(const ScenarioContext& ctx) const override;
  StepStall StallBefore(const ScenarioContext& ctx,
                        int64_t step) const override;
  void Apply(const ScenarioContext& ctx, NodeTick* tick) const override;

  // The faults, as resolved.
  const std::vector<ResolvedFault>& faults() const { return faults_; }
  // When fault `i` began on this node; nullopt if it has not yet.
  std::optional<FaultOnset> onset(size_t i) const { return state_[i].onset; }

 private:
  struct State {
    std::optional<FaultOnset> onset;
    // loss_scale_thrash: the scale after step `scale_step`.
    double scale = 65536;
    int64_t scale_step = -1;
    bool overflow = false;  // step `scale_step` overflowed
  };
  // Seconds since fault `i` began, or nullopt while it is not active
  // (not yet started, or over). Records the onset.
  std::optional<double> Elapsed(size_t i, const ScenarioContext& ctx) const;
  // Applies fault `i`, `e` seconds after its onset.
  void ApplyOne(size_t i, double e, const ScenarioContext& ctx,
                NodeTick* tick) const;
  // A standard normal draw fixed by (node, fault, ts, which).
  double Noise(size_t i, double ts, uint64_t which) const;

  const std::vector<ResolvedFault> faults_;
  const std::string node_;
  const uint64_t node_hash_;
  mutable std::vector<State> state_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SIM_SCENARIOS_H_
