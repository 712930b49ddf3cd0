#include "agent/sim/multi_job_sim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/sim/cluster_sim.h"
#include "agent/sim/scenario_spec.h"
#include "nlohmann/json.hpp"

namespace vigil::agent {
namespace {

using json = nlohmann::ordered_json;

constexpr double kMinute = 60, kHour = 3600, kDay = 86400;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLingerSeconds = 300;
constexpr double kPeakFlopsPerGpu = 989e12;
constexpr size_t kChunkBytes = 1 << 20;
constexpr const char* kIdleJob = "idle";

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform [-1, 1) fixed by `bits`.
double Signed(uint64_t bits) { return 2 * ((Mix(bits) >> 11) * 0x1.0p-53) - 1; }

// A portable stream of draws (SplitMix64), unlike <random>'s
// distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(Mix(seed ^ 0x6a09e667f3bcc909ULL)) {}
  double Uniform() { return (Mix(state_++) >> 11) * 0x1.0p-53; }
  double Uniform(double a, double b) { return a + (b - a) * Uniform(); }
  double LogUniform(double a, double b) {
    return a * std::exp(std::log(b / a) * Uniform());
  }
  double Exponential(double mean) { return -mean * std::log(1 - Uniform()); }
  // Uniform in [0, n).
  int Below(int n) { return std::min(n - 1, static_cast<int>(Uniform() * n)); }
  bool Chance(double p) { return Uniform() < p; }
  // An index drawn with the given weights.
  int Pick(std::initializer_list<double> weights) {
    double total = 0;
    for (double w : weights) total += w;
    double u = Uniform() * total;
    int i = 0;
    for (double w : weights) {
      if (u < w) return i;
      u -= w;
      ++i;
    }
    return i - 1;
  }

 private:
  uint64_t state_;
};

struct Model {
  const char* name;
  double params;
};
const Model kModels[] = {
    {"llama3-8b", 8e9},     {"mistral-7b", 7.2e9}, {"gpt-13b", 13e9},
    {"qwen2-32b", 32e9},    {"gemma2-27b", 27e9},  {"llama3-70b", 70e9},
    {"mixtral-8x7b", 13e9}, {"vit-22b", 22e9},     {"t5-11b", 11e9},
    {"codegen-16b", 16e9},
};
const char* const kTasks[] = {"sft",  "dpo",     "ft",       "eval",
                              "rlhf", "distill", "ablation", "long-ctx"};

// ClusterNodeNames' name of node `n`.
std::string NodeName(int n) { return absl::StrFormat("n%03d", n); }

// Node sizes of new jobs and their weights.
const int kSizes[] = {1, 2, 4, 8, 16, 32};

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

// Plans the cluster's life minute by minute (the header's distributions).
class Planner {
 public:
  explicit Planner(const MultiJobOptions& o)
      : o_(o),
        rng_(o.seed),
        start_(o.start_ts),
        end_(o.start_ts + o.seconds),
        nodes_(o.nodes),
        visits_(o.nodes) {}

  ClusterPlan Plan();

 private:
  // A job name: its runs share its shape and agent.
  struct Job {
    std::string name;
    std::string family;
    bool pretrain = false;
    bool chained = false;  // failed/cancelled -> the family's next job
    int chain_index = 1;
    std::string family_base;
    int size = 1;
    SimulatorOptions shape;
    double checkpoint_every_s = 0;
    bool noisy = false;
    AgentStyle agent = AgentStyle::kMarker;
    double work_left = 0;  // wall seconds (not pre-training)
    int preemptions_left = 0;
    JobEnd final_end = JobEnd::kCompleted;
    int64_t initial_step = 0;
    int runs = 0;
    bool low_mfu = false;
  };
  struct Pending {
    int job;
    double ready;
    int resume_run;
    std::vector<int> prefer;
    bool same_nodes;
  };
  struct NodeState {
    int run = -1;
    double free_at = -kInf;
    double out_until = -kInf;
  };
  // A run on a node, and whether the node went down with it (until when).
  struct Visit {
    int run;
    double down_until = -kInf;
  };

  void InitialFill();
  void Step(double t);
  void Finish(int r);
  void Continue(int job, int run, double at);
  void StartPending(double t);
  void Fill(double t, bool initial);
  std::vector<int> FreeNodes(double t) const;
  int NewJob(int size, bool lemon_node);
  void Shape(Job* job, const Model& model, double step_s);
  int StartRun(int job, std::vector<int> nodes, double start, int resume_run,
               bool initial);
  bool TryFault(double t);
  bool Eligible(const PlannedRun& r, double t, double d) const;
  // A fault start near `t` half-way between two ticks of the frame grid,
  // so that every node of a job (each a few ms off the grid) sees it begin
  // at the same tick and the job stays in lockstep.
  double OffGrid(double t);
  int Place(int run, const std::string& kind, double t, double d, int node,
            int gpu, bool lemon);
  void TryLemon(double t);
  void BuildSegments(ClusterPlan* plan) const;

