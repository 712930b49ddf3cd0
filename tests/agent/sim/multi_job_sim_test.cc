// vigil-sim --multi-job's library: the planned life of the cluster, and the
// frames it streams checked against its truth file.
#include "agent/sim/multi_job_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "agent/sim/cluster_sim.h"
#include "agent/sim/scenario_spec.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vigil::agent {
namespace {

using json = nlohmann::json;

constexpr double kDay = 86400;

// A week of the default 64-node cluster, planned (not simulated).
const ClusterPlan& WeekPlan() {
  static const ClusterPlan* plan = [] {
    MultiJobOptions options;
    options.seconds = 7 * kDay;
    absl::StatusOr<ClusterPlan> p = PlanCluster(options);
    EXPECT_TRUE(p.ok()) << p.status();
    return new ClusterPlan(std::move(*p));
  }();
  return *plan;
}

TEST(MultiJobPlanTest, ANodeRunsOneJobAtATime) {
  const ClusterPlan& plan = WeekPlan();
  std::map<int, std::vector<const PlannedRun*>> by_node;
  for (const PlannedRun& r : plan.runs) {
    EXPECT_LT(r.start_ts, r.end_ts) << r.id;
    for (int n : r.nodes) by_node[n].push_back(&r);
  }
  for (auto& [node, runs] : by_node) {
    std::sort(runs.begin(), runs.end(),
              [](const PlannedRun* a, const PlannedRun* b) {
                return a->start_ts < b->start_ts;
              });
    for (size_t i = 1; i < runs.size(); ++i) {
      const PlannedRun& prev = *runs[i - 1];
      double free =
          prev.end_ts + (prev.agent == AgentStyle::kLinger ? 300 : 0) + 60;
      EXPECT_GE(runs[i]->start_ts, free)
          << "n" << node << ": " << prev.id << " then " << runs[i]->id;
    }
  }
  // Segments: contiguous, and runs where the plan says.
  for (size_t n = 0; n < plan.segments.size(); ++n) {
    const std::vector<NodeSegment>& segs = plan.segments[n];
    ASSERT_FALSE(segs.empty());
    EXPECT_TRUE(std::isinf(segs.back().to));
    for (size_t i = 1; i < segs.size(); ++i) {
      EXPECT_EQ(segs[i].from, segs[i - 1].to) << n;
      if (segs[i].kind == NodeSegment::kLinger) {
        EXPECT_EQ(segs[i - 1].kind, NodeSegment::kRun);
        EXPECT_LE(segs[i].to - segs[i].from, 300 + 1e-6);
      }
    }
  }
}

TEST(MultiJobPlanTest, AWeekHoldsEveryFaultKindAndALemon) {
  const ClusterPlan& plan = WeekPlan();
  EXPECT_GT(plan.busy_fraction, 0.8);
  EXPECT_LT(plan.busy_fraction, 0.95);
  std::map<std::string, int> kinds;
  for (const PlannedFault& f : plan.faults) ++kinds[f.fault.spec.kind];
  for (const std::string& kind : FaultKindNames()) {
    EXPECT_GE(kinds[kind], 4) << kind;
  }
  std::set<int> xid_codes;
  for (size_t i = 0; i < plan.faults.size(); ++i) {
    const PlannedFault& f = plan.faults[i];
    const PlannedRun& run = plan.runs[f.run];
    const std::string& kind = f.fault.spec.kind;
    EXPECT_EQ(run.fault, static_cast<int>(i));  // one fault per run
    if (kind == "low_mfu") {  // the job's property from its start
      EXPECT_EQ(f.start_ts, run.start_ts);
      EXPECT_EQ(f.end_ts, run.end_ts);
      EXPECT_EQ(run.resumed_from, -1);
      continue;
    }
    EXPECT_GE(f.start_ts, run.start_ts + 1800) << f.id;
    double d = *f.fault.spec.duration_seconds;
    EXPECT_GE(d, 1200);
    EXPECT_LE(d, 2400);
    if (FaultKillsJob(f.fault)) {
      EXPECT_NEAR(run.end_ts, f.start_ts + d, 1e-6) << f.id;
      EXPECT_TRUE(run.end == JobEnd::kPreempted ||
                  run.end == JobEnd::kCancelled || run.end == JobEnd::kRunning)
          << f.id;
    } else {
      EXPECT_LE(f.start_ts + d + 900, run.end_ts + 1e-6) << f.id;
    }
    if (IsNodeFault(f.fault)) {
      std::vector<std::string> on = f.fault.spec.nodes;
      if (on.empty()) on = {f.fault.spec.node};
      for (const std::string& node : on) {
        int n = std::stoi(node.substr(1));
        EXPECT_NE(std::find(run.nodes.begin(), run.nodes.end(), n),
                  run.nodes.end())
            << f.id << " " << node;
      }
    }
    if (kind == "rack_down") {
      EXPECT_GE(run.nodes.size(), 8u);
      EXPECT_GE(f.fault.spec.nodes.size(), 2u);
      EXPECT_LE(f.fault.spec.nodes.size(), 5u);
    }
    if (kind == "loss_scale_thrash") EXPECT_TRUE(run.shape.fp16);
    if (kind == "xid_storm") xid_codes.insert(f.fault.xid_code);
  }
  EXPECT_TRUE(xid_codes.count(94));
  EXPECT_GE(xid_codes.size(), 2u);
  // The lemon: one node's GPU faulting in 3 different jobs within 3 days.
  ASSERT_EQ(plan.lemons.size(), 1u);
  const PlannedLemon& lemon = plan.lemons[0];
  ASSERT_EQ(lemon.faults.size(), 3u);
  std::set<std::string> jobs;
  for (int i : lemon.faults) {
    const PlannedFault& f = plan.faults[i];
    EXPECT_TRUE(f.lemon);
    EXPECT_EQ(f.fault.spec.node, absl::StrFormat("n%03d", lemon.node));
    EXPECT_EQ(f.fault.spec.gpu, lemon.gpu);
    EXPECT_EQ(f.fault.spec.kind, plan.faults[lemon.faults[0]].fault.spec.kind);
    jobs.insert(plan.runs[f.run].job);
  }
  EXPECT_EQ(jobs.size(), 3u);
  EXPECT_LE(plan.faults[lemon.faults[2]].start_ts -
                plan.faults[lemon.faults[0]].start_ts,
            3 * kDay);
}

TEST(MultiJobPlanTest, JobsLiveEveryKindOfLife) {
  const ClusterPlan& plan = WeekPlan();
  std::map<JobEnd, int> ends;
  std::map<AgentStyle, int> agents;
  std::set<size_t> sizes;
  int noisy = 0, fp16 = 0, markers = 0, slow = 0, requeues = 0,
      continuations = 0;
  for (const PlannedRun& r : plan.runs) {
    ++ends[r.end];
    ++agents[r.agent];
    sizes.insert(r.nodes.size());
    noisy += r.noisy;
    fp16 += r.shape.fp16;
    markers += r.shape.report_phase;
    slow += r.shape.step_seconds >= 20;
    EXPECT_GE(r.shape.step_seconds, 0.5);
    EXPECT_LE(r.shape.step_seconds, 60);
    EXPECT_GE(r.shape.checkpoint_seconds, 10);
    EXPECT_LE(r.shape.checkpoint_seconds, 120);
    EXPECT_GE(r.checkpoint_every_s, 1200);
    EXPECT_LE(r.checkpoint_every_s, 3600);
    if (r.resumed_from < 0) continue;
    const PlannedRun& prev = plan.runs[r.resumed_from];
    EXPECT_LE(prev.end_ts + 120, r.start_ts) << r.id;
    EXPECT_EQ(prev.family, r.family) << r.id;
    if (prev.job == r.job) {  // requeued: same name, after a preemption
      ++requeues;
      EXPECT_EQ(prev.end, JobEnd::kPreempted) << r.id;
      EXPECT_LE(r.start_ts, prev.end_ts + 1800 + 6 * 3600) << r.id;
    } else {  // the family's next job
      ++continuations;
      EXPECT_EQ(r.job.substr(0, r.family.size() + 2), r.family + "-r");
      EXPECT_TRUE(prev.end == JobEnd::kFailed || prev.end == JobEnd::kCancelled)
          << r.id;
    }
  }
  for (JobEnd e : {JobEnd::kCompleted, JobEnd::kCancelled, JobEnd::kFailed,
                   JobEnd::kPreempted, JobEnd::kRunning}) {
    EXPECT_GT(ends[e], 0) << JobEndName(e);
  }
  const double n = plan.runs.size();
  EXPECT_NEAR(agents[AgentStyle::kMarker] / n, 0.5, 0.1);
  EXPECT_NEAR(agents[AgentStyle::kLinger] / n, 0.25, 0.1);
  EXPECT_NEAR(noisy / n, 0.2, 0.07);
  EXPECT_NEAR(fp16 / n, 0.3, 0.07);
  EXPECT_NEAR(markers / n, 0.8, 0.07);
  EXPECT_GT(slow, 0);
  EXPECT_GT(requeues, 10);
  EXPECT_GT(continuations, 5);
  EXPECT_TRUE(sizes.count(1) && sizes.count(8) && sizes.count(16));
  EXPECT_LE(*sizes.rbegin(), 32u);
}

TEST(MultiJobPlanTest, DeterministicPerSeed) {
  MultiJobOptions options;
  options.nodes = 16;
  options.seconds = 2 * kDay;
  ClusterPlan a = *PlanCluster(options), b = *PlanCluster(options);
  options.seed = 2;
  ClusterPlan c = *PlanCluster(options);
  ASSERT_EQ(a.runs.size(), b.runs.size());
  for (size_t i = 0; i < a.runs.size(); ++i) {
    EXPECT_EQ(a.runs[i].id, b.runs[i].id);
    EXPECT_EQ(a.runs[i].start_ts, b.runs[i].start_ts);
  }
  bool differ = a.runs.size() != c.runs.size();
  for (size_t i = 0; !differ && i < a.runs.size(); ++i) {
    differ = a.runs[i].id != c.runs[i].id;
  }
  EXPECT_TRUE(differ);
  options.seconds = 10;
  EXPECT_FALSE(PlanCluster(options).ok());
}

// A small cluster simulated: the output, parsed, and its truth.
struct Simulated {
  std::string text;
  std::string truth_text;
  std::vector<json> frames;
  json truth;
};

MultiJobOptions SmallCluster(uint64_t seed) {
  MultiJobOptions options;
  options.nodes = 10;
  options.gpus = 2;
  options.seconds = 10 * 3600;
  options.interval_seconds = 30;
  options.seed = seed;
  options.faults_per_day = 48;
  return options;
}

Simulated Simulate(const MultiJobOptions& options, bool parse = true) {
  Simulated out;
  absl::StatusOr<MultiJobResult> result = SimulateMultiJob(
      options, [&](std::string_view s) { out.text.append(s); });
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return out;
  out.truth_text = MultiJobTruthJson(options, *result);
  out.truth = json::parse(out.truth_text);
  EXPECT_EQ(out.truth["frames"], result->frames);
  if (!parse) return out;
  std::istringstream lines(out.text);
  std::string line;
  while (std::getline(lines, line)) {
    out.frames.push_back(json::parse(line));
  }
  EXPECT_EQ(out.frames.size(), result->frames);
  return out;
}

TEST(MultiJobSimTest, SameSeedSameBytesOtherSeedOtherBytes) {
  MultiJobOptions options = SmallCluster(3);
  options.seconds = 4 * 3600;
  Simulated a = Simulate(options, false), b = Simulate(options, false);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.truth_text, b.truth_text);
  options.seed = 4;
  Simulated c = Simulate(options, false);
  EXPECT_NE(a.text, c.text);
}

