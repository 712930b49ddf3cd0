#include "rules/hint.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vigil {

bool IsHangConsequence(AnomalyKind k) {
  using K = AnomalyKind;
  switch (k) {
    case K::kPeerPowerLow:
    case K::kClockLow:
    case K::kNvlinkTrafficLow:
    case K::kBaselineLow:
    case K::kBaselineHigh:
    case K::kThroughputDrop:
    case K::kMfuLow:
    case K::kPeriodicStall:
      return true;
    default:
      return false;
  }
}

namespace {

using K = AnomalyKind;

// What one category of evidence says: distinct conditions, where.
struct Signal {
  std::set<std::string> conditions;
  double first_ts = std::numeric_limits<double>::infinity();
  std::vector<std::string> kinds;  // Distinct kind names, in first-seen order.
  std::vector<std::string> nodes;  // Distinct nodes.
  std::optional<int> gpu;
  bool gpus_differ = false;
  std::string dev;
  std::vector<int> xids;

  void Add(const Anomaly& a) {
    conditions.insert(absl::StrCat(std::string(AnomalyKindName(a.kind)), "|",
                                   a.node, "|", a.gpu ? *a.gpu : -1, "|", a.dev,
                                   "|", a.metric));
    first_ts = std::min(first_ts, a.ts);
    const std::string kind(AnomalyKindName(a.kind));
    const std::string name =
        a.kind == K::kBaselineHigh || a.kind == K::kBaselineLow
            ? absl::StrCat(a.metric,
                           a.kind == K::kBaselineHigh ? " high" : " low")
            : kind;
    if (std::find(kinds.begin(), kinds.end(), name) == kinds.end()) {
      kinds.push_back(name);
    }
    if (!a.node.empty() &&
        std::find(nodes.begin(), nodes.end(), a.node) == nodes.end()) {
      nodes.push_back(a.node);
    }
    if (a.gpu) {
      if (gpu && *gpu != *a.gpu) gpus_differ = true;
      if (!gpu) gpu = a.gpu;
    }
    if (dev.empty()) dev = a.dev;
    if (a.kind == K::kXid) {
      if (a.code) {
        xids.push_back(*a.code);
      } else if (a.detail.rfind("xid ", 0) == 0) {
        xids.push_back(std::atoi(a.detail.c_str() + 4));
      }
    }
    for (const std::string& n : a.nodes) {
      if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) {
        nodes.push_back(n);
      }
    }
  }
  bool Has(std::string_view kind) const {
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  }
  bool empty() const { return conditions.empty(); }
  // "n3 gpu5", "n7 mlx5_0", "nodes n1, n2".
  std::string Where() const {
    if (nodes.empty()) return "the job";
    if (nodes.size() > 1)
      return absl::StrCat("nodes ", absl::StrJoin(nodes, ", "));
    std::string w = nodes[0];
    if (gpu && !gpus_differ) absl::StrAppend(&w, " gpu", *gpu);
    if (!dev.empty()) absl::StrAppend(&w, " ", dev);
    return w;
  }
};

constexpr size_t kCategories = static_cast<size_t>(HintCategory::kLifecycle) + 1;

std::string GpuText(const Signal& s, bool slowed) {
  std::string t = absl::StrCat("GPU hardware on ", s.Where(), " (",
                               absl::StrJoin(s.kinds, ", "), "). ");
  if (slowed) t += "Synchronous training runs at the pace of its slowest GPU. ";
  const bool thermal = s.Has("thermal_throttle") || s.Has("clock_low") ||
                       s.Has("gpu_temperature_celsius high");
  if (thermal) {
    t += "Check cooling of that GPU: fans, inlet air, heatsink/cold-plate "
         "contact (nvidia-smi -q -d TEMPERATURE,PERFORMANCE). ";
  } else if (s.Has("peer_power_low")) {
    t += "Check its power delivery and caps (nvidia-smi -q -d POWER, PSU, "
         "power-brake 0x80). ";
  }
  bool app_xid = !s.xids.empty();
  for (int x : s.xids)
    app_xid = app_xid && (x == 13 || x == 31 || x == 43 || x == 45);
  if (app_xid && s.kinds.size() == 1) {
    t += "XID 13/31/43/45 are usually the application's fault (illegal "
         "memory access): rerun with CUDA_LAUNCH_BLOCKING=1; suspect the GPU "
         "only if it recurs on the same card.";
  } else if (s.Has("ecc_dbe") || s.Has("xid") || s.Has("gpu_missing") ||
             s.Has("row_remap_pending") || s.Has("ecc_sbe_rate")) {
    t += "Drain the node, reset the GPU (nvidia-smi -r) and run dcgmi diag "
         "-r 3; replace the GPU if errors recur.";
  } else if (!thermal && !s.Has("peer_power_low")) {
    t += "Run dcgmi diag -r 3 on the node.";
  }
  return t;
}