  const MultiJobOptions& o_;
  Rng rng_;
  const double start_, end_;
  std::vector<NodeState> nodes_;
  std::vector<std::vector<Visit>> visits_;
  std::vector<Job> jobs_;
  std::vector<PlannedRun> runs_;
  std::vector<double> run_work_;  // job's work left when the run started
  std::vector<int> run_job_;      // the job of each run
  std::vector<int> active_;       // runs not yet finished
  std::vector<Pending> pending_;
  std::vector<PlannedFault> faults_;
  std::vector<double> arrivals_;
  size_t next_arrival_ = 0;
  std::vector<std::string> deck_;
  int pending_low_mfu_ = 0;
  int job_counter_ = 0;
  int xid_storms_ = 0;
  // The next new job in the queue: its node count, and since when it waits.
  int head_size_ = 0;
  double head_since_ = 0;
  // The lemon.
  int lemon_node_ = -1;
  int lemon_gpu_ = 0;
  std::string lemon_kind_;
  std::vector<double> lemon_targets_;
  std::vector<std::string> lemon_jobs_;
  std::vector<int> lemon_faults_;
};

ClusterPlan Planner::Plan() {
  if (o_.faults_per_day > 0) {
    const double from = start_ + kHour, to = end_ - 75 * kMinute;
    const int n =
        static_cast<int>(std::round(o_.faults_per_day * o_.seconds / kDay));
    if (to > from && n > 0) {
      const double spacing = (to - from) / n;
      for (int k = 0; k < n; ++k) {
        arrivals_.push_back(from +
                            (k + 0.5 + rng_.Uniform(-0.4, 0.4)) * spacing);
      }
    }
  }
  InitialFill();
  if (o_.faults_per_day > 0 && o_.lemon) {
    // A node of the short-jobs partition: not in a pre-training run.
    std::vector<int> candidates;
    for (int n = 0; n < o_.nodes; ++n) {
      int r = nodes_[n].run;
      if (r < 0 || !jobs_[run_job_[r]].pretrain) candidates.push_back(n);
    }
    if (!candidates.empty()) {
      lemon_node_ = candidates[rng_.Below(static_cast<int>(candidates.size()))];
      lemon_gpu_ = rng_.Below(o_.gpus);
      lemon_kind_ = rng_.Chance(0.5) ? "thermal_throttle" : "gpu_power_low_55w";
      const double span = std::min(3 * kDay, 0.8 * o_.seconds);
      const double first = start_ + 0.05 * o_.seconds;
      lemon_targets_ = {first, first + span / 3, first + 2 * span / 3};
    }
  }
  for (double t = start_ + kMinute; t < end_; t += kMinute) Step(t);
  for (int r : active_) {
    if (runs_[r].end_ts > end_) runs_[r].end = JobEnd::kRunning;
  }

  // Faults in start order, numbered.
  std::vector<int> order(faults_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return faults_[a].start_ts < faults_[b].start_ts;
  });
  std::vector<int> new_index(faults_.size());
  ClusterPlan plan;
  for (size_t i = 0; i < order.size(); ++i) {
    new_index[order[i]] = static_cast<int>(i);
    plan.faults.push_back(std::move(faults_[order[i]]));
    plan.faults.back().id = absl::StrFormat("f%03d", i + 1);
  }
  for (PlannedRun& r : runs_) {
    if (r.fault >= 0) r.fault = new_index[r.fault];
  }
  if (lemon_node_ >= 0 && !lemon_faults_.empty()) {
    PlannedLemon lemon;
    lemon.node = lemon_node_;
    lemon.gpu = lemon_gpu_;
    for (int f : lemon_faults_) lemon.faults.push_back(new_index[f]);
    std::sort(lemon.faults.begin(), lemon.faults.end());
    plan.lemons.push_back(std::move(lemon));
  }
  BuildSegments(&plan);
  double busy = 0;
  for (const PlannedRun& r : runs_) {
    double from = std::max(r.start_ts, start_), to = std::min(r.end_ts, end_);
    if (to > from) busy += (to - from) * r.nodes.size();
  }
  plan.busy_fraction = busy / (o_.seconds * o_.nodes);
  plan.runs = std::move(runs_);
  return plan;
}

void Planner::InitialFill() {
  // Pre-training families, already running.
  const int families = std::max(1, o_.nodes / 32);
  for (int f = 0; f < families; ++f) {
    int size;
    if (o_.nodes < 12) {
      size = std::max(1, o_.nodes / 4);
    } else {
      const int sizes[] = {16, 24, 32};
      size = std::min(sizes[rng_.Below(3)], std::max(1, o_.nodes / 3));
    }
    std::vector<int> free = FreeNodes(start_);
    if (static_cast<int>(free.size()) < size) break;
    const Model& model = kModels[3 + rng_.Below(4)];
    Job job;
    job.pretrain = true;
    job.family =
        absl::StrCat(model.name, "-pt", f == 0 ? "" : absl::StrCat(f + 1));
    job.chain_index = 1 + rng_.Below(3);
    job.name = absl::StrCat(job.family, "-r", job.chain_index);
    job.size = size;
    job.agent = static_cast<AgentStyle>(rng_.Pick({0.5, 0.25, 0.25}));
    Shape(&job, model, rng_.LogUniform(1.0, 5.0));
    if (job.chain_index > 1) {
      int64_t every = job.shape.checkpoint_every_steps;
      job.initial_step =
          every * static_cast<int64_t>(rng_.Uniform(50e3, 300e3) / every);
    }
    jobs_.push_back(std::move(job));
    // Consecutive nodes from a random place: a rack-aligned allocation.
    int first = rng_.Below(static_cast<int>(free.size()) - size + 1);
    std::vector<int> nodes(free.begin() + first, free.begin() + first + size);
    StartRun(static_cast<int>(jobs_.size()) - 1, nodes, start_, -1, true);
  }
  Fill(start_, true);
}

void Planner::Step(double t) {
  // Runs whose processes ended.
  std::vector<int> ending;
  for (int r : active_) {
    if (runs_[r].end_ts <= t) ending.push_back(r);
  }
  for (int r : ending) Finish(r);
  // Faults due (a fault waits for a job it fits, for up to 6 h).
  while (next_arrival_ < arrivals_.size() && arrivals_[next_arrival_] <= t) {
    if (TryFault(t)) {
      ++next_arrival_;
    } else if (t - arrivals_[next_arrival_] > 6 * kHour) {
      ++next_arrival_;
    } else {
      break;
    }
  }
  TryLemon(t);
  StartPending(t);
  Fill(t, false);
}