// Everything a node did, from the frames.
struct NodeFrame {
  double ts;
  std::string job;
  std::optional<int64_t> step;
  const json* frame;
};

double Sample(const json& frame, const std::string& metric, int gpu = -1) {
  for (const json& s : frame["samples"]) {
    if (s["m"] != metric) continue;
    if (gpu >= 0 && (!s.contains("gpu") || s["gpu"] != gpu)) continue;
    return s["v"].is_number() ? s["v"].get<double>() : NAN;
  }
  return NAN;
}

// Seeds whose 10 hours hold requeues, continuations, every agent behaviour
// and (8) node_down, gpu_fell_off_bus and ecc_dbe.
class MultiJobFramesTest : public testing::TestWithParam<uint64_t> {};

TEST_P(MultiJobFramesTest, FollowTheTruthAndTheJobLifecycle) {
  const MultiJobOptions options = SmallCluster(GetParam());
  Simulated sim = Simulate(options);
  const json& truth = sim.truth;
  ASSERT_EQ(truth["mode"], "multi_job");
  EXPECT_EQ(truth["node_days"], 10 * 10 / 24.0);
  const double start = options.start_ts;
  const double end = start + options.seconds;
  const double interval = options.interval_seconds;

  std::map<std::string, json> runs;  // by run id
  for (const json& r : truth["jobs"]) runs[r["run"]] = r;
  auto on_node = [](const json& run, const std::string& node) {
    for (const json& n : run["nodes"]) {
      if (n == node) return true;
    }
    return false;
  };
  auto run_end = [&](const json& run) {
    return run["end_ts"].is_null() ? 1e300 : run["end_ts"].get<double>();
  };

  std::map<std::string, std::vector<NodeFrame>> by_node;
  std::map<std::string, std::string> last_counter_key;
  std::map<std::string, double> counters;  // node|series -> last value
  double last_ts = 0;
  for (const json& f : sim.frames) {
    const double ts = f["ts"];
    EXPECT_GE(ts, last_ts);
    last_ts = ts;
    const std::string node = f["node"], job = f["job"];
    NodeFrame nf{ts, job, std::nullopt, &f};
    if (f.contains("step")) nf.step = f["step"].get<int64_t>();
    by_node[node].push_back(nf);
    // Hardware counters belong to the node: monotonic across jobs.
    for (const json& s : f["samples"]) {
      std::string m = s["m"];
      if (!m.ends_with("_total") || m.starts_with("torch_")) continue;
      std::string key = node + "|" + m + "|" +
                        (s.contains("gpu") ? s["gpu"].dump() : "") +
                        (s.contains("dev") ? s["dev"].get<std::string>() : "");
      double v = s["v"];
      auto it = counters.find(key);
      if (it != counters.end()) {
        EXPECT_GE(v, it->second) << key << " at " << ts - start;
      }
      counters[key] = v;
    }
  }

  int markers = 0, lingers = 0, vanishes = 0, resumed = 0, idle = 0;
  for (const auto& [node, frames] : by_node) {
    // Map every frame to what the node was doing.
    std::string prev_run;        // run of the previous run frame
    int64_t prev_run_step = -1;  // its step
    double prev_run_loss = NAN;  // its train_loss (linger repeats it)
    for (size_t i = 0; i < frames.size(); ++i) {
      const NodeFrame& nf = frames[i];
      const json& f = *nf.frame;
      if (nf.job == "idle") {
        ++idle;
        EXPECT_FALSE(nf.step.has_value());
        for (const json& s : f["samples"]) {
          std::string m = s["m"];
          EXPECT_FALSE(m.starts_with("train_") || m.starts_with("torch_")) << m;
        }
        EXPECT_EQ(Sample(f, "gpu_utilization_ratio", 0), 0);
        EXPECT_LT(Sample(f, "gpu_power_watts", 0), 90);
        for (const auto& [id, r] : runs) {
          if (!on_node(r, node)) continue;
          EXPECT_FALSE(r["start_ts"].get<double>() <= nf.ts &&
                       nf.ts < run_end(r))
              << node << " idle at " << nf.ts - start << " during " << id;
        }
      } else {
        // Exactly one run of this job on this node covers the frame (its
        // lifetime, plus 300 s for a linger agent).
        const json* run = nullptr;
        int matches = 0;
        for (const auto& [id, r] : runs) {
          if (r["job"] != nf.job || !on_node(r, node)) continue;
          double linger = r["agent"] == "linger" ? 300 : 0;
          if (r["start_ts"].get<double>() <= nf.ts &&
              nf.ts < run_end(r) + linger) {
            run = &r;
            ++matches;
          }
        }
        ASSERT_EQ(matches, 1)
            << node << " " << nf.job << " at " << nf.ts - start;
        ASSERT_TRUE(nf.step.has_value());
        const std::string id = (*run)["run"];
        if (nf.ts >= run_end(*run)) {  // lingering: frozen, process gone
          ++lingers;
          EXPECT_EQ(id, prev_run);
          EXPECT_EQ(*nf.step, prev_run_step);
          EXPECT_LE(nf.ts - run_end(*run), 300);
          for (int g = 0; g < options.gpus; ++g) {
            EXPECT_EQ(Sample(f, "gpu_utilization_ratio", g), 0);
            EXPECT_LT(Sample(f, "gpu_memory_used_bytes", g), 0.6 * (1 << 30));
          }
          double loss = Sample(f, "train_loss");
          if (!std::isnan(prev_run_loss)) EXPECT_EQ(loss, prev_run_loss);
        } else {
          if (id != prev_run) {  // the run's first frame on this node
            if ((*run)["start_ts"].get<double>() >= start) {
              EXPECT_EQ(*nf.step, (*run)["start_step"].get<int64_t>()) << id;
            }
            if (!(*run)["resumed_from"].is_null()) {
              ++resumed;
              const json& from = runs.at((*run)["resumed_from"]);
              int64_t s = (*run)["start_step"];
              EXPECT_LE(s, from["end_step"].get<int64_t>()) << id;
              EXPECT_GE(s, from["start_step"].get<int64_t>()) << id;
              if (s != from["start_step"].get<int64_t>()) {
                EXPECT_EQ(s % from["checkpoint_every_steps"].get<int64_t>(), 0)
                    << id;
              }
            }
          } else {
            EXPECT_GE(*nf.step, prev_run_step) << id;
          }
          prev_run = id;
          prev_run_step = *nf.step;
          prev_run_loss = Sample(f, "train_loss");
        }
      }
      // A job_end marker: the first frame after a marker run ended here,
      // with its last step and reason.
      if (f.contains("job_end")) {
        ++markers;
        const json& m = f["job_end"];
        ASSERT_GT(i, 0u);
        const NodeFrame& before = frames[i - 1];
        EXPECT_EQ(before.job, m["job"].get<std::string>());
        EXPECT_EQ(*before.step, m["step"].get<int64_t>());
        const json& ended = runs.at(prev_run);
        EXPECT_EQ(ended["job"], m["job"]);
        EXPECT_EQ(ended["agent"], "marker");
        EXPECT_EQ(ended["end"], m["reason"]);
        EXPECT_GE(nf.ts, run_end(ended));
        EXPECT_LT(before.ts, run_end(ended));
      }
    }
  }
  // Every ended run's nodes show its agent's behaviour.
  for (const auto& [id, r] : runs) {
    if (r["end_ts"].is_null() || run_end(r) > end - 2 * interval ||
        run_end(r) < start) {
      continue;
    }
    for (const json& n : r["nodes"]) {
      const std::vector<NodeFrame>& frames = by_node[n];
      // The node's first frame at or after the end.
      auto it = std::lower_bound(
          frames.begin(), frames.end(), run_end(r),
          [](const NodeFrame& f, double t) { return f.ts < t; });
      bool down = false;  // silenced by a node_down/rack_down fault
      if (!r["fault"].is_null()) {
        for (const json& fault : truth["faults"]) {
          if (fault["id"] != r["fault"]) continue;
          down = (fault["kind"] == "node_down" &&
                  fault["injected_on"]["node"] == n) ||
                 (fault["kind"] == "rack_down" &&
                  std::find(fault["nodes"].begin(), fault["nodes"].end(), n) !=
                      fault["nodes"].end());
        }
      }
      if (it == frames.end()) continue;
      if (r["agent"] == "vanish" || down) {
        // Silent until its next job starts.
        if (r["agent"] == "vanish") ++vanishes;
        if (!down) {
          EXPECT_NE(it->job, "idle") << id << " " << n;
        }
        EXPECT_FALSE(it->frame->contains("job_end")) << id;
      } else if (r["agent"] == "marker") {
        EXPECT_TRUE(it->frame->contains("job_end")) << id << " " << n;
      } else {
        EXPECT_EQ(it->job, r["job"]) << id << " " << n;  // lingers
      }
    }
  }
  EXPECT_GT(markers, 0);
  EXPECT_GT(lingers, 0);
  EXPECT_GT(vanishes, 0);
  EXPECT_GT(resumed, 0);
  EXPECT_GT(idle, 0);

  // Steps of a run are in lockstep across its nodes, tick by tick.
  std::map<std::pair<std::string, int64_t>, std::pair<int64_t, int64_t>>
      range;  // (job, tick) -> min, max step
  for (const json& f : sim.frames) {
    if (f["job"] == "idle") continue;
    auto key = std::make_pair(
        f["job"].get<std::string>(),
        std::llround((f["ts"].get<double>() - start) / interval));
    int64_t s = f["step"];
    auto [it, fresh] = range.try_emplace(key, s, s);
    it->second.first = std::min(it->second.first, s);
    it->second.second = std::max(it->second.second, s);
  }
  for (const auto& [key, mm] : range) {
    EXPECT_LE(mm.second - mm.first, 1) << key.first << " tick " << key.second;
  }

  // Every fault sits on a running job: its run covers its window and its
  // node reports the job when it begins.
  ASSERT_GT(truth["faults"].size(), 3u);
  for (const json& fault : truth["faults"]) {
    const json& run = runs.at(fault["run"]);
    double fs = fault["start_ts"], fe = fault["end_ts"];
    EXPECT_GE(fs, run["start_ts"].get<double>()) << fault["id"];
    EXPECT_LE(fe, std::min(run_end(run), end) + 1e-6) << fault["id"];
    EXPECT_LE(fs, fe);
    EXPECT_FALSE(fault["start_step"].is_null()) << fault["id"];
    if (fault["kind"] != "low_mfu") {
      EXPECT_GE(fs, run["start_ts"].get<double>() + 1800 - 1) << fault["id"];
    }
    std::string where = fault["injected_on"]["node"].is_null()
                            ? run["nodes"][0].get<std::string>()
                            : fault["injected_on"]["node"].get<std::string>();
    ASSERT_TRUE(on_node(run, where)) << fault["id"];
    bool seen = false;
    for (const NodeFrame& nf : by_node[where]) {
      if (nf.job == run["job"] && std::abs(nf.ts - fs) <= interval + 1) {
        seen = true;
      }
    }
    EXPECT_TRUE(seen) << fault["id"] << " " << fault["kind"] << " on " << where;
    ASSERT_FALSE(fault["expected"].empty());
    EXPECT_EQ(fault["severity"].is_null(), false);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, MultiJobFramesTest,
                         testing::Values(uint64_t{5}, uint64_t{8}));

TEST(MultiJobSimTest, NoFaultsMeansNoFaultsAndNoLemon) {
  MultiJobOptions options = SmallCluster(6);
  options.seconds = 4 * 3600;
  options.faults_per_day = 0;
  Simulated sim = Simulate(options, false);
  EXPECT_TRUE(sim.truth["faults"].empty());
  EXPECT_TRUE(sim.truth["lemons"].empty());
  for (const json& r : sim.truth["jobs"]) EXPECT_TRUE(r["fault"].is_null());
}

}  // namespace
}  // namespace vigil::agent