std::string CommText(const Signal& s, bool hang) {
  std::string t = absl::StrCat("Communication on ", s.Where(), " (",
                               absl::StrJoin(s.kinds, ", "), "). ");
  if (s.Has("net_drops") || s.Has("net_retransmits") ||
      s.Has("net_link_down") || s.dev.size() > 0) {
    t += "RDMA: check ibstat / ibv_devinfo, the cable and transceiver of the "
         "port and the switch port counters; even 0.01 % loss stalls NCCL's "
         "ring. ";
  }
  if (s.Has("nvlink_errors") || s.Has("nvlink_traffic_low")) {
    t += "NVLink: check nvidia-smi nvlink -e / -s; a damaged or loose link "
         "falls back to PCIe: reseat or replace the board. ";
  }
  if (hang) {
    t += "The job is stuck in a collective: restart it from the last "
         "checkpoint without the faulty node (NCCL_DEBUG=INFO names the "
         "stuck rank).";
  }
  return t;
}

std::string DataText(const Signal& s, bool oscillation) {
  std::string t = absl::StrCat("Data pipeline on ", s.Where(), " (",
                               absl::StrJoin(s.kinds, ", "), "). ");
  if (oscillation) {
    t += "Gradient norm is normal while the loss oscillates and input is "
         "slow: suspect the data (a corrupt, repeated or unshuffled shard), "
         "not the learning rate. ";
  }
  t += "GPUs wait for input: raise DataLoader num_workers and "
       "prefetch_factor, use pin_memory/persistent_workers, check storage "
       "latency (iostat -x, network filesystem) and shard sizes.";
  return t;
}

std::string ModelText(const Signal& s) {
  std::string t = absl::StrCat("Model/hyper-parameters (",
                               absl::StrJoin(s.kinds, ", "), "). ");
  if (s.Has("loss_nan") || s.Has("grad_nan")) {
    t += "Numerics diverged: resume from the last good checkpoint, skip the "
         "offending batch, lower the learning rate or lengthen warm-up "
         "(fp16: prefer bf16). ";
  }
  if (s.Has("grad_explosion")) {
    t += "Gradient norm is exploding: enable clipping "
         "(clip_grad_norm_ ~1.0) and lower the learning rate; inspect the "
         "batches at the spike. ";
  }
  if (s.Has("loss_oscillation")) {
    t += "Loss oscillates with a normal dataloader: the learning rate is "
         "likely too high or the batch too small. ";
  }
  if (s.Has("loss_scale_thrash")) {
    t += "fp16 overflows repeatedly: switch to bf16, lower the learning "
         "rate, look for inf in attention logits/norms. ";
  }
  if (s.Has("grad_vanishing")) {
    t += "Gradient collapsed: check the LR schedule (decayed to 0?), frozen "
         "parameters, dead activations or a detached graph. ";
  }
  if (s.Has("train_loss high")) {
    t += "Loss is rising: lower the learning rate, check the newest data "
         "shards, consider rolling back a checkpoint. ";
  }
  return t;
}

std::string MemoryText(const Signal& s) {
  std::string t = absl::StrCat("GPU memory on ", s.Where(), " (",
                               absl::StrJoin(s.kinds, ", "), "). ");
  if (s.Has("fragmentation") || s.Has("torch_alloc_retries_total high")) {
    t += "The caching allocator is fragmented: call torch.cuda.empty_cache() "
         "at phase boundaries or set "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. ";
  }
  if (s.Has("oom_forecast")) {
    t += "Heading for OOM: reduce the micro-batch, enable activation "
         "checkpointing, look for tensors kept across steps (a leak). ";
  }
  return t;
}

std::string NodeText(const Signal& s) {
  if (s.Has("repeat_offender")) {
    return absl::StrCat(
        "Node ", s.Where(),
        " keeps failing across jobs: drain it (scontrol update NodeName=",
        s.nodes.empty() ? std::string("<node>") : s.nodes[0],
        " State=DRAIN Reason=vigil-lemon, or kubectl cordon), run dcgmi diag "
        "-r 3 and the vendor's field diagnostics, and return it to service "
        "only once they pass.");
  }
  if (s.Has("job_unreachable")) {
    return absl::StrCat(
        "The scheduler still runs the job, but none of its nodes (", s.Where(),
        ") reports: look for a network partition between them and Vigil, "
        "then at the nodes themselves (ping, BMC/IPMI) and their agents.");
  }
  if (s.Has("idle_node_silent") && !s.Has("node_silent")) {
    return absl::StrCat(
        "Node ", s.Where(),
        " stopped reporting while it ran no training job: check reachability "
        "(ping, BMC/IPMI) and the agent (systemctl status vigil-agent) "
        "before it is given new work.");
  }
  const bool several = s.nodes.size() > 1;
  return absl::StrCat(
      several ? "Nodes " : "Node ", s.Where(),
      several ? " stopped reporting together: suspect what they share (rack "
                "power, a top-of-rack switch, a network partition) before the "
                "nodes themselves; "
              : " stopped reporting: ",
      "check reachability (ping, BMC/IPMI), the kernel log (journalctl -k: "
      "panic, Xid, OOM killer) and the agent (systemctl status vigil-agent); "
      "restart the job from its last checkpoint without the node",
      several ? "s." : ".");
}