void Planner::Finish(int r) {
  PlannedRun& run = runs_[r];
  const int job_index = run_job_[r];
  Job& job = jobs_[job_index];
  for (int n : run.nodes) {
    NodeState& node = nodes_[n];
    node.run = -1;
    double base =
        run.end_ts + (run.agent == AgentStyle::kLinger ? kLingerSeconds : 0);
    double gap = kMinute + (rng_.Chance(0.5) ? rng_.Uniform(0, 240)
                                             : rng_.Exponential(40 * kMinute));
    node.free_at = std::max(base + gap, node.out_until);
  }
  active_.erase(std::find(active_.begin(), active_.end(), r));
  if (!job.pretrain) {
    job.work_left = std::max(0.0, run_work_[r] - (run.end_ts - run.start_ts));
  }
  if (run.end == JobEnd::kPreempted) {
    Pending p;
    p.job = job_index;
    p.ready = run.end_ts + rng_.Uniform(2 * kMinute, 30 * kMinute);
    p.resume_run = r;
    p.prefer = run.nodes;
    p.same_nodes = rng_.Chance(0.7);
    // At least what was lost since the last checkpoint is left to do.
    if (!job.pretrain) job.work_left = std::max(job.work_left, 30 * kMinute);
    pending_.push_back(std::move(p));
  } else if ((run.end == JobEnd::kFailed || run.end == JobEnd::kCancelled) &&
             (job.pretrain || job.chained)) {
    Continue(job_index, r, run.end_ts);
  }
}

void Planner::Continue(int job_index, int run, double at) {
  Job next = jobs_[job_index];
  next.chain_index += 1;
  next.name = absl::StrCat(next.family, "-r", next.chain_index);
  next.runs = 0;
  next.low_mfu = false;
  next.initial_step = 0;
  // A comparable node count.
  int size = next.size;
  switch (rng_.Pick({0.6, 0.2, 0.2})) {
    case 1:
      size = static_cast<int>(std::round(size * 0.75));
      break;
    case 2:
      size = static_cast<int>(std::round(size * 1.25));
      break;
  }
  next.size = std::clamp(size, 1, std::max(1, o_.nodes / 2));
  next.shape.job = next.name;
  next.shape.checkpoint_seconds = std::min(
      120.0, 10 + 100 * std::min(1.0, next.size / 32.0) * rng_.Uniform(0.6, 1) +
                 rng_.Uniform(0, 10));
  if (!next.pretrain) {
    next.work_left =
        jobs_[job_index].work_left + rng_.Uniform(kHour, 8 * kHour);
    next.preemptions_left = rng_.Chance(0.12) ? 1 : 0;
    next.final_end = static_cast<JobEnd>(rng_.Pick({0.5, 0.15, 0.35}));
  }
  jobs_.push_back(std::move(next));
  Pending p;
  p.job = static_cast<int>(jobs_.size()) - 1;
  p.ready = at + rng_.Uniform(10 * kMinute, 60 * kMinute);
  p.resume_run = run;
  p.prefer = runs_[run].nodes;
  p.same_nodes = jobs_.back().size == static_cast<int>(p.prefer.size()) &&
                 rng_.Chance(0.5);
  pending_.push_back(std::move(p));
}

std::vector<int> Planner::FreeNodes(double t) const {
  std::vector<int> free;
  for (int n = 0; n < o_.nodes; ++n) {
    if (nodes_[n].run < 0 && nodes_[n].free_at <= t &&
        nodes_[n].out_until <= t) {
      free.push_back(n);
    }
  }
  return free;
}

void Planner::StartPending(double t) {
  for (size_t i = 0; i < pending_.size();) {
    const Pending& p = pending_[i];
    if (p.ready > t) {
      ++i;
      continue;
    }
    std::vector<int> free = FreeNodes(t);
    auto is_free = [&](int n) {
      return std::find(free.begin(), free.end(), n) != free.end();
    };
    const int size = jobs_[p.job].size;
    std::vector<int> chosen;
    bool all_free = static_cast<int>(p.prefer.size()) == size;
    for (int n : p.prefer) all_free = all_free && is_free(n);
    if (p.same_nodes && all_free) {
      chosen = p.prefer;
    } else if (static_cast<int>(free.size()) >= size) {
      // Its previous nodes where free, then the lowest free ones.
      for (int n : p.prefer) {
        if (static_cast<int>(chosen.size()) < size && is_free(n)) {
          chosen.push_back(n);
        }
      }
      for (int n : free) {
        if (static_cast<int>(chosen.size()) >= size) break;
        if (std::find(chosen.begin(), chosen.end(), n) == chosen.end()) {
          chosen.push_back(n);
        }
      }
      std::sort(chosen.begin(), chosen.end());
    } else {
      ++i;  // waits for nodes
      continue;
    }
    const int job = p.job, resume = p.resume_run;
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    StartRun(job, chosen, t + rng_.Uniform(0, 50), resume, false);
  }
}

void Planner::Fill(double t, bool initial) {
  std::vector<int> free = FreeNodes(t);
  int demand = 0;
  for (const Pending& p : pending_) {
    if (p.ready <= t) demand += jobs_[p.job].size;
  }
  int avail = static_cast<int>(free.size()) - demand;
  if (avail <= 0) return;
  // New jobs take free nodes from a rotating place, so that they spread
  // over the cluster.
  size_t cursor = rng_.Below(static_cast<int>(free.size()));
  std::vector<bool> taken(free.size(), false);
  const int largest = std::max(1, o_.nodes / 4);
  while (avail > 0) {
    if (head_size_ == 0) {  // the next job in the queue
      do {
        head_size_ = kSizes[rng_.Pick({30, 22, 20, 14, 9, 5})];
      } while (head_size_ > largest);
      head_since_ = t;
    }
    // The queue is first come, first served: the head waits for nodes,
    // and after 45 min of waiting is resubmitted on what is free.
    if (head_size_ > avail && !initial && t - head_since_ < 45 * kMinute) {
      break;
    }
    int size = std::min(head_size_, avail);
    while (size & (size - 1)) size &= size - 1;  // a power of two
    head_size_ = 0;
    std::vector<int> nodes;
    for (size_t k = 0; k < free.size() && static_cast<int>(nodes.size()) < size;
         ++k) {
      size_t i = (cursor + k) % free.size();
      if (taken[i]) continue;
      taken[i] = true;
      nodes.push_back(free[i]);
    }
    cursor = (cursor + nodes.size()) % free.size();
    std::sort(nodes.begin(), nodes.end());
    bool lemon =
        std::find(nodes.begin(), nodes.end(), lemon_node_) != nodes.end();
    int job = NewJob(size, lemon);
    StartRun(job, nodes, initial ? start_ : t + rng_.Uniform(0, 50), -1,
             initial);
    avail -= size;
  }
}

