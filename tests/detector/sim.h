// A synthetic training cluster for detector tests and benchmarks: healthy
// behaviour with warm-up, checkpoint dips, a falling noisy loss, per-GPU
// offsets and counters, plus a hook that injects faults. Deterministic for
// a given seed.
#ifndef VIGIL_TESTS_DETECTOR_SIM_H_
#define VIGIL_TESTS_DETECTOR_SIM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "detector/detector.h"

namespace vigil::sim {

// Per-GPU values of one frame. Counters are given as increases.
struct GpuValues {
  bool present = true;
  double power = 0, clock = 0, temp = 0, mem_temp = 0, util = 0;
  double throttle = 0;
  double mem_used = 0, mem_total = 0, reserved = 0, allocated = 0;
  double nvl_rate = 0;  // bytes/s per direction
  double crc_inc = 0, replay_inc = 0, recovery_inc = 0;
  double sbe_inc = 0, dbe_inc = 0, xid_inc = 0, pcie_inc = 0;
  double remap_pending = 0, xid_last = 0;
  double alloc_retry_inc = 0;
};

// Per-NIC values of one frame.
struct NicValues {
  double tx_rate = 0, rx_rate = 0;
  double retrans_inc = 0, drops_inc = 0, downed_inc = 0;
};

// Everything one node reports in one frame; fault hooks edit it.
struct NodeValues {
  bool send = true;  // false: the node is silent
  std::optional<int64_t> step;
  std::vector<GpuValues> gpu;
  std::vector<NicValues> nic;
  double loss = 0, grad_norm = 0, tokens = 0, step_time = 0, dl_wait = 0;
  double mfu = 0, loss_scale = 0, phase = 0;
  double disk_read_rate = 0, disk_seconds_rate = 0;
};

// Shape of the simulated job.
struct SimOptions {
  std::string job = "llama";
  int nodes = 2;
  int gpus = 8;
  int nics = 2;
  double interval_s = 1;
  double t0 = 1764000000;
  uint64_t seed = 1;
  int64_t checkpoint_every = 1000;  // steps
  int checkpoint_frames = 6;        // frames the dip lasts
  bool report_phase = false;        // send train_phase during checkpoints
  bool report_steps = true;
  double mem_fraction = 0.975;  // steady gpu_memory_used / total
  bool fp16 = false;  // report train_loss_scale with GradScaler behaviour
};

// Frame index, node index, values: a fault hook.
using FaultFn = std::function<void(int64_t frame, int node, NodeValues& v)>;

// Drives a Detector with simulated frames. Not thread-safe.
class Cluster {
 public:
  // Registers every series of the cluster with `detector`.
  Cluster(Detector* detector, const SimOptions& options);

  // Simulates `frames` more frames (each node once per frame, in ts
  // order), calling AdvanceTime then ProcessFrame, and appends anomalies.
  void Run(int64_t frames, const FaultFn& fault, std::vector<Anomaly>* out);

  // Time of frame `frame` of node 0 (the fault start time in tests).
  double FrameTs(int64_t frame) const;
  // Frames simulated so far.
  int64_t frame() const { return frame_; }
  // Samples handed to the detector so far.
  int64_t samples() const { return samples_; }

  // Builds the frames without a detector, for benchmarks: appends one
  // (ids, values, ts, node, step) record per node frame.
  struct Recorded {
    int node;
    double ts;
    std::optional<int64_t> step;
    std::vector<uint32_t> ids;
    std::vector<double> values;
  };
  void Record(int64_t frames, std::vector<Recorded>* out);
  // Node name of node index `i` ("n000").
  static std::string NodeName(int i);

 private:
  NodeValues Healthy(int node, int64_t step, bool checkpoint);
  void Emit(int node, const NodeValues& v, double ts, Recorded* rec);
  void Generate(int64_t frames, const FaultFn& fault,
                std::vector<Recorded>* rec);

  Detector* detector_;
  SimOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> gpu_offset_;  // per node, per gpu
  std::vector<std::vector<double>> temp_state_;
  std::vector<std::vector<double>> counters_;  // per node: cumulative
  std::vector<std::vector<uint32_t>> ids_;     // per node: series ids
  std::vector<double> loss_scale_;
  int64_t step_ = 0;
  int64_t frame_ = 0;
  int64_t samples_ = 0;
  int ckpt_left_ = 0;
  uint32_t next_id_ = 0;
  std::vector<Anomaly>* out_ = nullptr;
};

}  // namespace vigil::sim

#endif  // VIGIL_TESTS_DETECTOR_SIM_H_
