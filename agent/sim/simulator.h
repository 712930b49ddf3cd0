// A simulated GPU training node: produces, tick by tick, every metric of the
// catalogue in docs (REQUIREMENTS.md "Metric catalogue") as a healthy
// multi-GPU node running BF16 data-parallel training would report it.
//
// Pure: no I/O, no clock. The caller passes each tick's Unix time, so a run is
// a deterministic function of (options, tick times, scenario).
#ifndef VIGIL_AGENT_SIM_SIMULATOR_H_
#define VIGIL_AGENT_SIM_SIMULATOR_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/series_key.h"

namespace vigil::agent {

// Extra variation of a "noisy but healthy" job (spiky kernels, uneven
// pipeline stages). All zero (the default): the quiet healthy job.
struct SimulatorNoise {
  // Standard deviation of a computing GPU's power from one sample to the
  // next, watts.
  double power_sd_watts = 0;
  // > 0: each GPU's fixed power offset is drawn uniformly within
  // +-this many watts (per job and node) instead of the node's own.
  double power_offset_watts = 0;
  // The SM clock reads up to this fraction below its value (half-normal).
  double clock_jitter = 0;
  // Each GPU's NVLink traffic varies uniformly within +-this fraction from
  // one sample to the next.
  double nvlink_jitter = 0;
};

// What belongs to the node rather than to the job running on it: hardware
// counters (ECC, NVLink, XID, PCIe, NIC, disk) and GPU temperatures. A node
// that changes jobs hands it from one Simulator to the next, so counters
// stay monotonic and temperatures move continuously.
struct NodeHardware {
  double ts = 0;  // time of the tick that left this state
  // By series index of the node's catalogue (Simulator::series()): counter
  // values and their sub-unit remainders. Entries of the training process
  // (torch_*, train_*) are not carried: a new process starts from zero.
  std::vector<double> counters;
  std::vector<double> carry;
  std::vector<double> gpu_temperature;  // lagged temperature per GPU
};

// Shape of the simulated node and its job. Every field has a usable default.
struct SimulatorOptions {
  // Node name; mixed into the seed so that nodes with the same seed differ.
  std::string node = "node0";
  // Job name reported with every frame.
  std::string job = "llama-70b";
  // GPUs on the node (label gpu="0".."gpus-1"). 1..64.
  int gpus = 8;
  // RDMA NICs (label dev="mlx5_0"..). 0..64. Default: one per GPU.
  int nics = 8;
  // Local disks the dataloader reads from (label dev).
  std::vector<std::string> disks = {"nvme0n1", "nvme1n1"};
  // Seed of all randomness; same seed, node and tick times give the same run.
  uint64_t seed = 1;
  // Training step the node is on at the first tick (a resumed job > 0).
  int64_t start_step = 0;
  // Mean seconds per training step (noise is added). Step timing, loss and
  // grad norm depend on (seed, job) only: every node of a synchronous job
  // steps in lockstep and reports the same training readings.
  double step_seconds = 1.7;
  // Tokens each GPU's rank processes per step.
  double tokens_per_step_per_gpu = 2048;
  // Model parameters (for MFU: 6 * params FLOPs per token).
  double model_params = 70e9;
  // Peak dense BF16 FLOP/s of one GPU (H100 SXM: 989 TFLOP/s).
  double peak_flops_per_gpu = 989e12;
  // Learning-rate warm-up length in steps; grad norm is higher during it.
  int64_t warmup_steps = 200;
  // A checkpoint is written whenever the step reaches a multiple of this;
  // 0 disables checkpoints.
  int64_t checkpoint_every_steps = 1000;
  // Seconds a checkpoint stalls training (GPUs dip, train_phase = 1).
  double checkpoint_seconds = 6.0;
  // Mixed precision with fp16 and a GradScaler: emits train_loss_scale.
  // The default, bf16, has no loss scale.
  bool fp16 = false;
  // Board power limit in watts; power above it is clamped and sets the
  // "SW power cap" throttle bit (0x4).
  double power_limit_watts = 700.0;
  // Framebuffer size per GPU (H100 80GB: 81559 MiB).
  double gpu_memory_total_bytes = 81559.0 * 1048576.0;

