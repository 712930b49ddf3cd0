// The incident engine against table-driven anomaly sequences: grouping,
// localisation, severity rise, inhibition, resolve/reopen and hints.
#include "rules/engine.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vigil {
namespace {

using K = AnomalyKind;
using C = HintCategory;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One input of a sequence: an anomaly of job "llama", or (advance) only a
// time step.
struct Ev {
  double ts = 0;
  K kind = K::kBaselineHigh;
  std::string node;
  std::optional<int> gpu;
  std::string dev;
  std::string metric;
  int tier = 1;
  double score = 0;
  double value = kNaN;
  std::string detail;
  bool cleared = false;
  bool advance = false;
};

Anomaly ToAnomaly(const Ev& e) {
  Anomaly a;
  a.kind = e.kind;
  a.cleared = e.cleared;
  a.tier = e.tier;
  a.job = "llama";
  a.node = e.node;
  a.gpu = e.gpu;
  a.dev = e.dev;
  a.ts = e.ts;
  a.step = static_cast<int64_t>(e.ts);
  a.metric = e.metric;
  a.value = e.value;
  a.score = e.score;
  a.detail = e.detail;
  return a;
}

std::vector<IncidentUpdate> Feed(IncidentEngine& engine,
                                 const std::vector<Ev>& events) {
  std::vector<IncidentUpdate> out;
  for (const Ev& e : events) {
    std::vector<IncidentUpdate> u =
        e.advance ? engine.Advance(e.ts) : engine.Process({ToAnomaly(e)});
    out.insert(out.end(), u.begin(), u.end());
  }
  return out;
}

std::string Describe(const std::vector<IncidentUpdate>& updates) {
  std::string s;
  for (const IncidentUpdate& u : updates) {
    s += std::string(UpdateTypeName(u.type)) + " " + u.incident.id + " " +
         u.incident.kind + " " +
         std::string(SeverityName(u.incident.severity)) +
         " node=" + u.incident.node + " ts=" + std::to_string(u.ts) + " | " +
         u.incident.summary + "\n";
  }
  return s;
}

// The expected final state of one incident.
struct Want {
  std::string kind;
  Severity severity;
  std::string node;
  std::optional<int> gpu;
  size_t evidence;
  C hint;
};

struct Case {
  std::string name;
  std::vector<Ev> events;
  std::vector<Want> incidents;
  std::vector<UpdateType> updates;
};

class EngineCaseTest : public testing::TestWithParam<Case> {};

TEST_P(EngineCaseTest, Incidents) {
  const Case& c = GetParam();
  IncidentEngine engine;
  const std::vector<IncidentUpdate> updates = Feed(engine, c.events);
  const std::vector<Incident> got = engine.Incidents();
  SCOPED_TRACE(Describe(updates));
  ASSERT_EQ(got.size(), c.incidents.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const Want& w = c.incidents[i];
    SCOPED_TRACE(got[i].id + " " + got[i].hint);
    EXPECT_EQ(got[i].kind, w.kind);
    EXPECT_EQ(SeverityName(got[i].severity), SeverityName(w.severity));
    EXPECT_EQ(got[i].node, w.node);
    EXPECT_EQ(got[i].gpu, w.gpu);
    EXPECT_EQ(got[i].evidence.size(), w.evidence);
    EXPECT_EQ(HintCategoryName(got[i].hint_category), HintCategoryName(w.hint));
    EXPECT_FALSE(got[i].summary.empty());
    EXPECT_FALSE(got[i].hint.empty());
  }
  std::vector<UpdateType> types;
  for (const IncidentUpdate& u : updates) types.push_back(u.type);
  EXPECT_EQ(types, c.updates);
}

using U = UpdateType;
constexpr Severity P0 = Severity::kP0, P1 = Severity::kP1, P2 = Severity::kP2,
                   P3 = Severity::kP3;

const Ev kThrottle{.ts = 100,
                   .kind = K::kThermalThrottle,
                   .node = "n3",
                   .gpu = 5,
                   .detail = "throttle reasons 0x40"};
const Ev kHang{.ts = 400,
               .kind = K::kJobHang,
               .value = 200,
               .detail = "step stalled 200 s"};

Ev At(Ev e, double ts) {
  e.ts = ts;
  return e;
}

Ev Throughput(double ts, std::string node, int tier, double drop) {
  return {.ts = ts,
          .kind = K::kThroughputDrop,
          .node = node,
          .metric = "train_tokens_per_second",
          .tier = tier,
          .score = drop};
}

INSTANTIATE_TEST_SUITE_P(
    Sequences, EngineCaseTest,
    testing::Values(
        Case{
            "ThrottleGroupsPeerSymptomsIntoOneIncident",
            {kThrottle,
             {.ts = 110,
              .kind = K::kPeerPowerLow,
              .node = "n3",
              .gpu = 5,
              .score = 60},
             {.ts = 115, .kind = K::kClockLow, .node = "n3", .gpu = 5},
             Throughput(200, "n1", 1, 0.2),
             Throughput(201, "n2", 1, 0.2),
             {.ts = 205, .kind = K::kNvlinkTrafficLow, .node = "n3", .gpu = 5}},
            {{"gpu_thermal_throttle", P2, "n3", 5, 6, C::kGpuHardware}},
            {U::kOpened, U::kEvidenceAdded, U::kEvidenceAdded,
             U::kEvidenceAdded, U::kEvidenceAdded, U::kEvidenceAdded}},
        Case{"SevereThroughputRaisesThrottleToP1",
             {kThrottle, Throughput(200, "n1", 2, 0.35)},
             {{"gpu_thermal_throttle", P1, "n3", 5, 2, C::kGpuHardware}},
             {U::kOpened, U::kSeverityRaised}},
        Case{"CauseTakesOverEarlierThroughputSymptom",
             {Throughput(100, "n1", 1, 0.2), At(kThrottle, 160)},
             {{"gpu_thermal_throttle", P2, "n3", 5, 2, C::kGpuHardware}},
             {U::kOpened, U::kEvidenceAdded}},
        Case{"PacketLossThenHangRisesToP0",
             {{.ts = 100,
               .kind = K::kNetDrops,
               .node = "n7",
               .dev = "mlx5_0",
               .metric = "net_drops_total",
               .value = 12},
              kHang},
             {{"network_packet_loss", P0, "n7", std::nullopt, 2,
               C::kCommunication}},
             {U::kOpened, U::kSeverityRaised}},
        Case{"HangThenPacketLossLocalisesTheHang",
             {kHang,
              {.ts = 420,
               .kind = K::kNetRetransmits,
               .node = "n7",
               .dev = "mlx5_1",
               .metric = "net_retransmits_total"}},
             {{"network_packet_loss", P0, "n7", std::nullopt, 2,
               C::kCommunication}},
             {U::kOpened, U::kEvidenceAdded}},
        Case{"NodeDownInhibitsItsGpusAndTheHang",
             {{.ts = 100, .kind = K::kNodeSilent, .node = "n4", .value = 30},
              {.ts = 110, .kind = K::kGpuMissing, .node = "n4", .gpu = 0},
              {.ts = 110, .kind = K::kGpuMissing, .node = "n4", .gpu = 1},
              {.ts = 111,
               .kind = K::kBaselineLow,
               .node = "n4",
               .gpu = 1,
               .metric = "gpu_power_watts"},
              At(kHang, 300)},
             {{"node_down", P0, "n4", std::nullopt, 5, C::kNode}},
             {U::kOpened, U::kEvidenceAdded, U::kEvidenceAdded,
              U::kEvidenceAdded, U::kEvidenceAdded}},
        Case{"HangInhibitsPowerAndTrafficNoise",
             {kHang,
              {.ts = 405, .kind = K::kPeerPowerLow, .node = "n1", .gpu = 0},
              {.ts = 406,
               .kind = K::kBaselineLow,
               .node = "n2",
               .gpu = 3,
               .metric = "gpu_nvlink_tx_bytes_total"},
              {.ts = 407, .kind = K::kMfuLow, .node = "n2"},
              Throughput(408, "n1", 2, 0.9)},
             {{"job_hang", P0, "", std::nullopt, 5, C::kPerformance}},
             {U::kOpened, U::kEvidenceAdded, U::kEvidenceAdded,
              U::kEvidenceAdded, U::kEvidenceAdded}},
        Case{"DifferentGpusAndDifferentFamiliesAreSeparateFaults",
             {kThrottle,
              {.ts = 101, .kind = K::kThermalThrottle, .node = "n3", .gpu = 6},
              {.ts = 102, .kind = K::kNetDrops, .node = "n7", .dev = "mlx5_0"},
              {.ts = 103,
               .kind = K::kNetRetransmits,
               .node = "n7",
               .dev = "mlx5_1"},
              {.ts = 104, .kind = K::kThermalThrottle, .node = "n7", .gpu = 2}},
             {{"gpu_thermal_throttle", P2, "n3", 5, 1, C::kGpuHardware},
              {"gpu_thermal_throttle", P2, "n3", 6, 1, C::kGpuHardware},
              {"network_packet_loss", P1, "n7", std::nullopt, 2,
               C::kCommunication},
              {"gpu_thermal_throttle", P2, "n7", 2, 1, C::kGpuHardware}},
             {U::kOpened, U::kOpened, U::kOpened, U::kEvidenceAdded,
              U::kOpened}},
        // The NaN raises the incident to P0 and names it: the response
        // (pause without checkpointing the NaN weights) is the NaN's.
        Case{"GradExplosionThenNanIsOneModelIncident",
             {{.ts = 100,
               .kind = K::kGradExplosion,
               .node = "n1",
               .metric = "train_grad_norm",
               .score = 8},
              {.ts = 130,
               .kind = K::kLossNan,
               .node = "n1",
               .metric = "train_loss"},
              {.ts = 130,
               .kind = K::kLossNan,
               .node = "n2",
               .metric = "train_loss"}},
             {{"loss_nan", P0, "", std::nullopt, 3, C::kModel}},
             {U::kOpened, U::kSeverityRaised, U::kEvidenceAdded}},
        Case{"LossDivergenceRenamedByGradExplosion",
             {{.ts = 100,
               .kind = K::kBaselineHigh,
               .node = "n1",
               .metric = "train_loss",
               .score = 5},
              {.ts = 110,
               .kind = K::kGradExplosion,
               .node = "n1",
               .metric = "train_grad_norm",
               .score = 8}},
             {{"grad_explosion", P1, "", std::nullopt, 2, C::kModel}},
             {U::kOpened, U::kSeverityRaised}},
        Case{"TemperatureRenamedByTheThrottleThatRaisesIt",
             {{.ts = 50,
               .kind = K::kBaselineHigh,
               .node = "n3",
               .gpu = 5,
               .metric = "gpu_temperature_celsius",
               .score = 4},
              kThrottle},
             {{"gpu_thermal_throttle", P2, "n3", 5, 2, C::kGpuHardware}},
             {U::kOpened, U::kSeverityRaised}},
        Case{"PowerFluctuationRenamedByPeerPowerLow",
             {{.ts = 50,
               .kind = K::kBaselineLow,
               .node = "n3",
               .gpu = 5,
               .metric = "gpu_power_watts",
               .score = -4},
              {.ts = 60, .kind = K::kPeerPowerLow, .node = "n3", .gpu = 5}},
             {{"gpu_power_low", P2, "n3", 5, 2, C::kGpuHardware}},
             {U::kOpened, U::kSeverityRaised}},
        Case{"StepTimeRenamedByThroughputTiers",
             {{.ts = 50,
               .kind = K::kBaselineHigh,
               .node = "n1",
               .metric = "train_step_time_seconds",
               .score = 4},
              Throughput(100, "n1", 1, 0.2), Throughput(150, "n1", 2, 0.4)},
             {{"throughput_drop_severe", P1, "", std::nullopt, 2,
               C::kPerformance}},
             {U::kOpened, U::kSeverityRaised, U::kSeverityRaised}},
        Case{"SlowdownInhibitsGenericBaselineDrops",
             {kThrottle,
              {.ts = 150,
               .kind = K::kBaselineLow,
               .node = "n1",
               .gpu = 0,
               .metric = "gpu_power_watts",
               .score = -4},
              {.ts = 151,
               .kind = K::kBaselineLow,
               .node = "n2",
               .gpu = 7,
               .metric = "gpu_sm_clock_mhz",
               .score = -4},
              {.ts = 152,
               .kind = K::kBaselineLow,
               .node = "n2",
               .dev = "mlx5_0",
               .metric = "net_rx_bytes_total",
               .score = -4}},
             {{"gpu_thermal_throttle", P2, "n3", 5, 4, C::kGpuHardware}},
             {U::kOpened, U::kEvidenceAdded, U::kEvidenceAdded,
              U::kEvidenceAdded}},
        Case{"BaselineDropWithoutSlowdownIsItsOwnIncident",
             {{.ts = 100,
               .kind = K::kBaselineLow,
               .node = "n1",
               .gpu = 0,
               .metric = "gpu_power_watts",
               .score = -4},
              {.ts = 101, .kind = K::kFragmentation, .node = "n2", .gpu = 1},
              {.ts = 102,
               .kind = K::kBaselineLow,
               .node = "n2",
               .gpu = 7,
               .metric = "gpu_power_watts",
               .score = -4}},
             {{"baseline_fluctuation", P3, "n1", 0, 1, C::kGeneral},
              {"gpu_memory_fragmentation", P2, "n2", 1, 1, C::kMemory},
              {"baseline_fluctuation", P3, "n2", 7, 1, C::kGeneral}},
             {U::kOpened, U::kOpened, U::kOpened}},
        Case{"ThroughputTierEscalationRenamesAndRaises",
             {Throughput(100, "n1", 1, 0.2), Throughput(150, "n1", 2, 0.4)},
             {{"throughput_drop_severe", P1, "", std::nullopt, 1,
               C::kPerformance}},
             {U::kOpened, U::kSeverityRaised}},
        Case{"ThroughputOfManyNodesIsOneIncident",
             {Throughput(100, "n1", 1, 0.2), Throughput(101, "n2", 1, 0.2),
              Throughput(102, "n3", 1, 0.2)},
             {{"throughput_drop", P2, "", std::nullopt, 3, C::kPerformance}},
             {U::kOpened, U::kEvidenceAdded, U::kEvidenceAdded}},
        Case{"DataPipelineExplainsThroughput",
             {{.ts = 100,
               .kind = K::kBaselineHigh,
               .node = "n2",
               .metric = "train_dataloader_wait_seconds",
               .score = 6,
               .value = 2.1},
              {.ts = 120,
               .kind = K::kPeriodicStall,
               .node = "n2",
               .detail = "power dips every 8 steps"},
              Throughput(200, "n1", 1, 0.2)},
             {{"dataloader_slow", P2, "n2", std::nullopt, 3, C::kDataPipeline}},
             {U::kOpened, U::kEvidenceAdded, U::kEvidenceAdded}},
        Case{"LossOscillationWithSlowDataloaderIsData",
             {{.ts = 100,
               .kind = K::kBaselineHigh,
               .node = "n2",
               .metric = "train_dataloader_wait_seconds",
               .score = 6},
              {.ts = 150,
               .kind = K::kLossOscillation,
               .node = "n1",
               .metric = "train_loss",
               .detail = "sign flips 12/15"}},
             {{"dataloader_slow", P2, "n2", std::nullopt, 1, C::kDataPipeline},
              {"loss_oscillation", P2, "", std::nullopt, 1, C::kDataPipeline}},
             {U::kOpened, U::kOpened}},
        // A throughput drop while a GPU's memory heads for OOM joins it.
        Case{"ThroughputDropJoinsTheOomForecast",
             {{.ts = 100, .kind = K::kOomForecast, .node = "n2", .gpu = 1},
              Throughput(200, "n1", 1, 0.2)},
             {{"oom_forecast", P2, "n2", 1, 2, C::kMemory}},
             {U::kOpened, U::kEvidenceAdded}},
        Case{"LossOscillationWithGradAnomalyIsModel",
             {{.ts = 100,
               .kind = K::kBaselineHigh,
               .node = "n2",
               .metric = "train_dataloader_wait_seconds",
               .score = 6},
              {.ts = 140,
               .kind = K::kGradExplosion,
               .node = "n1",
               .metric = "train_grad_norm",
               .score = 5},
              {.ts = 150,
               .kind = K::kLossOscillation,
               .node = "n1",
               .metric = "train_loss"}},
             {{"dataloader_slow", P2, "n2", std::nullopt, 1, C::kDataPipeline},
              {"grad_explosion", P1, "", std::nullopt, 2, C::kModel}},
             {U::kOpened, U::kOpened, U::kEvidenceAdded}},
        Case{"SymptomHintFromUnrelatedLowSeverityEvidence",
             {{.ts = 100,
               .kind = K::kBaselineHigh,
               .node = "n3",
               .gpu = 5,
               .metric = "gpu_temperature_celsius",
               .score = 4},
              Throughput(200, "n1", 1, 0.2)},
             {{"gpu_temperature_high", P3, "n3", 5, 1, C::kGpuHardware},
              {"throughput_drop", P2, "", std::nullopt, 1, C::kGpuHardware}},
             {U::kOpened, U::kOpened}},
        Case{"ResolveThenReopenKeepsTheId",
             {kThrottle,
              At(Ev{.kind = K::kThermalThrottle,
                    .node = "n3",
                    .gpu = 5,
                    .cleared = true},
                 200),
              {.ts = 499, .advance = true},
              {.ts = 501, .advance = true},
              At(kThrottle, 1000)},
             {{"gpu_thermal_throttle", P2, "n3", 5, 1, C::kGpuHardware}},
             {U::kOpened, U::kResolved, U::kReopened}},
        Case{"ReopenWindowExpiredOpensANewIncident",
             {kThrottle,
              At(Ev{.kind = K::kThermalThrottle,
                    .node = "n3",
                    .gpu = 5,
                    .cleared = true},
                 200),
              {.ts = 600, .advance = true},
              {.ts = 4200, .advance = true},
              At(kThrottle, 4300)},
             {{"gpu_thermal_throttle", P2, "n3", 5, 1, C::kGpuHardware}},
             {U::kOpened, U::kResolved, U::kOpened}},
        Case{"ActiveConditionNeverResolves",
             {kThrottle, {.ts = 100000, .advance = true}},
             {{"gpu_thermal_throttle", P2, "n3", 5, 1, C::kGpuHardware}},
             {U::kOpened}},
        Case{"FlappingConditionStaysOneEpisode",
             {kThrottle,
              At(Ev{.kind = K::kThermalThrottle,
                    .node = "n3",
                    .gpu = 5,
                    .cleared = true},
                 200),
              At(kThrottle, 350),
              At(Ev{.kind = K::kThermalThrottle,
                    .node = "n3",
                    .gpu = 5,
                    .cleared = true},
                 400),
              {.ts = 650, .advance = true},
              {.ts = 701, .advance = true}},
             {{"gpu_thermal_throttle", P2, "n3", 5, 1, C::kGpuHardware}},
             {U::kOpened, U::kResolved}}),
    [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(EngineTest, PacketLossToHangUpdatesCarryTheRise) {
  IncidentEngine engine;
  const auto updates = Feed(engine, {{.ts = 100,
                                      .kind = K::kNetDrops,
                                      .node = "n7",
                                      .dev = "mlx5_0",
                                      .metric = "net_drops_total",
                                      .value = 12},
                                     kHang});
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates[0].incident.id, updates[1].incident.id);
  EXPECT_EQ(updates[0].incident.id, "inc-000001");
  EXPECT_EQ(updates[0].incident.severity, Severity::kP1);
  EXPECT_EQ(updates[1].type, UpdateType::kSeverityRaised);
  EXPECT_EQ(updates[1].ts, 400);
  const Incident& inc = updates[1].incident;
  ASSERT_EQ(inc.severity_history.size(), 2u);
  EXPECT_EQ(inc.severity_history[0].severity, Severity::kP1);
  EXPECT_EQ(inc.severity_history[1].severity, Severity::kP0);
  EXPECT_EQ(inc.severity_history[1].rule, "job_hang");
  EXPECT_EQ(inc.ts, 100);
  EXPECT_EQ(inc.step, 100);
  EXPECT_EQ(inc.responses, (std::vector<Response>{
                               Response::kCheckpointThenPauseJob,
                               Response::kCordonNode, Response::kNotifySre}));
  EXPECT_NE(inc.summary.find("n7 mlx5_0"), std::string::npos) << inc.summary;
  EXPECT_NE(inc.summary.find("job hung"), std::string::npos) << inc.summary;
  EXPECT_NE(inc.hint.find("ibstat"), std::string::npos) << inc.hint;
  EXPECT_NE(inc.hint.find("collective"), std::string::npos) << inc.hint;
}

// Equal severity: a cause-specific rule names the incident rather than a
// generic baseline rule, whichever came first.
TEST(EngineTest, SpecificRuleNamesAnIncidentOfEqualSeverity) {
  RuleSet rules = DefaultRuleSet();
  for (Rule& r : rules.rules) {
    if (r.name == "gpu_temperature_high") r.severity = Severity::kP2;
  }
  const Ev temperature{.ts = 50,
                       .kind = K::kBaselineHigh,
                       .node = "n3",
                       .gpu = 5,
                       .metric = "gpu_temperature_celsius",
                       .score = 4};
  {
    IncidentEngine engine(rules);
    const auto u = Feed(engine, {temperature, kThrottle});
    ASSERT_EQ(u.size(), 2u) << Describe(u);
    EXPECT_EQ(u[1].type, UpdateType::kEvidenceAdded);
    EXPECT_EQ(u[1].incident.kind, "gpu_thermal_throttle");
    EXPECT_NE(u[1].incident.summary.find("throttling"), std::string::npos)
        << u[1].incident.summary;
    EXPECT_EQ(u[1].incident.ts, 50);
  }
  {
    IncidentEngine engine(rules);
    const auto u = Feed(engine, {kThrottle, At(temperature, 150)});
    ASSERT_EQ(u.size(), 2u) << Describe(u);
    EXPECT_EQ(u[1].incident.kind, "gpu_thermal_throttle");
  }
}

TEST(EngineTest, RiseRenamesTheIncidentAndKeepsItsFirstDetection) {
  IncidentEngine engine;
  const auto u = Feed(engine, {{.ts = 50,
                                .kind = K::kBaselineHigh,
                                .node = "n3",
                                .gpu = 5,
                                .metric = "gpu_temperature_celsius",
                                .score = 4},
                               kThrottle});
  ASSERT_EQ(u.size(), 2u) << Describe(u);
  const Incident& inc = u[1].incident;
  EXPECT_EQ(u[1].type, UpdateType::kSeverityRaised);
  EXPECT_EQ(inc.kind, "gpu_thermal_throttle");
  EXPECT_EQ(inc.severity, Severity::kP2);
  EXPECT_EQ(inc.ts, 50);
  EXPECT_EQ(inc.step, 50);
  EXPECT_NE(inc.summary.find("Thermal/power throttling on n3 gpu5"),
            std::string::npos)
      << inc.summary;
  EXPECT_EQ(inc.hint_category, HintCategory::kGpuHardware);
  EXPECT_EQ(inc.responses, (std::vector<Response>{Response::kDiagnosticReport,
                                                  Response::kLog}));
  ASSERT_EQ(inc.severity_history.size(), 2u);
  EXPECT_EQ(inc.severity_history[0].rule, "gpu_temperature_high");
  EXPECT_EQ(inc.severity_history[1].rule, "gpu_thermal_throttle");
}

TEST(EngineTest, ResponsesBySeverityAndLocalisation) {
  IncidentEngine engine;
  auto u = Feed(
      engine,
      {{.ts = 1, .kind = K::kLossNan, .node = "n1", .metric = "train_loss"}});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.responses,
            std::vector<Response>{Response::kPauseJob});
  EXPECT_EQ(u[0].incident.node, "");
  u = Feed(engine, {kHang});
  ASSERT_EQ(u.size(), 1u);
  // Not localised: no node to cordon.
  EXPECT_EQ(u[0].incident.responses,
            std::vector<Response>{Response::kCheckpointThenPauseJob});
  u = Feed(engine, {{.ts = 500, .kind = K::kEccDbe, .node = "n5", .gpu = 2}});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.responses,
            (std::vector<Response>{Response::kCheckpointThenPauseJob,
                                   Response::kCordonNode}));
}

