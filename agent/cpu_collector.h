// Host CPU time from the "cpu " line of <proc_root>/stat: how much of the
// node's CPU time goes to waiting for I/O (a dataloader starved by slow
// storage) and how much to work.
//
// Series (no labels):
//   host_cpu_iowait_seconds_total   iowait time, summed over all CPUs
//       (USER_HZ ticks / USER_HZ). Passed through as read: on some kernels
//       iowait steps back a little; the server treats that as a reset.
//   host_cpu_iowait_ratio   iowait / all CPU time over the last tick.
//   host_cpu_busy_ratio   user + nice + system + irq + softirq + steal over
//       all CPU time over the last tick.
// All CPU time is user + nice + system + idle + iowait + irq + softirq +
// steal (guest time is already inside user and nice). The ratios need two
// readings: the first tick, and a tick where the total did not grow, emit
// none. They are clamped to [0, 1].
#ifndef VIGIL_AGENT_CPU_COLLECTOR_H_
#define VIGIL_AGENT_CPU_COLLECTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/collector.h"
#include "agent/host_io.h"

namespace vigil::agent {

struct CpuOptions {
  // Root of procfs; times come from <proc_root>/stat. Default "/proc".
  std::string proc_root = "/proc";
  // Clock ticks per second of /proc/stat. Default 0: sysconf(_SC_CLK_TCK).
  // Must be >= 0.
  int64_t user_hz = 0;
};

// Collects host CPU time. /proc/stat is kept open and re-read every tick.
// Not thread-safe (the agent calls it from one thread).
class CpuCollector : public Collector {
 public:
  // kInvalidArgument if user_hz < 0; kInternal if it is 0 and sysconf
  // cannot tell. Does no other I/O.
  static absl::StatusOr<std::unique_ptr<CpuCollector>> Create(
      CpuOptions options);

  std::string_view name() const override { return "cpu"; }
  // An error if <proc_root>/stat cannot be opened, so the agent runs
  // without this collector.
  absl::Status Start(EventSink* events) override;
  // Appends the series above. kDataLoss (nothing added) if the "cpu " line
  // is missing or does not parse; a read error's status otherwise.
  absl::Status Collect(Tick* tick) override;

 private:
  // Cumulative USER_HZ ticks.
  struct Times {
    uint64_t total = 0;
    uint64_t busy = 0;
    uint64_t iowait = 0;
  };

  CpuCollector(CpuOptions options, int64_t user_hz);
  absl::Status OpenStat();
  // The times of the "cpu " line at the start of `text`, or kDataLoss.
  absl::StatusOr<Times> Parse(std::string_view text) const;

  CpuOptions options_;
  int64_t user_hz_;
  std::optional<HostFile> stat_;
  std::optional<Times> last_;
  std::vector<char> buf_;  // read buffer, reused
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_CPU_COLLECTOR_H_