void Planner::Shape(Job* job, const Model& model, double step_s) {
  SimulatorOptions& so = job->shape;
  so.job = job->name;
  so.gpus = o_.gpus;
  so.nics = o_.gpus;
  so.step_seconds = step_s;
  so.model_params = model.params;
  so.peak_flops_per_gpu = kPeakFlopsPerGpu;
  const double mfu = rng_.Uniform(0.42, 0.55);
  so.tokens_per_step_per_gpu =
      mfu * kPeakFlopsPerGpu * step_s / (6 * model.params);
  so.warmup_steps = step_s <= 5 ? 200 : 20;
  job->checkpoint_every_s = rng_.Uniform(20 * kMinute, 60 * kMinute);
  so.checkpoint_every_steps = std::max<int64_t>(
      1, static_cast<int64_t>(std::round(job->checkpoint_every_s / step_s)));
  so.checkpoint_seconds = std::min(
      120.0, 10 + 100 * std::min(1.0, job->size / 32.0) * rng_.Uniform(0.6, 1) +
                 rng_.Uniform(0, 10));
  so.fp16 = rng_.Chance(0.3);
  so.grad_scaler = so.fp16;
  so.report_phase = rng_.Chance(0.8);
  job->noisy = rng_.Chance(0.2);
  if (job->noisy) {
    so.noise.power_sd_watts = rng_.Uniform(30, 40);
    so.noise.power_offset_watts = 25;
    so.noise.clock_jitter = 0.02;
    so.noise.nvlink_jitter = 0.3;
  }
  so.startup_seconds = rng_.Uniform(30, 60);
  so.ramp_steps = 2;
}

int Planner::NewJob(int size, bool lemon_node) {
  Job job;
  const Model& model =
      kModels[rng_.Below(static_cast<int>(std::size(kModels)))];
  const char* task = kTasks[rng_.Below(static_cast<int>(std::size(kTasks)))];
  ++job_counter_;
  job.chained = rng_.Chance(0.15);
  std::string base =
      absl::StrFormat("%s-%s-%04d", model.name, task, job_counter_);
  job.family = base;
  job.name = job.chained ? absl::StrCat(base, "-r1") : base;
  job.size = size;
  job.agent = static_cast<AgentStyle>(rng_.Pick({0.5, 0.25, 0.25}));
  double step_s =
      rng_.Chance(0.92) ? rng_.LogUniform(0.5, 5.0) : rng_.Uniform(20, 60);
  Shape(&job, model, step_s);
  job.work_left = rng_.LogUniform(30 * kMinute, 24 * kHour);
  if (lemon_node) job.work_left = std::min(job.work_left, 8 * kHour);
  double u = rng_.Uniform();
  job.preemptions_left = u < 0.09 ? 1 : u < 0.12 ? 2 : 0;
  job.final_end = job.chained
                      ? static_cast<JobEnd>(rng_.Pick({0.5, 0.15, 0.35}))
                      : static_cast<JobEnd>(rng_.Pick({0.64, 0.12, 0.14}));
  if (pending_low_mfu_ > 0 && job.work_left >= 90 * kMinute) {
    --pending_low_mfu_;
    job.low_mfu = true;
    job.preemptions_left = 0;
    job.final_end = JobEnd::kCompleted;
  }
  jobs_.push_back(std::move(job));
  return static_cast<int>(jobs_.size()) - 1;
}

int Planner::StartRun(int job_index, std::vector<int> nodes, double start,
                      int resume_run, bool initial) {
  Job& job = jobs_[job_index];
  PlannedRun run;
  run.job = job.name;
  run.family = job.family;
  run.id = absl::StrCat(job.name, "#", ++job.runs);
  run.nodes = std::move(nodes);
  run.agent = job.agent;
  run.resumed_from = resume_run;
  run.initial_step = resume_run < 0 ? job.initial_step : 0;
  run.checkpoint_every_s = job.checkpoint_every_s;
  run.noisy = job.noisy;
  run.shape = job.shape;
  run.shape.job = job.name;
  const int index = static_cast<int>(runs_.size());
  run.shape.seed = Mix(o_.seed ^ Mix(static_cast<uint64_t>(index) + 1));
  double duration;
  if (job.pretrain) {
    duration = rng_.Uniform(6 * kHour, 30 * kHour);
    const JobEnd ends[] = {JobEnd::kPreempted, JobEnd::kFailed,
                           JobEnd::kCancelled};
    run.end = ends[rng_.Pick({0.6, 0.25, 0.15})];
  } else if (job.preemptions_left > 0) {
    duration = job.work_left * rng_.Uniform(0.2, 0.7);
    run.end = JobEnd::kPreempted;
    --job.preemptions_left;
  } else {
    duration = job.work_left;
    run.end = job.final_end;
  }
  if (initial) {  // started before the simulation, somewhere in its course
    double elapsed = job.pretrain ? rng_.Uniform(kHour, 20 * kHour)
                                  : rng_.Uniform(0, 0.9) * duration;
    if (job.pretrain) duration += elapsed;
    start -= elapsed;
  }
  run.start_ts = start;
  run.end_ts = start + duration;
  for (int n : run.nodes) {
    nodes_[n].run = index;
    visits_[n].push_back({index});
  }
  runs_.push_back(std::move(run));
  run_work_.push_back(job.work_left);
  run_job_.push_back(job_index);
  active_.push_back(index);
  if (job.low_mfu && job.runs == 1) {  // a property of the job from its start
    Place(index, "low_mfu", runs_[index].start_ts,
          runs_[index].end_ts - runs_[index].start_ts, -1, 0, false);
  }
  return index;
}

bool Planner::Eligible(const PlannedRun& r, double t, double d) const {
  return r.fault < 0 && r.start_ts + 30 * kMinute <= t &&
         t + d + 15 * kMinute <= r.end_ts && t + d + 15 * kMinute <= end_;
}

