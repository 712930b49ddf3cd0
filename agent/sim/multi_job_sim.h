// A GPU cluster living its ordinary life, for long detection evaluations
// (vigil-sim --multi-job): jobs arrive, run, checkpoint, end in every way,
// get preempted and requeued, continue as new runs of their family; nodes
// sit idle between jobs; faults of the whole catalogue (agent/sim/scenarios.h)
// strike running jobs at random times. Frames are streamed in the offline
// replay format (agent/sim/cluster_sim.h), sorted by ts, tick by tick; a truth
// file (MultiJobTruthJson) says what ran where and what was injected.
//
// Everything is drawn from the seed: the same options give the same bytes.
// The schedule is planned up front (PlanCluster, pure); the frames are
// generated on the fly from it (SimulateMultiJob, pure apart from its sink).
//
// The cluster's life, as drawn (U = uniform, LU = log-uniform):
//  - Pre-training families: nodes / 32 of them (at least 1), of 16, 24 or 32
//    nodes (at most a third of the cluster; nodes / 4 on clusters under 12
//    nodes), already running at the first tick (started 1-20 h before, as
//    run r1-r3 of their family, resumed from step ~50k-300k past r1).
//    A run lasts U(6 h, 30 h) and ends preempted (60 %: requeued with the
//    same name), failed (25 %) or cancelled (15 %); the last two are
//    followed by the family's next job <family>-r<N+1>, submitted 10-60 min
//    later from the last checkpoint on a comparable node count (x0.75..x1.25).
//  - Other jobs, queued one after the other: 1, 2, 4, 8, 16 or 32 nodes
//    with weights 30/22/20/14/9/5 % (at most a quarter of the cluster: 16
//    of 64), LU(30 min, 24 h) of work
//    (at most 8 h on the lemon node), ending completed (64 %), cancelled
//    (12 %) or failed (14 %: a crash, every rank at the same step); 12 % are
//    preempted once or twice part-way (20-70 % of the work left) and
//    requeued. 15 % belong to a family (<family>-r1, -r2, ...): when such a
//    job fails or is cancelled its family's next job continues it, as for
//    pre-training. Names: <model>-<task>-<NNNN> (unique) or
//    <model>-<task>-<NNNN>-r<N> (families).
//  - Scheduling: a node is free again 60 s + (50 %: U(0, 4 min), 50 %:
//    exponential with mean 40 min) after its job's processes end (linger
//    agents: after their 300 s of lingering). Requeued and continued jobs
//    go first; a requeued job takes its previous nodes when they are all
//    free (70 %), otherwise any free nodes. Then the queue, first come
//    first served: its head waits for enough free nodes, and after 45 min
//    is resubmitted on what is free. Busy node-time is ~88 % over a week,
//    a little more over a day (all nodes busy at the start)
//    (ClusterPlan::busy_fraction).
//  - Per job: step time LU(0.5 s, 5 s) (92 %) or U(20 s, 60 s) (8 %, slow
//    jobs); bf16 (70 %) or fp16 (30 %, with a GradScaler:
//    SimulatorOptions::grad_scaler); a checkpoint every U(20, 60) min of
//    wall time (converted to steps) taking 10-120 s (bigger jobs longer);
//    train_phase markers (80 %); noisy but healthy (20 %: power sd
//    U(30, 40) W sample to sample, per-GPU offsets within +-25 W, SM clock
//    jitter ~2 %, NVLink +-30 %); a model of 7-70 B parameters at an MFU of
//    U(0.42, 0.55); one agent behaviour (below). A run starts with
//    U(30, 60) s of startup (memory climbing, no train_* samples) and its
//    first steps slower (SimulatorOptions::ramp_steps = 2).
//  - How a job's end shows in a node's frames (per job): "marker" (50 %):
//    the node's next frame is already under job "idle" (or its next job)
//    and carries "job_end": {"job", "step" (its last step on the node),
//    "reason"}; "linger" (25 %): for 300 s the node keeps reporting the
//    ended job, step frozen and its last train_*/torch_* readings repeated,
//    while the hardware reads idle (the process is gone), then "idle";
//    "vanish" (25 %): the node sends nothing until its next job starts.
//    An idle node reports job "idle" without a step, train_* or torch_*
//    samples. Hardware counters and temperatures belong to the node and go
//    on across jobs.
//  - Faults: faults_per_day of them, arriving evenly spaced (+-40 % of the
//    spacing) between 1 h after the start and 75 min before the end, each
//    kind drawn from a shuffled deck of every kind of FaultKindNames() (so
//    each kind comes once per round), placed on a running job chosen
//    uniformly among those that started >= 30 min before and end >= 15 min
//    after the fault (and fit the kind: rack_down on >= 8 nodes,
//    loss_scale_thrash on fp16 jobs); at most one fault per run; duration
//    U(20, 40) min; node, GPU and NIC uniform on the job. low_mfu goes to
//    the next new job of >= 90 min and spans its run. Faults that kill the
//    job (FaultKillsJob) end its run at the fault's end: requeued
//    (preempted, 60 %, always for families) or cancelled; their nodes leave
//    the schedule for U(2, 6) h: node_down/rack_down nodes silent, the
//    others reporting idle. rack_down takes 2-5 consecutive nodes of the
//    job.
//  - A lemon: one node of the short-jobs partition whose GPU gets the same
//    hardware fault (thermal_throttle or gpu_power_low_55w) in 3 different
//    jobs, the first at ~5 % of the run, the others at the first chance
//    after each third of min(3 days, 80 % of the run) more.
#ifndef VIGIL_AGENT_SIM_MULTI_JOB_SIM_H_
#define VIGIL_AGENT_SIM_MULTI_JOB_SIM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/sim/scenarios.h"
#include "agent/sim/simulator.h"

