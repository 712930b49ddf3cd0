#include "tests/detector/sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/series_key.h"

namespace vigil::sim {
namespace {

constexpr int kGpuSeries = 22;
constexpr int kNicSeries = 5;
constexpr const char* kGpuMetrics[kGpuSeries] = {
    "gpu_utilization_ratio",
    "gpu_power_watts",
    "gpu_temperature_celsius",
    "gpu_memory_temperature_celsius",
    "gpu_sm_clock_mhz",
    "gpu_throttle_reasons",
    "gpu_memory_used_bytes",
    "gpu_memory_total_bytes",
    "gpu_nvlink_tx_bytes_total",
    "gpu_nvlink_rx_bytes_total",
    "gpu_nvlink_crc_errors_total",
    "gpu_nvlink_replay_errors_total",
    "gpu_nvlink_recovery_errors_total",
    "gpu_ecc_sbe_total",
    "gpu_ecc_dbe_total",
    "gpu_remapped_rows_pending",
    "gpu_xid_errors_total",
    "gpu_xid_last",
    "gpu_pcie_replays_total",
    "torch_reserved_bytes",
    "torch_allocated_bytes",
    "torch_alloc_retries_total",
};
constexpr const char* kNicMetrics[kNicSeries] = {
    "net_tx_bytes_total", "net_rx_bytes_total", "net_retransmits_total",
    "net_drops_total", "net_link_downed_total"};
constexpr const char* kNodeMetrics[] = {"train_loss",
                                        "train_grad_norm",
                                        "train_tokens_per_second",
                                        "train_step_time_seconds",
                                        "train_dataloader_wait_seconds",
                                        "train_mfu_ratio",
                                        "disk_read_bytes_total",
                                        "disk_read_seconds_total",
                                        "train_loss_scale",
                                        "train_phase"};
constexpr double kTotal = 85899345920.0;  // 80 GiB

}  // namespace

std::string Cluster::NodeName(int i) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "n%03d", i);
  return buf;
}

Cluster::Cluster(Detector* detector, const SimOptions& options)
    : detector_(detector), o_(options), rng_(options.seed) {
  std::normal_distribution<double> offset(0, 8);
  for (int n = 0; n < o_.nodes; ++n) {
    gpu_offset_.emplace_back();
    temp_state_.emplace_back(o_.gpus, 0.0);
    for (int g = 0; g < o_.gpus; ++g) gpu_offset_[n].push_back(offset(rng_));
    std::vector<uint32_t> ids;
    auto add = [&](const char* metric, const char* label, std::string value) {
      SeriesKey key{metric, {{"job", o_.job}, {"node", NodeName(n)}}};
      if (label) key.labels.push_back({label, std::move(value)});
      (void)NormalizeSeriesKey(&key);
      if (detector_) (void)detector_->RegisterSeries(next_id_, key);
      ids.push_back(next_id_++);
    };
    for (int g = 0; g < o_.gpus; ++g) {
      for (const char* m : kGpuMetrics) add(m, "gpu", std::to_string(g));
    }
    for (int i = 0; i < o_.nics; ++i) {
      for (const char* m : kNicMetrics) {
        add(m, "dev", "mlx5_" + std::to_string(i));
      }
    }
    for (int i = 0; i < 8; ++i) add(kNodeMetrics[i], nullptr, "");
    if (o_.fp16) add(kNodeMetrics[8], nullptr, "");
    if (o_.report_phase) add(kNodeMetrics[9], nullptr, "");
    counters_.emplace_back(ids.size(), 1000.0);
    ids_.push_back(std::move(ids));
  }
  loss_scale_.assign(1, 65536);
}

double Cluster::FrameTs(int64_t frame) const {
  return o_.t0 + frame * o_.interval_s;
}