  // The fields below default to the behaviour of a job that has been
  // running since before the first tick; vigil-sim --multi-job sets them.

  // True: the node runs no job (reported as job "idle"): no training
  // progress, no train_* or torch_* samples, idle GPUs (~65 W, utilization
  // 0, idle clocks, ~0.5 GiB framebuffer), quiet NICs and disks.
  bool idle = false;
  // Seconds from the first tick before the first step starts (process
  // start, checkpoint load): GPU memory climbs to the working set, GPUs
  // draw little, no train_* samples until the first step completes. 0: the
  // job is already training at the first tick.
  double startup_seconds = 0;
  // > 0: the first steps after start_step are slower (kernel compilation,
  // allocator warm-up), by 1 + 1.5 exp(-k / ramp_steps) for the k-th.
  int ramp_steps = 0;
  // Whether the training process reports train_phase (checkpoint and eval
  // markers). Without it the server must infer checkpoints from power.
  bool report_phase = true;
  // fp16 only: a GradScaler's dynamics instead of a fixed 65536: a scale
  // search halving the scale over the first 3-6 steps, then an overflow
  // step (grad norm Inf, scale halved) now and then (mostly soon after the
  // scale grew past what the model tolerates; rarely spuriously) and growth
  // x2 after 2000 clean steps. A function of (seed, job, step): all nodes
  // agree and a resumed job continues its scale.
  bool grad_scaler = false;
  // Variation of a noisy but healthy job.
  SimulatorNoise noise;
  // The node's hardware state to continue from (a node changing jobs);
  // unset: counters start where a node up for a while would be.
  std::optional<NodeHardware> hardware;
};

// One GPU's readings for a tick before quantization. Rates are already
// integrated over the tick: *_bytes and *_errors fields are increments.
struct GpuTick {
  bool present = true;  // false: the GPU is gone and reports nothing
  // Board power this GPU would draw computing at full clock for the whole
  // tick (already capped). Scenarios derive a straggler's power from it.
  double busy_power_watts = 0;
  double utilization = 0;
  double power_watts = 0;
  double temperature_celsius = 0;
  double memory_temperature_celsius = 0;
  double sm_clock_mhz = 0;
  uint32_t throttle_reasons = 0;
  double memory_used_bytes = 0;
  double memory_total_bytes = 0;
  double nvlink_tx_bytes = 0;
  double nvlink_rx_bytes = 0;
  uint64_t nvlink_crc_errors = 0;
  uint64_t nvlink_replay_errors = 0;
  uint64_t nvlink_recovery_errors = 0;
  uint64_t ecc_sbe = 0;
  uint64_t ecc_dbe = 0;
  bool remapped_rows_pending = false;
  uint64_t xid_errors = 0;
  uint32_t xid_last = 0;
  uint64_t pcie_replays = 0;
  double torch_reserved_bytes = 0;
  double torch_allocated_bytes = 0;
  uint64_t torch_alloc_retries = 0;
};

// One NIC's increments over a tick.
struct NicTick {
  double tx_bytes = 0;
  double rx_bytes = 0;
  uint64_t retransmits = 0;
  uint64_t drops = 0;
  uint64_t link_downed = 0;
};

// One disk's increments over a tick.
struct DiskTick {
  double read_bytes = 0;
  uint64_t reads = 0;
  double read_seconds = 0;
};

// Training-process readings of the last completed step.
struct TrainTick {
  int64_t step = 0;  // the completed step these readings describe
  double loss = 0;
  double grad_norm = 0;
  double tokens_per_second = 0;
  double step_time_seconds = 0;
  double dataloader_wait_seconds = 0;
  double mfu_ratio = 0;
  std::optional<double> loss_scale;  // fp16 only
  int phase = 0;                     // 0 train, 1 checkpoint, 2 eval
};

// How the seconds of one tick were spent. compute_s + barrier_s + data_s +
// checkpoint_s + startup_s = dt (except on the first tick, where dt = 0).
// On a job's first ticks startup_s (process start, before the first step)
// comes first.
struct TickTime {
  double dt = 0;            // seconds since the previous tick
  double compute_s = 0;     // GPUs busy computing
  double barrier_s = 0;     // GPUs spinning in a collective for a slower rank
  double data_s = 0;        // GPUs idle, waiting for this node's dataloader
  double checkpoint_s = 0;  // writing a checkpoint
  double startup_s = 0;     // starting up (SimulatorOptions::startup_seconds)
  // Full-speed-equivalent seconds of training progress (drives traffic and
  // disk reads), and the part of it in the backward pass.
  double work_s = 0;
  double backward_work_s = 0;
};

// Everything the node reports at one tick, before counters are accumulated
// and values quantized. A Scenario edits this.
struct NodeTick {
  double ts = 0;
  int64_t step = 0;
  bool node_up = true;  // false: the node sends no frame this tick
  // Whether the training process exists (torch_* samples) and has
  // completed a step (train_* samples). Both false on an idle node.
  bool process_present = true;
  bool train_present = true;
  TickTime time;
  std::vector<GpuTick> gpus;
  std::vector<NicTick> nics;
  std::vector<DiskTick> disks;
  TrainTick train;
};

// Where a tick is, for a Scenario deciding what to change.
struct ScenarioContext {
  const SimulatorOptions* options = nullptr;
  double ts = 0;  // end of the tick
  double seconds_since_start = 0;
  double dt = 0;  // length of the tick (0 on the first)
  int64_t step = 0;
};

// A wait inserted before a step's compute starts.
struct StepStall {
  double seconds = 0;
  // True: this node waits for its own dataloader (GPUs idle, the step's
  // train_dataloader_wait_seconds grows). False: it waits in the gradient
  // all-reduce for a slower node (GPUs spin in NCCL, utilization stays up).
  bool own_data = false;
};

// A modification of healthy behaviour (a fault, a slow node). The simulator
// asks it how fast training progresses, then lets it edit the healthy tick
// before counters are accumulated, so counters stay monotonic whatever it
// does. Each simulator calls StepSpeed, BarrierShare, StallBefore and Apply
// in tick order, so an implementation may keep state (mutable) as long as it
// stays deterministic; one instance per simulator, used from one thread.
class Scenario {
 public:
  virtual ~Scenario() = default;
  // Factor on training speed for the tick ending at `ctx` (1 healthy,
  // 0 hung, 0.7 = steps take 1/0.7 as long).
  virtual double StepSpeed(const ScenarioContext& ctx) const {
    (void)ctx;
    return 1.0;
  }
  // Of the time lost to a speed below 1, the fraction GPUs spend spinning
  // at a barrier (a straggler elsewhere, a hung ring: power near idle,
  // utilization high) rather than computing more slowly. Default 1.
  virtual double BarrierShare(const ScenarioContext& ctx) const {
    (void)ctx;
    return 1.0;
  }
  // A wait before step `step` computes (a dataloader stall). Default none.
  virtual StepStall StallBefore(const ScenarioContext& ctx,
                                int64_t step) const {
    (void)ctx;
    (void)step;
    return {};
  }
  // Edits the healthy readings of the tick in place. Must not resize the
  // gpus/nics/disks vectors: a missing GPU is `present = false`.
  virtual void Apply(const ScenarioContext& ctx, NodeTick* tick) const = 0;
};

// A sample of a simulated frame: `series` indexes Simulator::series().
struct SimSample {
  uint32_t series = 0;
  double value = 0;
};

// What the node reports at one tick.
struct SimFrame {
  double ts = 0;
  int64_t step = 0;
  std::vector<SimSample> samples;
};

// Generates a node's frames. Not thread-safe: use from one thread.
class Simulator {
 public:
  // kInvalidArgument if `options` are out of range (gpus, nics, step
  // length, disk names). `scenario` may be null (healthy) and must outlive
  // the simulator.
  static absl::StatusOr<Simulator> Create(SimulatorOptions options,
                                          const Scenario* scenario = nullptr);

