// Block-device I/O counters from <proc_root>/diskstats, whole disks only.
//
// Series, label dev (the kernel's name: nvme0n1, sda, md0, dm-0):
//   disk_reads_total, disk_writes_total   completed reads / writes.
//   disk_read_bytes_total, disk_write_bytes_total   sectors read / written
//       times 512 (diskstats always counts 512-byte sectors).
//   disk_read_seconds_total, disk_write_seconds_total   ms spent reading /
//       writing, / 1000.
//   disk_io_seconds_total   ms the device had I/O in flight (field 10,
//       column 13), / 1000.
// Values are passed through as read: the kernel keeps the ms fields in 32
// bits, so they wrap after ~49.7 days of busy time; the server treats that
// as a counter reset.
#ifndef VIGIL_AGENT_DISK_COLLECTOR_H_
#define VIGIL_AGENT_DISK_COLLECTOR_H_

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

struct DiskOptions {
  // Root of procfs; the counters come from <proc_root>/diskstats.
  // Default "/proc".
  std::string proc_root = "/proc";
  // Root of sysfs; whole disks are the entries of <sys_root>/block.
  // Default "/sys".
  std::string sys_root = "/sys";
  // Devices to report, by diskstats name. Default empty: every whole disk,
  // i.e. every entry of <sys_root>/block (partitions are not there) whose
  // name does not start with one of `excluded_prefixes`.
  std::vector<std::string> devices;
  // Virtual and removable devices left out when `devices` is empty.
  // Default: loop, ram, zram, sr (optical), fd (floppy).
  std::vector<std::string> excluded_prefixes = {"loop", "ram", "zram", "sr",
                                                "fd"};
  // Seconds of tick time between re-listings of <sys_root>/block (a
  // hot-added disk shows up within this long). Default 60; 0 re-lists every
  // tick. Must be >= 0. Ignored when `devices` is set.
  double rescan_seconds = 60;
};

// Collects disk counters. diskstats is kept open and re-read every tick.
// A chosen device missing from diskstats, or whose line does not parse, is
// skipped and named in Collect's status; the others are still reported.
// Not thread-safe (the agent calls it from one thread).
class DiskCollector : public Collector {
 public:
  // kInvalidArgument if `options` are out of range (a negative rescan
  // interval, an empty device name or one with whitespace). Does no I/O.
  static absl::StatusOr<std::unique_ptr<DiskCollector>> Create(
      DiskOptions options);

  std::string_view name() const override { return "disk"; }
  // An error if <proc_root>/diskstats cannot be opened, so the agent runs
  // without this collector.
  absl::Status Start(EventSink* events) override;
  // Appends every chosen device's series; problems as described above.
  absl::Status Collect(Tick* tick) override;

 private:
  struct Disk {
    std::string name;
    std::vector<Label> labels;  // {"dev", name}
    bool seen = false;          // found in this tick's diskstats
  };

  explicit DiskCollector(DiskOptions options);
  // Opens <proc_root>/diskstats into diskstats_.
  absl::Status OpenDiskstats();
  // Sets disks_ (sorted by name) from the options or <sys_root>/block.
  void Discover(ProblemList* problems);
  // The chosen disk called `name`, or null.
  Disk* Find(std::string_view name);
  // Parses one diskstats line; adds its series if the device is chosen.
  void CollectLine(std::string_view line, Tick* tick, ProblemList* problems);

  DiskOptions options_;
  RescanTimer rescan_;
  std::vector<Disk> disks_;
  std::optional<HostFile> diskstats_;
  std::vector<char> buf_;  // read buffer, reused
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_DISK_COLLECTOR_H_