NodeValues Cluster::Healthy(int node, int64_t step, bool checkpoint) {
  std::normal_distribution<double> n01(0, 1);
  std::uniform_real_distribution<double> u01(0, 1);
  std::exponential_distribution<double> expo(1);
  NodeValues v;
  v.step = step;
  const double ramp = std::min(1.0, 0.25 + step / 150.0);
  v.gpu.resize(o_.gpus);
  for (int g = 0; g < o_.gpus; ++g) {
    GpuValues& x = v.gpu[g];
    const double off = gpu_offset_[node][g];
    x.power = (checkpoint ? 110 : 650 * ramp) + off + 12 * n01(rng_);
    const bool capped = u01(rng_) < 0.3;
    x.throttle = capped ? 4 : 0;
    x.clock = (capped ? 1860 : 1950) + 25 * n01(rng_);
    double& ts = temp_state_[node][g];
    ts = 0.95 * ts + 0.5 * n01(rng_);
    x.temp = (checkpoint ? 55 : 68) + off / 4 + ts;
    x.mem_temp = x.temp + 8;
    x.util = checkpoint ? 0.1 : 0.97;
    x.mem_total = kTotal;
    x.mem_used = std::min(1.0, 0.2 + step / 50.0) * o_.mem_fraction * kTotal +
                 2e7 * n01(rng_);
    x.reserved =
        std::min(1.0, 0.2 + step / 50.0) * 0.9 * kTotal + 1e8 * n01(rng_);
    x.allocated = x.reserved * (0.92 + 0.01 * n01(rng_));
    x.nvl_rate = checkpoint ? 1e6 : 40e9 * (1 + 0.08 * n01(rng_));
    x.sbe_inc = u01(rng_) < 1e-4 ? 1 : 0;
  }
  v.nic.resize(o_.nics);
  for (NicValues& x : v.nic) {
    x.tx_rate = checkpoint ? 1e8 : 12e9 * (1 + 0.1 * n01(rng_));
    x.rx_rate = checkpoint ? 1e8 : 12e9 * (1 + 0.1 * n01(rng_));
  }
  const double noise = 1 + 0.015 * n01(rng_);
  v.loss = (2.0 + 3.0 * std::exp(-step / 2000.0)) * noise +
           (u01(rng_) < 0.002 ? 0.5 : 0);
  v.grad_norm = std::exp(0.25 * n01(rng_)) *
                (0.8 + 0.5 * std::exp(-step / 500.0)) *
                (u01(rng_) < 0.002 ? 5 : 1);
  v.tokens = 3000 * ramp * (1 + 0.02 * n01(rng_));
  v.step_time = 1.0 * (1 + 0.02 * n01(rng_));
  v.dl_wait = 0.004 + 0.002 * expo(rng_);
  v.mfu = 0.5 * ramp + 0.01 * n01(rng_);
  v.loss_scale = loss_scale_[0];
  v.phase = checkpoint ? 1 : 0;
  v.disk_read_rate = 1e8 * std::max(0.0, 1 + 0.3 * n01(rng_));
  v.disk_seconds_rate = 0.01 * std::max(0.0, 1 + 0.3 * n01(rng_));
  return v;
}