TEST(EngineTest, HintsAreConcrete) {
  struct HintCase {
    Ev ev;
    std::string needle;
  };
  for (const HintCase& h : std::vector<HintCase>{
           {{.ts = 1, .kind = K::kFragmentation, .node = "n1", .gpu = 0},
            "expandable_segments:True"},
           {{.ts = 1, .kind = K::kFragmentation, .node = "n1", .gpu = 0},
            "torch.cuda.empty_cache()"},
           {{.ts = 1, .kind = K::kGradExplosion, .node = "n1"}, "clip"},
           {{.ts = 1, .kind = K::kThermalThrottle, .node = "n3", .gpu = 5},
            "cooling"},
           {{.ts = 1, .kind = K::kThermalThrottle, .node = "n3", .gpu = 5},
            "n3 gpu5"},
           {{.ts = 1,
           .kind = K::kXid,
           .node = "n3",
           .gpu = 1,
           .detail = "xid 13"},
            "CUDA_LAUNCH_BLOCKING"},
           {{.ts = 1, .kind = K::kNodeSilent, .node = "n9"}, "BMC"},
           {{.ts = 1, .kind = K::kOomForecast, .node = "n1", .gpu = 2},
            "activation checkpointing"},
           {{.ts = 1, .kind = K::kLossOscillation, .node = "n1"},
            "learning rate"},
           {kHang, "py-spy"},
       }) {
    IncidentEngine engine;
    const auto u = Feed(engine, {h.ev});
    ASSERT_EQ(u.size(), 1u);
    EXPECT_NE(u[0].incident.hint.find(h.needle), std::string::npos)
        << u[0].incident.kind << ": " << u[0].incident.hint;
  }
}

