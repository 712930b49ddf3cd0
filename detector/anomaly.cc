#include "detector/anomaly.h"

#include <array>

namespace vigil {
namespace {

constexpr std::array<std::string_view, 34> kNames = {
    "loss_nan",          "grad_nan",
    "ecc_dbe",           "nvlink_errors",
    "net_drops",         "net_retransmits",
    "net_link_down",     "xid",
    "row_remap_pending", "gpu_missing",
    "node_silent",       "job_hang",
    "baseline_high",     "baseline_low",
    "peer_power_low",    "thermal_throttle",
    "clock_low",         "nvlink_traffic_low",
    "oom_forecast",      "fragmentation",
    "periodic_stall",    "throughput_drop",
    "grad_explosion",    "grad_vanishing",
    "loss_oscillation",  "loss_scale_thrash",
    "ecc_sbe_rate",      "mfu_low",
    "job_ended",         "idle_node_silent",
    "job_unreachable",   "repeat_offender",
    "gpu_hours_at_risk", "fleet_wide_fault",
};
static_assert(static_cast<size_t>(AnomalyKind::kFleetWideFault) + 1 == kNames.size());

}  // namespace

std::string_view AnomalyKindName(AnomalyKind kind) {
  return kNames[static_cast<size_t>(kind)];
}

std::optional<AnomalyKind> ParseAnomalyKind(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<AnomalyKind>(i);
  }
  return std::nullopt;
}

}  // namespace vigil