  // Every series the node can report, with normalized keys; SimSample::series
  // indexes this list. Fixed for the simulator's lifetime.
  const std::vector<SeriesKey>& series() const { return series_; }
  // The options the simulator was created with.
  const SimulatorOptions& options() const { return options_; }

  // Advances the node to Unix time `ts` and returns its frame, or nullopt
  // when the scenario has taken the node down. The first call only sets the
  // start; a `ts` not after the previous one advances nothing.
  std::optional<SimFrame> Tick(double ts);

  // The node's hardware state after the last tick, to hand to the
  // Simulator of the node's next job (SimulatorOptions::hardware).
  NodeHardware hardware() const;
  // The step of the last checkpoint that completed (start_step if none
  // has): where a job resumed after this run would start.
  int64_t checkpoint_step() const { return completed_checkpoint_step_; }

  // Whether series `key` belongs to the training process (train_*,
  // torch_*) rather than to the node.
  static bool IsProcessSeries(const SeriesKey& key);

 private:
  // Fixed per-GPU character: how this card differs from its peers.
  struct GpuConst {
    double power_offset_watts = 0;
    double temperature_offset_celsius = 0;
    double memory_temperature_offset_celsius = 0;
    double memory_headroom_bytes = 0;
  };

  Simulator(SimulatorOptions options, const Scenario* scenario);
  void BuildCatalogue();
  // Moves training forward by ctx.dt seconds; returns how they were spent.
  TickTime Advance(const ScenarioContext& ctx);
  NodeTick Healthy(double ts, const TickTime& time);
  NodeTick Idle(double ts, double dt);
  // Moves the lagged temperature of GPU `g` towards `target` over the tick.
  double LagTemperature(int g, double target, double ts, double dt);
  // The GradScaler's state after step `step` (grad_scaler).
  void AdvanceScaler(int64_t step) const;
  // Seconds step `step` takes on this node at full speed.
  double StepSeconds(int64_t step) const;
  // Training readings of completed step `step`.
  TrainTick TrainAt(int64_t step) const;
  // A standard normal draw fixed by (seed, job, step, which): the same on
  // every node of the job.
  double StepGauss(int64_t step, uint64_t which) const;
  SimFrame Emit(const NodeTick& tick);
  double Gauss();    // standard normal from rng_
  double Uniform();  // [0, 1) from rng_