TEST(EngineTest, XidSeverityByCode) {
  struct XidCase {
    std::string detail;
    std::string kind;
    Severity severity;
  };
  for (const XidCase& x : std::vector<XidCase>{
           {"xid 79", "xid_fatal", Severity::kP0},
           {"xid 48", "xid_fatal", Severity::kP0},
           {"xid 64", "xid_fatal", Severity::kP0},
           {"xid 63", "xid_gpu_error", Severity::kP1},
           {"xid 13", "xid_app_error", Severity::kP2},
           {"xid 31", "xid_app_error", Severity::kP2},
           {"xid 43", "xid_app_error", Severity::kP2},
           {"xid 999", "xid", Severity::kP1},
           {"", "xid", Severity::kP1},
       }) {
    IncidentEngine engine;
    const auto u = Feed(engine, {{.ts = 1,
                                  .kind = K::kXid,
                                  .node = "n1",
                                  .gpu = 0,
                                  .detail = x.detail}});
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].incident.kind, x.kind) << x.detail;
    EXPECT_EQ(u[0].incident.severity, x.severity) << x.detail;
  }
}

// New rules (a config reload) apply to what opens next; an incident
// already open keeps the rule that opened it; a disabled rule opens
// nothing more (the anomaly takes the next rule that matches).
TEST(EngineTest, ReplacedRulesApplyToNewIncidents) {
  IncidentEngine engine;
  auto u = Feed(engine, {{.ts = 1, .kind = K::kXid, .node = "n1", .gpu = 0,
                          .detail = "xid 13"}});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.severity, Severity::kP2);
  const Incident first = u[0].incident;

  absl::StatusOr<RuleSet> next = LoadRuleSet(R"({"rules": [
      {"name": "xid_app_error", "severity": "P1", "summary": "reloaded: {detail} on {where}"},
      {"name": "xid_fatal", "enabled": false}]})");
  ASSERT_TRUE(next.ok()) << next.status();
  engine.SetRules(*next);
  EXPECT_FALSE(engine.rules().rules.empty());

  u = Feed(engine, {{.ts = 2, .kind = K::kXid, .node = "n2", .gpu = 0, .detail = "xid 13"},
                    {.ts = 3, .kind = K::kXid, .node = "n3", .gpu = 0, .detail = "xid 79"}});
  ASSERT_EQ(u.size(), 2u) << Describe(u);
  EXPECT_EQ(u[0].incident.kind, "xid_app_error");
  EXPECT_EQ(u[0].incident.severity, Severity::kP1);
  EXPECT_EQ(u[0].incident.summary, "reloaded: xid 13 on job llama");
  EXPECT_EQ(u[1].incident.kind, "xid") << "xid_fatal is disabled: the generic rule takes it";

  const std::vector<Incident> all = engine.Incidents();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, first.id);
  EXPECT_EQ(all[0].severity, Severity::kP2);
  EXPECT_EQ(all[0].summary, first.summary);
}