void Cluster::Emit(int node, const NodeValues& v, double ts, Recorded* rec) {
  static thread_local std::vector<uint32_t> ids;
  static thread_local std::vector<double> vals;
  ids.clear();
  vals.clear();
  const std::vector<uint32_t>& nid = ids_[node];
  std::vector<double>& cum = counters_[node];
  const double dt = o_.interval_s;
  auto gauge = [&](size_t idx, double x) {
    ids.push_back(nid[idx]);
    vals.push_back(x);
  };
  auto counter = [&](size_t idx, double inc) {
    cum[idx] += inc;
    gauge(idx, cum[idx]);
  };
  for (int g = 0; g < o_.gpus; ++g) {
    const GpuValues& x = v.gpu[g];
    if (!x.present) continue;
    const size_t b = static_cast<size_t>(g) * kGpuSeries;
    gauge(b + 0, x.util);
    gauge(b + 1, x.power);
    gauge(b + 2, x.temp);
    gauge(b + 3, x.mem_temp);
    gauge(b + 4, x.clock);
    gauge(b + 5, x.throttle);
    gauge(b + 6, x.mem_used);
    gauge(b + 7, x.mem_total);
    counter(b + 8, x.nvl_rate * dt);
    counter(b + 9, x.nvl_rate * dt);
    counter(b + 10, x.crc_inc);
    counter(b + 11, x.replay_inc);
    counter(b + 12, x.recovery_inc);
    counter(b + 13, x.sbe_inc);
    counter(b + 14, x.dbe_inc);
    gauge(b + 15, x.remap_pending);
    counter(b + 16, x.xid_inc);
    gauge(b + 17, x.xid_last);
    counter(b + 18, x.pcie_inc);
    gauge(b + 19, x.reserved);
    gauge(b + 20, x.allocated);
    counter(b + 21, x.alloc_retry_inc);
  }
  for (int i = 0; i < o_.nics; ++i) {
    const NicValues& x = v.nic[i];
    const size_t b = static_cast<size_t>(o_.gpus) * kGpuSeries + i * kNicSeries;
    counter(b + 0, x.tx_rate * dt);
    counter(b + 1, x.rx_rate * dt);
    counter(b + 2, x.retrans_inc);
    counter(b + 3, x.drops_inc);
    counter(b + 4, x.downed_inc);
  }
  size_t b = static_cast<size_t>(o_.gpus) * kGpuSeries + o_.nics * kNicSeries;
  gauge(b++, v.loss);
  gauge(b++, v.grad_norm);
  gauge(b++, v.tokens);
  gauge(b++, v.step_time);
  gauge(b++, v.dl_wait);
  gauge(b++, v.mfu);
  counter(b++, v.disk_read_rate * dt);
  counter(b++, v.disk_seconds_rate * dt);
  if (o_.fp16) gauge(b++, v.loss_scale);
  if (o_.report_phase) gauge(b++, v.phase);
  samples_ += static_cast<int64_t>(ids.size());
  std::optional<int64_t> step;
  if (o_.report_steps) step = v.step;
  if (rec) {
    rec->node = node;
    rec->ts = ts;
    rec->step = step;
    rec->ids = ids;
    rec->values = vals;
    return;
  }
  FrameView f;
  const std::string name = NodeName(node);
  f.node = name;
  f.job = o_.job;
  f.step = step;
  f.ts = ts;
  f.ids = ids;
  f.values = vals;
  std::vector<Anomaly>* out = out_;
  detector_->AdvanceTime(ts, out);
  detector_->ProcessFrame(f, out);
}

void Cluster::Run(int64_t frames, const FaultFn& fault,
                  std::vector<Anomaly>* out) {
  out_ = out;
  Generate(frames, fault, nullptr);
  out_ = nullptr;
}

void Cluster::Record(int64_t frames, std::vector<Recorded>* out) {
  Generate(frames, nullptr, out);
}

void Cluster::Generate(int64_t frames, const FaultFn& fault,
                       std::vector<Recorded>* rec) {
  std::uniform_real_distribution<double> u01(0, 1);
  for (int64_t f = 0; f < frames; ++f, ++frame_) {
    bool checkpoint = false;
    if (ckpt_left_ > 0) {
      --ckpt_left_;
      checkpoint = true;
    } else {
      ++step_;
      if (o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0) {
        ckpt_left_ = o_.checkpoint_frames;
      }
      if (o_.fp16) {
        double& scale = loss_scale_[0];
        if (step_ < 12 && scale > 1024) {
          scale /= 2;  // GradScaler's initial search
        } else if (u01(rng_) < 1.0 / 1500) {
          scale /= 2;  // a rare overflow
        } else if (step_ % 1000 == 0) {
          scale *= 2;  // growth interval
        }
      }
    }
    const double spacing = o_.interval_s / (o_.nodes + 1);
    for (int n = 0; n < o_.nodes; ++n) {
      NodeValues v = Healthy(n, step_, checkpoint);
      if (o_.fp16 && step_ < 12) v.grad_norm = INFINITY;
      if (fault) fault(frame_, n, v);
      if (!v.send) continue;
      const double ts = FrameTs(frame_) + spacing * n;
      if (rec) {
        rec->emplace_back();
        Emit(n, v, ts, &rec->back());
      } else {
        Emit(n, v, ts, nullptr);
      }
    }
  }
}

}  // namespace vigil::sim