std::string ApplicationText(const Signal& s) {
  return absl::StrCat(
      "The job's own code faulted on the GPU (", absl::StrJoin(s.kinds, ", "),
      s.xids.empty() ? "" : absl::StrCat("; xid ", absl::StrJoin(s.xids, ", ")),
      "): XID 13/31/43/45 are illegal memory accesses, MMU faults or kernels "
      "that stopped - rerun with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer "
      "to find the kernel. Suspect the GPU only if it recurs on the same card "
      "across jobs (Vigil then reports the node as a repeat offender).");
}

}  // namespace

Hint BuildHint(HintCategory primary, const std::vector<Observation>& recent) {
  double stall_start = std::numeric_limits<double>::infinity();
  bool hang = false;
  for (const Observation& o : recent) {
    if (o.anomaly.kind == K::kJobHang && std::isfinite(o.anomaly.value)) {
      hang = true;
      stall_start = std::min(stall_start, o.anomaly.ts - o.anomaly.value);
    }
  }
  std::array<Signal, kCategories> sig;
  for (const Observation& o : recent) {
    if (IsHangConsequence(o.anomaly.kind) && o.anomaly.ts >= stall_start) {
      continue;
    }
    sig[static_cast<size_t>(o.category)].Add(o.anomaly);
  }
  auto S = [&](HintCategory c) -> const Signal& {
    return sig[static_cast<size_t>(c)];
  };
  HintCategory cat = primary;
  if (primary == HintCategory::kPerformance) {
    size_t best = 0;
    double best_ts = std::numeric_limits<double>::infinity();
    for (HintCategory c :
         {HintCategory::kGpuHardware, HintCategory::kCommunication,
          HintCategory::kDataPipeline, HintCategory::kNode}) {
      const Signal& s = S(c);
      if (s.empty()) continue;
      if (s.conditions.size() > best ||
          (s.conditions.size() == best && s.first_ts < best_ts)) {
        best = s.conditions.size();
        best_ts = s.first_ts;
        cat = c;
      }
    }
  } else if (primary == HintCategory::kModel) {
    const Signal& m = S(HintCategory::kModel);
    const bool grad =
        m.Has("grad_explosion") || m.Has("grad_vanishing") || m.Has("grad_nan");
    if (m.Has("loss_oscillation") && !grad &&
        !S(HintCategory::kDataPipeline).empty()) {
      cat = HintCategory::kDataPipeline;
    }
  }
  Hint hint;
  hint.category = cat;
  switch (cat) {
    case HintCategory::kGpuHardware:
      hint.text = GpuText(S(cat), !S(HintCategory::kPerformance).empty());
      break;
    case HintCategory::kCommunication:
      hint.text = CommText(S(cat), hang);
      break;
    case HintCategory::kDataPipeline:
      hint.text = DataText(S(cat), primary == HintCategory::kModel);
      break;
    case HintCategory::kModel:
      hint.text = ModelText(S(cat));
      break;
    case HintCategory::kMemory:
      hint.text = MemoryText(S(cat));
      break;
    case HintCategory::kNode:
      hint.text = NodeText(S(cat));
      break;
    case HintCategory::kPerformance:
      if (hang) {
        hint.text =
            "Job hang with no correlated data, network or GPU anomaly: dump "
            "the stacks of all ranks (py-spy dump); NCCL_DEBUG=INFO and "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 make a stuck collective fail "
            "fast and name the rank.";
      } else if (S(cat).Has("mfu_low") && S(cat).kinds.size() == 1) {
        hint.text =
            "MFU below 40 %: check compute/communication overlap, kernel "
            "fusion (torch.compile, flash attention) and the micro-batch "
            "size.";
      } else {
        hint.text =
            "No data, communication or GPU anomaly correlates: profile a "
            "step (torch.profiler / nsys) for a slower operator and compare "
            "with recent code or configuration changes.";
      }
      break;
    case HintCategory::kApplication:
      hint.text = ApplicationText(S(cat));
      break;
    case HintCategory::kLifecycle:
      hint.text =
          "A job's end is part of its life: recorded on its timeline, "
          "nothing to do. If it should still run, check the scheduler "
          "(squeue / kubectl get pods) and the job's log.";
      break;
    case HintCategory::kGeneral:
      hint.text = absl::StrCat(
          "Outside its learned baseline (", absl::StrJoin(S(cat).kinds, ", "),
          ") on ", S(cat).Where(),
          "; informational: correlate with other incidents of the job.");
      break;
  }
  while (!hint.text.empty() && hint.text.back() == ' ') hint.text.pop_back();
  return hint;
}

}  // namespace vigil