// Rules are told apart by name across a reload: a node that falls silent
// after it joins the node-down incident its job's first silent node
// opened before it, as it would without the reload.
TEST(EngineTest, ANodeDownIncidentStillGroupsAcrossAReload) {
  IncidentEngine engine;
  auto u = Feed(engine, {{.ts = 10, .kind = K::kNodeSilent, .node = "n1"}});
  ASSERT_EQ(u.size(), 1u) << Describe(u);
  const std::string id = u[0].incident.id;
  engine.SetRules(DefaultRuleSet());
  u = Feed(engine, {{.ts = 20, .kind = K::kNodeSilent, .node = "n2"}});
  ASSERT_EQ(u.size(), 1u) << Describe(u);
  EXPECT_NE(u[0].type, UpdateType::kOpened) << Describe(u);
  EXPECT_EQ(u[0].incident.id, id);
  EXPECT_EQ(engine.Incidents().size(), 1u);
}

TEST(EngineTest, EvidenceIsCapped) {
  RuleSet rules = DefaultRuleSet();
  rules.settings.max_evidence = 3;
  IncidentEngine engine(rules);
  std::vector<Ev> events;
  for (int i = 0; i < 5; ++i) {
    events.push_back(Throughput(100 + i, "n" + std::to_string(i), 1, 0.2));
  }
  const auto u = Feed(engine, events);
  const auto incidents = engine.Incidents();
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_EQ(incidents[0].evidence.size(), 3u);
  EXPECT_EQ(incidents[0].evidence_dropped, 2);
  EXPECT_EQ(u.size(), 3u);  // opened + 2 evidence_added
}

