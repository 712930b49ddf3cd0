#include "agent/collectors.h"

#include <utility>

#include "agent/cpu_collector.h"
#include "agent/disk_collector.h"
#include "agent/exporter_collector.h"
#include "agent/infiniband_collector.h"
#include "agent/nvml_collector.h"
#include "agent/training_endpoint.h"

namespace vigil::agent {

absl::StatusOr<std::vector<std::unique_ptr<Collector>>> MakeCollectors(
    const AgentConfig& config, Clock* clock) {
  std::vector<std::unique_ptr<Collector>> out;
  // Moves a created collector into `out`.
  auto add = [&out](auto made) -> absl::Status {
    if (!made.ok()) return made.status();
    out.push_back(std::move(*made));
    return absl::OkStatus();
  };
  if (config.nvml.enabled) {
    NvmlCollectorOptions o;
    o.library_path = config.nvml.library;
    o.events = config.nvml.events;
    o.clock = clock;
    out.push_back(std::make_unique<NvmlCollector>(std::move(o)));
  }
  if (config.infiniband.enabled) {
    InfinibandOptions o;
    o.sys_root = config.sysfs_root;
    if (absl::Status s = add(InfinibandCollector::Create(std::move(o)));
        !s.ok()) {
      return s;
    }
  }
  if (config.disk.enabled) {
    DiskOptions o;
    o.proc_root = config.proc_root;
    o.sys_root = config.sysfs_root;
    o.devices = config.disk.devices;
    if (absl::Status s = add(DiskCollector::Create(std::move(o))); !s.ok()) {
      return s;
    }
  }
  if (config.cpu.enabled) {
    CpuOptions o;
    o.proc_root = config.proc_root;
    if (absl::Status s = add(CpuCollector::Create(std::move(o))); !s.ok()) {
      return s;
    }
  }
  if (config.training.enabled) {
    TrainingCollectorOptions o;
    o.socket_path = config.training.socket;
    o.staleness_seconds = config.training.stale_seconds;
    o.disconnect_grace_seconds = config.training.disconnect_grace_seconds;
    if (config.training.verify_jobs == "scheduler") {
      SchedulerJobResolverOptions resolver;
      resolver.proc_root = config.proc_root;
      resolver.clock = clock;
      o.job_resolver =
          std::make_shared<SchedulerJobResolver>(std::move(resolver));
    }
    o.refuse_unverified = config.training.refuse_unverified;
    o.clock = clock;
    out.push_back(std::make_unique<TrainingCollector>(std::move(o)));
  }
  if (config.exporter.enabled) {
    ExporterOptions o;
    o.urls = config.exporter.urls;
    o.timeout_seconds = config.exporter.timeout_seconds;
    o.mapping = config.exporter.mapping;
    // The exporters are this node's: their host labels say nothing more.
    o.mapping.node_labels.clear();
    o.mapping.default_node = config.node;
    o.clock = clock;
    if (absl::Status s = add(ExporterCollector::Create(std::move(o))); !s.ok()) return s;
  }
  return out;
}

}  // namespace vigil::agent