double Planner::OffGrid(double t) {
  const double k = std::ceil((t - start_) / o_.interval_seconds);
  return start_ + (k + rng_.Uniform(0.3, 0.7)) * o_.interval_seconds;
}

bool Planner::TryFault(double t) {
  const double d = rng_.Uniform(20 * kMinute, 40 * kMinute);
  t = OffGrid(t);
  if (deck_.empty()) {
    deck_ = FaultKindNames();
    for (size_t i = deck_.size(); i > 1; --i) {
      std::swap(deck_[i - 1], deck_[rng_.Below(static_cast<int>(i))]);
    }
  }
  for (size_t k = 0; k < deck_.size(); ++k) {
    const std::string kind = deck_[k];
    if (kind == "low_mfu") {  // goes to the next new job
      ++pending_low_mfu_;
      deck_.erase(deck_.begin() + static_cast<std::ptrdiff_t>(k));
      return true;
    }
    std::vector<int> candidates;
    for (int r : active_) {
      const PlannedRun& run = runs_[r];
      if (!Eligible(run, t, d)) continue;
      if (kind == "rack_down" && run.nodes.size() < 8) continue;
      if (kind == "loss_scale_thrash" && !run.shape.fp16) continue;
      candidates.push_back(r);
    }
    if (candidates.empty()) continue;
    int r = candidates[rng_.Below(static_cast<int>(candidates.size()))];
    deck_.erase(deck_.begin() + static_cast<std::ptrdiff_t>(k));
    Place(r, kind, t, d, -1, -1, false);
    return true;
  }
  return false;
}

int Planner::Place(int r, const std::string& kind, double t, double d, int node,
                   int gpu, bool lemon) {
  PlannedRun& run = runs_[r];
  ScenarioSpec spec;
  spec.name = kind;
  FaultSpec f;
  f.kind = kind;
  f.at_seconds = t - run.start_ts;
  if (kind != "low_mfu") f.duration_seconds = d;
  const int index = static_cast<int>(faults_.size());
  ResolvedFault probe;
  probe.spec.kind = kind;
  std::vector<int> hit;  // nodes the fault sits on
  if (IsNodeFault(probe)) {
    const int size = static_cast<int>(run.nodes.size());
    if (node < 0) node = run.nodes[rng_.Below(size)];
    if (gpu < 0) gpu = rng_.Below(o_.gpus);
    hit = {node};
    if (kind == "rack_down") {  // consecutive nodes of the job's allocation
      int count = std::min(2 + rng_.Below(4), size - 1);
      int first = rng_.Below(size - count + 1);
      hit.assign(run.nodes.begin() + first, run.nodes.begin() + first + count);
      for (int n : hit) f.nodes.push_back(NodeName(n));
    }
    f.node = NodeName(hit[0]);
    f.gpu = gpu;
    f.dev = absl::StrCat("mlx5_", gpu % o_.gpus);
  }
  if (kind == "xid_storm") {  // hardware and application storms in turn
    f.xid = xid_storms_++ % 2 == 0 ? 94 : rng_.Chance(0.5) ? 13 : 31;
  }
  spec.faults.push_back(std::move(f));
  absl::StatusOr<std::vector<ResolvedFault>> resolved = ResolveFaults(
      spec, Mix(o_.seed ^ Mix(0xfa17ULL + static_cast<uint64_t>(index))));
  PlannedFault pf;
  pf.run = r;
  pf.fault = std::move((*resolved)[0]);
  pf.start_ts = t;
  pf.end_ts = t + d;
  pf.lemon = lemon;
  run.fault = index;
  if (FaultKillsJob(pf.fault)) {
    const Job& job = jobs_[run_job_[r]];
    run.end_ts = t + d;
    run.end = job.pretrain || job.chained || rng_.Chance(0.6)
                  ? JobEnd::kPreempted
                  : JobEnd::kCancelled;
    // Hardware faults take their nodes out for repair; a model's NaN does
    // not.
    const bool down = kind == "rack_down" || kind == "node_down";
    if (!down && kind != "gpu_fell_off_bus" && kind != "ecc_dbe" &&
        kind != "packet_loss_hang") {
      hit.clear();
    }
    for (int n : hit) {
      double back = run.end_ts + rng_.Uniform(2 * kHour, 6 * kHour);
      nodes_[n].out_until = back;
      if (down) visits_[n].back().down_until = back;
    }
  }
  faults_.push_back(std::move(pf));
  return index;
}

void Planner::TryLemon(double t) {
  if (lemon_node_ < 0 || lemon_faults_.size() >= lemon_targets_.size() ||
      t < lemon_targets_[lemon_faults_.size()]) {
    return;
  }
  const int r = nodes_[lemon_node_].run;
  if (r < 0) return;
  const PlannedRun& run = runs_[r];
  const double d = 25 * kMinute;
  t = OffGrid(t);
  if (!Eligible(run, t, d) || std::find(lemon_jobs_.begin(), lemon_jobs_.end(),
                                        run.job) != lemon_jobs_.end()) {
    return;
  }
  lemon_jobs_.push_back(run.job);
  lemon_faults_.push_back(
      Place(r, lemon_kind_, t, d, lemon_node_, lemon_gpu_, true));
}