TEST(EngineTest, EvidenceKeepsTheBaselineAtDetection) {
  IncidentEngine engine;
  Ev e{.ts = 100,
       .kind = K::kBaselineHigh,
       .node = "n2",
       .metric = "train_dataloader_wait_seconds",
       .score = 5,
       .value = 2};
  Anomaly a = ToAnomaly(e);
  a.series_id = 42;
  a.baseline_mean = 0.1;
  a.baseline_sigma = 0.02;
  engine.Process({a});
  const auto incidents = engine.Incidents();
  ASSERT_EQ(incidents.size(), 1u);
  ASSERT_EQ(incidents[0].evidence.size(), 1u);
  const Evidence& ev = incidents[0].evidence[0];
  EXPECT_EQ(ev.anomaly.series_id, 42u);
  EXPECT_EQ(ev.anomaly.baseline_mean, 0.1);
  EXPECT_EQ(ev.anomaly.baseline_sigma, 0.02);
  EXPECT_EQ(ev.rule, "dataloader_slow");
  EXPECT_TRUE(ev.active);
}

TEST(EngineTest, ReplayIsDeterministic) {
  const std::vector<Ev> events = {
      kThrottle,
      {.ts = 101, .kind = K::kNetDrops, .node = "n7", .dev = "mlx5_0"},
      Throughput(150, "n1", 2, 0.4),
      {.ts = 160, .kind = K::kFragmentation, .node = "n2", .gpu = 1},
      kHang,
      {.ts = 900, .kind = K::kJobHang, .cleared = true},
      {.ts = 5000, .advance = true},
  };
  IncidentEngine a, b;
  EXPECT_EQ(Describe(Feed(a, events)), Describe(Feed(b, events)));
}