namespace vigil::agent {

// Shape and length of a multi-job run. Every field has a usable default.
struct MultiJobOptions {
  // Nodes, named n000, n001, ... (ClusterNodeNames). 1..4096.
  int nodes = 64;
  // GPUs (and RDMA NICs) per node. 1..64.
  int gpus = 8;
  // Simulated seconds; ticks at start_ts + k * interval for k = 0 .. while
  // below start_ts + seconds. >= 3600.
  double seconds = 86400;
  // Seconds between a node's frames. >= 0.1.
  double interval_seconds = 10;
  // Seed of all randomness.
  uint64_t seed = 1;
  // Unix time of the first tick.
  double start_ts = 1764000000.0;
  // Largest offset of a node's tick from the grid (as ClusterOptions).
  double jitter_seconds = 0.05;
  // Faults injected per simulated day; 0: none (and no lemon).
  double faults_per_day = 12;
  // Whether to inject a lemon node (with faults_per_day > 0).
  bool lemon = true;
};

// How a run ended.
enum class JobEnd { kCompleted, kCancelled, kFailed, kPreempted, kRunning };
// How a job's agent shows its end (header comment).
enum class AgentStyle { kMarker, kLinger, kVanish };

// "completed", "cancelled", "failed", "preempted", "running".
std::string_view JobEndName(JobEnd end);
// "marker", "linger", "vanish".
std::string_view AgentStyleName(AgentStyle agent);

// One run of a job: from its start on its nodes to the end of its
// processes. A requeued job has one run per start.
struct PlannedRun {
  std::string id;          // "<job>#<n>": the n-th run of the job, from 1
  std::string job;         // job name of its frames
  std::string family;      // "<family>" of "<family>-r<N>"; else the job name
  std::vector<int> nodes;  // indices into ClusterNodeNames
  double start_ts = 0;     // may be before the simulation's start
  double end_ts = 0;       // may be after the simulation's end
  JobEnd end = JobEnd::kCompleted;  // kRunning: still running at the end
  AgentStyle agent = AgentStyle::kMarker;
  // The run it continues from its last checkpoint (a requeue of the same
  // job or the family's previous job); -1: none.
  int resumed_from = -1;
  // Step at the start when resumed_from is -1.
  int64_t initial_step = 0;
  // The job's shape (job name, step time, precision, ...); node,
  // start_step and hardware are set per node when it starts.
  SimulatorOptions shape;
  double checkpoint_every_s = 0;
  bool noisy = false;
  int fault = -1;  // index into ClusterPlan::faults; -1: none
};

// A fault placed on a run.
struct PlannedFault {
  std::string id;  // "f001", ...
  int run = -1;
  // Resolved; spec.at_seconds counts from the run's start, spec.node is
  // empty for job-wide kinds.
  ResolvedFault fault;
  double start_ts = 0;  // planned start
  double end_ts = 0;    // planned end (low_mfu: the run's end)
  bool lemon = false;
};

// A node whose GPU faults again and again.
struct PlannedLemon {
  int node = 0;
  int gpu = 0;
  std::vector<int> faults;  // indices into ClusterPlan::faults
};

// What a node does from `from` to `to`.
struct NodeSegment {
  enum Kind {
    kIdle,    // reports job "idle"
    kRun,     // runs `run`
    kLinger,  // reports `run` frozen (linger agents), hardware idle
    kSilent,  // sends nothing (vanish agents, a node that is down)
  };
  Kind kind = kIdle;
  double from = 0;
  double to = 0;
  int run = -1;  // kRun, kLinger
  // kRun: the node's next frame after the run carries a job_end marker.
  bool marker = false;
};

// The planned life of the cluster.
struct ClusterPlan {
  std::vector<PlannedRun> runs;      // in the order they were planned
  std::vector<PlannedFault> faults;  // by start, numbered in that order
  std::vector<PlannedLemon> lemons;
  // Per node, contiguous and in time order, the first from before any
  // run, the last to after the simulation's end.
  std::vector<std::vector<NodeSegment>> segments;
  // Fraction of node-time within the simulated span spent in runs.
  double busy_fraction = 0;
};

// Plans the cluster's life. kInvalidArgument on bad options.
absl::StatusOr<ClusterPlan> PlanCluster(const MultiJobOptions& options);

// What a multi-job simulation produced.
struct MultiJobResult {
  ClusterPlan plan;
  uint64_t frames = 0;
  uint64_t samples = 0;
  double end_ts = 0;  // time of the last frame
  // Per run: its first step, and its last step on any node (-1: no frame).
  std::vector<int64_t> start_steps;
  std::vector<int64_t> end_steps;
  // Per fault: when it began (on its node; the earliest node for job-wide
  // kinds and rack_down); nullopt if it never did within the simulation.
  std::vector<std::optional<FaultOnset>> onsets;
};

// Plans and simulates the cluster, handing the JSONL output to `sink` in
// chunks of about a megabyte. Frames are those of agent/sim/cluster_sim.h,
// except that an idle node's have no "step", and a frame may carry
// "job_end": {"job": "<name>", "step": <int>, "reason": "<JobEndName>"}
// after "samples". kInvalidArgument on bad options.
absl::StatusOr<MultiJobResult> SimulateMultiJob(
    const MultiJobOptions& options,
    const std::function<void(std::string_view)>& sink);

// The truth file of a multi-job run, JSON:
//   {"mode": "multi_job", "nodes": [..], "gpus_per_node",
//    "interval_seconds", "seed", "start_ts", "end_ts", "frames", "samples",
//    "node_days", "faults_per_day", "busy_fraction",
//    "jobs": [{"run", "job", "family", "nodes", "gpus" (in all),
//      "start_ts", "end_ts", "start_step", "end_step", "end", "agent",
//      "noisy", "precision", "step_seconds", "checkpoint_every_s",
//      "checkpoint_every_steps", "checkpoint_seconds", "phase_markers",
//      "resumed_from" (a run id or null), "fault" (an id or null)}],
//    "faults": [{"id", "kind", "run", "job", "job_gpus", "node", "nodes",
//      "gpu", "dev", "injected_on": {"node", "gpu"}, "magnitude",
//      "start_ts", "start_step", "end_ts", "kills_job", "lemon",
//      "severity", "expected": [{"kinds", "severity", "node", "gpu",
//      "nodes", "ts"}], "side_effect_kinds"}],
//    "lemons": [{"node", "gpu", "faults": [ids]}]}
// "node"/"gpu" of a fault are set where an expected incident names them
// (as agent/sim/cluster_sim.h's TruthJson), "nodes" for rack_down (else null);
// "injected_on" says where a node-level fault sat in any case.
std::string MultiJobTruthJson(const MultiJobOptions& options,
                              const MultiJobResult& result);

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SIM_MULTI_JOB_SIM_H_