void Planner::BuildSegments(ClusterPlan* plan) const {
  plan->segments.resize(o_.nodes);
  for (int n = 0; n < o_.nodes; ++n) {
    std::vector<NodeSegment>& segs = plan->segments[n];
    // What follows a run on this node: its agent's behaviour, or silence
    // while the node is down.
    int after_run = -1;
    double down_until = -kInf;
    auto fill = [&](double a, double b) {
      auto add = [&](NodeSegment::Kind kind, double from, double to, int run) {
        if (to > from) segs.push_back({kind, from, to, run, false});
      };
      if (down_until > a) {
        add(NodeSegment::kSilent, a, std::min(b, down_until), -1);
        a = std::min(b, down_until);
        add(NodeSegment::kIdle, a, b, -1);
        return;
      }
      AgentStyle agent =
          after_run >= 0 ? runs_[after_run].agent : AgentStyle::kMarker;
      if (agent == AgentStyle::kLinger) {
        double e = std::min(b, a + kLingerSeconds);
        add(NodeSegment::kLinger, a, e, after_run);
        add(NodeSegment::kIdle, e, b, -1);
      } else if (agent == AgentStyle::kVanish) {
        add(NodeSegment::kSilent, a, b, -1);
      } else {
        add(NodeSegment::kIdle, a, b, -1);
      }
    };
    double cursor = -kInf;
    for (const Visit& v : visits_[n]) {
      const PlannedRun& run = runs_[v.run];
      if (cursor == -kInf) cursor = std::min(start_, run.start_ts) - kHour;
      fill(cursor, run.start_ts);
      bool down = v.down_until > run.end_ts;
      segs.push_back({NodeSegment::kRun, run.start_ts, run.end_ts, v.run,
                      run.agent == AgentStyle::kMarker && !down});
      cursor = run.end_ts;
      after_run = v.run;
      down_until = v.down_until;
    }
    if (cursor == -kInf) cursor = start_ - kHour;
    fill(cursor, kInf);
  }
}

// One node during the simulation.
struct NodeSim {
  std::string name;
  double phase = 0;
  size_t seg = 0;        // current segment
  int64_t sim_seg = -1;  // the segment `sim` was made for
  std::unique_ptr<FaultScenario> scenario;
  std::unique_ptr<Simulator> sim;
  std::optional<NodeHardware> hardware;   // of the last simulator
  std::string header;                     // `, "node": .., "job": ..`
  int64_t last_step = -1;                 // last step of the last run here
  std::vector<SimSample> last_samples;    // of its last run frame
  std::vector<SimSample> linger_samples;  // process samples it repeats
  // A job_end marker for the next frame.
  bool marker = false;
  std::string marker_text;
};

// A frame of one tick, before rendering.
struct Slot {
  double ts;
  size_t node;
  SimFrame frame;
  bool has_step;
  int64_t step;
  bool run;  // a run's frame: its samples become the node's last
  std::string marker_text;
};

std::string Header(const std::string& node, const std::string& job) {
  return absl::StrCat(", \"node\": ", json(node).dump(),
                      ", \"job\": ", json(job).dump());
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

}  // namespace

std::string_view JobEndName(JobEnd end) {
  switch (end) {
    case JobEnd::kCompleted:
      return "completed";
    case JobEnd::kCancelled:
      return "cancelled";
    case JobEnd::kFailed:
      return "failed";
    case JobEnd::kPreempted:
      return "preempted";
    case JobEnd::kRunning:
      return "running";
  }
  return "?";
}

std::string_view AgentStyleName(AgentStyle agent) {
  switch (agent) {
    case AgentStyle::kMarker:
      return "marker";
    case AgentStyle::kLinger:
      return "linger";
    case AgentStyle::kVanish:
      return "vanish";
  }
  return "?";
}

absl::StatusOr<ClusterPlan> PlanCluster(const MultiJobOptions& options) {
  if (options.nodes < 1 || options.nodes > 4096 || options.gpus < 1 ||
      options.gpus > 64) {
    return absl::InvalidArgumentError("nodes must be 1..4096, gpus 1..64");
  }
  if (!(options.interval_seconds >= 0.1) || !(options.seconds >= 3600) ||
      !std::isfinite(options.seconds) || !std::isfinite(options.start_ts) ||
      !(options.jitter_seconds >= 0) || !(options.faults_per_day >= 0) ||
      !std::isfinite(options.faults_per_day)) {
    return absl::InvalidArgumentError(
        "interval must be >= 0.1 s, seconds >= 3600, jitter and "
        "faults_per_day >= 0, start_ts finite");
  }
  Planner planner(options);
  return planner.Plan();
}