  SimulatorOptions options_;
  const Scenario* scenario_;
  std::vector<SeriesKey> series_;
  uint64_t node_seed_;
  uint64_t job_seed_;
  std::mt19937_64 rng_;
  std::vector<GpuConst> gpu_const_;
  std::vector<double> gpu_temp_;  // lagged temperatures
  std::vector<double> counters_;  // one per series; gauges unused
  std::vector<double> carry_;     // sub-unit remainders of counters
  bool started_ = false;
  double start_ts_ = 0;
  double last_ts_ = 0;
  double progress_ = 0;         // steps, fractional
  double checkpoint_left_ = 0;  // seconds of checkpoint still to run
  int64_t last_checkpoint_step_ = -1;
  StepStall stall_;             // remaining wait before the current step
  double step_wall_ = 0;        // wall seconds of the current step so far
  double step_data_ = 0;        // of which waiting for data
  int64_t measured_step_ = -1;  // last step completed while simulated
  double measured_wall_ = 0;    // its wall seconds (without checkpoint)
  double measured_data_ = 0;    // its dataloader wait
  double startup_left_ = 0;     // seconds of startup still to run
  int64_t completed_checkpoint_step_ = 0;
  // Continuing a node's hardware (options.hardware): until the first tick,
  // temperatures lag from hardware_ts_ instead of starting at their target.
  bool continued_ = false;
  double hardware_ts_ = 0;
  std::vector<bool> process_;  // per series: IsProcessSeries
  // GradScaler (grad_scaler): the state after step `step`.
  struct Scaler {
    int64_t step = -1;
    double scale = 65536;
    int clean = 0;
    bool overflow = false;
  };
  mutable Scaler scaler_;
  int scaler_search_steps_ = 0;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SIM_SIMULATOR_H_