TEST(EngineTest, DisabledRuleOpensNothing) {
  RuleSet rules = DefaultRuleSet();
  for (Rule& r : rules.rules) {
    if (r.name == "mfu_low") r.enabled = false;
  }
  IncidentEngine engine(rules);
  EXPECT_TRUE(
      Feed(engine, {{.ts = 1, .kind = K::kMfuLow, .node = "n1"}}).empty());
}

}  // namespace
}  // namespace vigil

namespace vigil {
namespace {

// NVLink trouble on n001 gpu3 also lowers its peers' NVLink traffic, so the
// incident spans the node; gpu3's XID 74 that follows is the same fault.
TEST(EngineGroupingTest, GpuRedLineJoinsNodeWideIncidentInvolvingThatGpu) {
  IncidentEngine engine;
  auto anomaly = [](AnomalyKind kind, int gpu, double ts) {
    Anomaly a;
    a.kind = kind;
    a.job = "llm";
    a.node = "n001";
    a.gpu = gpu;
    a.ts = ts;
    return a;
  };
  std::vector<Anomaly> first = {anomaly(AnomalyKind::kNvlinkErrors, 3, 100),
                                anomaly(AnomalyKind::kNvlinkTrafficLow, 2, 105)};
  engine.Process(first);
  Anomaly xid = anomaly(AnomalyKind::kXid, 3, 130);
  xid.value = 74;
  xid.detail = "xid 74";
  engine.Process({xid});
  std::vector<Incident> incidents = engine.Incidents();
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_EQ(incidents[0].severity, Severity::kP0);
  EXPECT_EQ(incidents[0].node, "n001");
}

}  // namespace
}  // namespace vigil