absl::StatusOr<MultiJobResult> SimulateMultiJob(
    const MultiJobOptions& options,
    const std::function<void(std::string_view)>& sink) {
  absl::StatusOr<ClusterPlan> plan = PlanCluster(options);
  if (!plan.ok()) return plan.status();
  MultiJobResult result;
  result.plan = std::move(*plan);
  const ClusterPlan& p = result.plan;
  result.start_steps.assign(p.runs.size(), -1);
  result.end_steps.assign(p.runs.size(), -1);
  result.onsets.assign(p.faults.size(), std::nullopt);
  // Per run: the last checkpoint that completed on every node.
  std::vector<int64_t> checkpoints(p.runs.size(),
                                   std::numeric_limits<int64_t>::max());

  // The catalogue of an fp16 job covers every series any simulator has
  // (train_loss_scale comes last).
  SimulatorOptions probe;
  probe.gpus = options.gpus;
  probe.nics = options.gpus;
  probe.fp16 = true;
  absl::StatusOr<Simulator> probe_sim = Simulator::Create(probe);
  if (!probe_sim.ok()) return probe_sim.status();
  const std::vector<std::string> prefixes = SamplePrefixes(*probe_sim);
  std::vector<bool> process;
  for (const SeriesKey& key : probe_sim->series()) {
    process.push_back(Simulator::IsProcessSeries(key));
  }

  const double jitter =
      std::min(options.jitter_seconds, options.interval_seconds / 4);
  const std::vector<std::string> names = ClusterNodeNames(options.nodes);
  std::vector<NodeSim> nodes(options.nodes);
  for (int i = 0; i < options.nodes; ++i) {
    nodes[i].name = names[i];
    nodes[i].phase = 0.8 * jitter * Signed(options.seed ^ Mix(i + 1));
  }

  // Leaves node i's current segment: harvests its run's results and keeps
  // the node's hardware for the next simulator.
  auto leave = [&](int i) {
    NodeSim& n = nodes[i];
    const NodeSegment& s = p.segments[i][n.seg];
    if (n.sim != nullptr) n.hardware = n.sim->hardware();
    if (s.kind == NodeSegment::kRun && n.sim != nullptr) {
      const PlannedRun& run = p.runs[s.run];
      result.end_steps[s.run] = std::max(result.end_steps[s.run], n.last_step);
      checkpoints[s.run] =
          std::min(checkpoints[s.run], n.sim->checkpoint_step());
      if (run.fault >= 0 && n.scenario != nullptr) {
        std::optional<FaultOnset> o = n.scenario->onset(0);
        const ResolvedFault& f = p.faults[run.fault].fault;
        std::optional<FaultOnset>& best = result.onsets[run.fault];
        if (o.has_value() && FaultHitsNode(f, n.name) &&
            (!best.has_value() || o->ts < best->ts)) {
          best = o;
        }
      }
      if (s.marker) {
        n.marker = true;
        n.marker_text =
            absl::StrCat(", \"job_end\": {\"job\": ", json(run.job).dump(),
                         ", \"step\": ", n.last_step, ", \"reason\": \"",
                         std::string(JobEndName(run.end)), "\"}");
      }
      n.linger_samples.clear();
      for (const SimSample& sample : n.last_samples) {
        if (process[sample.series]) n.linger_samples.push_back(sample);
      }
    }
    n.sim.reset();
    n.scenario.reset();
    n.sim_seg = -1;
  };

  // Makes the simulator of node i's current segment, or an error.
  auto enter = [&](int i) -> absl::Status {
    NodeSim& n = nodes[i];
    const NodeSegment& s = p.segments[i][n.seg];
    SimulatorOptions so;
    if (s.kind == NodeSegment::kRun) {
      const PlannedRun& run = p.runs[s.run];
      so = run.shape;
      int64_t& start_step = result.start_steps[s.run];
      if (start_step < 0) {
        start_step = run.initial_step;
        if (run.resumed_from >= 0) {
          int64_t c = checkpoints[run.resumed_from];
          start_step =
              c != std::numeric_limits<int64_t>::max()
                  ? c
                  : std::max<int64_t>(0, result.start_steps[run.resumed_from]);
        }
      }
      so.start_step = start_step;
      if (run.fault >= 0) {
        std::vector<ResolvedFault> faults = {p.faults[run.fault].fault};
        AdjustJobOptions(faults, &so);
        n.scenario = std::make_unique<FaultScenario>(faults, n.name);
      }
      n.header = Header(n.name, run.job);
      n.last_step = start_step;
      n.last_samples.clear();
    } else {
      so.idle = true;
      so.job = kIdleJob;
      so.gpus = options.gpus;
      so.nics = options.gpus;
      so.seed = Mix(options.seed ^
                    Mix((static_cast<uint64_t>(i) << 32) + n.seg + 0x1d1eULL));
      n.header = Header(n.name, s.kind == NodeSegment::kLinger
                                    ? p.runs[s.run].job
                                    : std::string(kIdleJob));
    }
    so.node = n.name;
    so.hardware = n.hardware;
    absl::StatusOr<Simulator> sim = Simulator::Create(so, n.scenario.get());
    if (!sim.ok()) return sim.status();
    n.sim = std::make_unique<Simulator>(std::move(*sim));
    if (s.kind == NodeSegment::kRun) {
      n.sim->Tick(p.runs[s.run].start_ts);  // the job starts: lockstep
    }
    n.sim_seg = static_cast<int64_t>(n.seg);
    return absl::OkStatus();
  };

  std::string buf;
  buf.reserve(kChunkBytes + (1 << 16));
  std::vector<Slot> slots;
  std::vector<size_t> order;
  const int64_t ticks = static_cast<int64_t>(
      std::ceil(options.seconds / options.interval_seconds - 1e-9));
  for (int64_t k = 0; k < ticks; ++k) {
    slots.clear();
    for (int i = 0; i < options.nodes; ++i) {
      NodeSim& n = nodes[i];
      const std::vector<NodeSegment>& segs = p.segments[i];
      double offset =
          n.phase +
          0.2 * jitter * Signed(options.seed ^ Mix((k << 12) + i + 7777));
      double ts = std::round((options.start_ts + k * options.interval_seconds +
                              offset) *
                             1000.0) /
                  1000.0;
      while (n.seg + 1 < segs.size() && segs[n.seg].to <= ts) {
        leave(i);
        ++n.seg;
      }
      const NodeSegment& s = segs[n.seg];
      if (s.kind == NodeSegment::kSilent) continue;
      if (n.sim_seg != static_cast<int64_t>(n.seg)) {
        absl::Status st = enter(i);
        if (!st.ok()) return st;
      }
      std::optional<SimFrame> f = n.sim->Tick(ts);
      if (!f.has_value()) continue;  // the node is down
      Slot slot{ts, static_cast<size_t>(i), std::move(*f), true, 0, false, {}};
      switch (s.kind) {
        case NodeSegment::kRun:
          slot.step = slot.frame.step;
          slot.run = true;
          n.last_step = slot.frame.step;
          break;
        case NodeSegment::kLinger:
          slot.step = n.last_step;
          slot.frame.samples.insert(slot.frame.samples.end(),
                                    n.linger_samples.begin(),
                                    n.linger_samples.end());
          break;
        default:
          slot.has_step = false;
          break;
      }
      if (n.marker) {
        slot.marker_text = std::move(n.marker_text);
        n.marker = false;
      }
      slots.push_back(std::move(slot));
    }
    order.resize(slots.size());
    for (size_t j = 0; j < slots.size(); ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return slots[a].ts != slots[b].ts ? slots[a].ts < slots[b].ts
                                        : slots[a].node < slots[b].node;
    });
    for (size_t j : order) {
      Slot& slot = slots[j];
      buf += "{\"ts\": ";
      AppendNumber(slot.ts, &buf);
      buf += nodes[slot.node].header;
      if (slot.has_step) {
        buf += ", \"step\": ";
        buf += std::to_string(slot.step);
      }
      buf += ", \"samples\": [";
      bool first = true;
      for (const SimSample& sample : slot.frame.samples) {
        if (!first) buf += ", ";
        first = false;
        buf += prefixes[sample.series];
        AppendNumber(sample.value, &buf);
        buf += '}';
      }
      buf += ']';
      buf += slot.marker_text;
      buf += "}\n";
      ++result.frames;
      result.samples += slot.frame.samples.size();
      result.end_ts = std::max(result.end_ts, slot.ts);
      if (slot.run) {
        nodes[slot.node].last_samples = std::move(slot.frame.samples);
      }
      if (buf.size() >= kChunkBytes) {
        sink(buf);
        buf.clear();
      }
    }
  }
  if (!buf.empty()) sink(buf);
  for (int i = 0; i < options.nodes; ++i) leave(i);
  return result;
}

std::string MultiJobTruthJson(const MultiJobOptions& options,
                              const MultiJobResult& result) {
  const ClusterPlan& p = result.plan;
  const std::vector<std::string> names = ClusterNodeNames(options.nodes);
  const double end = options.start_ts + options.seconds;
  auto node_names = [&](const std::vector<int>& nodes) {
    json out = json::array();
    for (int n : nodes) out.push_back(names[n]);
    return out;
  };
  json t;
  t["mode"] = "multi_job";
  t["nodes"] = names;
  t["gpus_per_node"] = options.gpus;
  t["interval_seconds"] = options.interval_seconds;
  t["seed"] = options.seed;
  t["start_ts"] = options.start_ts;
  t["end_ts"] = result.end_ts;
  t["frames"] = result.frames;
  t["samples"] = result.samples;
  t["node_days"] = options.nodes * options.seconds / kDay;
  t["faults_per_day"] = options.faults_per_day;
  t["busy_fraction"] = std::round(p.busy_fraction * 1e4) / 1e4;

  std::vector<size_t> runs(p.runs.size());
  for (size_t i = 0; i < runs.size(); ++i) runs[i] = i;
  std::stable_sort(runs.begin(), runs.end(), [&](size_t a, size_t b) {
    return p.runs[a].start_ts < p.runs[b].start_ts;
  });
  json jobs = json::array();
  for (size_t i : runs) {
    const PlannedRun& r = p.runs[i];
    json j;
    j["run"] = r.id;
    j["job"] = r.job;
    j["family"] = r.family;
    j["nodes"] = node_names(r.nodes);
    j["gpus"] = static_cast<int>(r.nodes.size()) * options.gpus;
    j["start_ts"] = r.start_ts;
    j["end_ts"] = r.end == JobEnd::kRunning ? json(nullptr) : json(r.end_ts);
    j["start_step"] = result.start_steps[i];
    j["end_step"] = result.end_steps[i];
    j["end"] = std::string(JobEndName(r.end));
    j["agent"] = std::string(AgentStyleName(r.agent));
    j["noisy"] = r.noisy;
    j["precision"] = r.shape.fp16 ? "fp16" : "bf16";
    j["step_seconds"] = r.shape.step_seconds;
    j["checkpoint_every_s"] = r.checkpoint_every_s;
    j["checkpoint_every_steps"] = r.shape.checkpoint_every_steps;
    j["checkpoint_seconds"] = r.shape.checkpoint_seconds;
    j["phase_markers"] = r.shape.report_phase;
    j["resumed_from"] =
        r.resumed_from >= 0 ? json(p.runs[r.resumed_from].id) : json(nullptr);
    j["fault"] = r.fault >= 0 ? json(p.faults[r.fault].id) : json(nullptr);
    jobs.push_back(std::move(j));
  }
  t["jobs"] = std::move(jobs);

  const char* const kSeverities[] = {"P3", "P2", "P1", "P0"};
  json faults = json::array();
  for (size_t i = 0; i < p.faults.size(); ++i) {
    const PlannedFault& pf = p.faults[i];
    const ResolvedFault& f = pf.fault;
    const PlannedRun& run = p.runs[pf.run];
    const std::optional<FaultOnset>& onset = result.onsets[i];
    const double start = onset.has_value() ? onset->ts : pf.start_ts;
    const double run_end = std::min(run.end_ts, end);
    double fault_end =
        f.spec.duration_seconds.has_value()
            ? std::min(start + *f.spec.duration_seconds, run.end_ts)
            : run_end;
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
      j["nodes"] = e.nodes ? json(f.spec.nodes) : json(nullptr);
      j["ts"] = start + e.after_seconds;
      ex.push_back(std::move(j));
    }
    const bool node_fault = IsNodeFault(f);
    json j;
    j["id"] = pf.id;
    j["kind"] = f.spec.kind;
    j["run"] = run.id;
    j["job"] = run.job;
    j["job_gpus"] = static_cast<int>(run.nodes.size()) * options.gpus;
    j["node"] = on_node ? json(f.spec.node) : json(nullptr);
    j["nodes"] = f.spec.nodes.empty() ? json(nullptr) : json(f.spec.nodes);
    j["gpu"] = on_gpu ? json(*f.spec.gpu) : json(nullptr);
    j["dev"] =
        f.spec.kind == "packet_loss_hang" ? json(f.spec.dev) : json(nullptr);
    json where;
    where["node"] = node_fault ? json(f.spec.node) : json(nullptr);
    where["gpu"] = node_fault ? json(*f.spec.gpu) : json(nullptr);
    j["injected_on"] = std::move(where);
    j["magnitude"] = f.magnitude;
    if (f.xid_code != 0) j["xid"] = f.xid_code;
    j["start_ts"] = start;
    j["start_step"] = onset.has_value() ? json(onset->step) : json(nullptr);
    j["end_ts"] = fault_end;
    j["kills_job"] = FaultKillsJob(f);
    j["lemon"] = pf.lemon;
    j["severity"] = expected.empty() ? json(nullptr) : json(kSeverities[worst]);
    j["expected"] = std::move(ex);
    j["side_effect_kinds"] = SideEffectKinds(f);
    faults.push_back(std::move(j));
  }
  t["faults"] = std::move(faults);

  json lemons = json::array();
  for (const PlannedLemon& l : p.lemons) {
    json j;
    j["node"] = names[l.node];
    j["gpu"] = l.gpu;
    json ids = json::array();
    for (int f : l.faults) ids.push_back(p.faults[f].id);
    j["faults"] = std::move(ids);
    lemons.push_back(std::move(j));
  }
  t["lemons"] = std::move(lemons);
  return t.dump(1) + "\n";
}

}  // namespace vigil::agent
