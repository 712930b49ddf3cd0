// RDMA NICs (InfiniBand and RoCE) from sysfs: per-port traffic, drop, error
// and retransmission counters and link state, read from
// <sys_root>/class/infiniband/<device>/ports/<port>/.
//
// Series (label dev = "<device>" when the device has one port, as mlx5_0,
// and "<device>:<port>" when it has several, as mlx4_0:2):
//   net_tx_bytes_total, net_rx_bytes_total   counters/port_xmit_data and
//       port_rcv_data, which count 4-byte words, times 4.
//   net_drops_total   counters/port_xmit_discards + port_rcv_errors: the
//       packets the port threw away, outbound (link down, no credits,
//       timeouts) and inbound (received with errors). Remote physical and
//       switch relay errors are left out (marked bad elsewhere; switch only).
//   net_retransmits_total   hw_counters/out_of_sequence + packet_seq_err +
//       local_ack_timeout_err + implied_nak_seq_err + roce_adp_retrans, the
//       ones the driver has: each is a packet or burst the transport had to
//       send again (receiver saw a gap; sender got a sequence NAK, an ack
//       timeout, or an implied NAK; RoCE adaptive retransmission). Absent on
//       ports without hw_counters (plain IB on older drivers).
//   net_link_downed_total   counters/link_downed.
//   net_symbol_errors_total   counters/symbol_error (bad symbols on the
//       wire: a cable or transceiver going bad).
//   net_link_error_recovery_total   counters/link_error_recovery (link
//       retrains that succeeded).
//   net_link_up   1 if `state` reads "4: ACTIVE", else 0 (DOWN, INIT, ARMED).
//   net_link_rate_gbps   `rate`, e.g. 400 from "400 Gb/sec (4X NDR)"; only
//       while the link is up (the rate of a down port means nothing).
// Counters are passed through as read (cumulative; a reset or wrap shows as
// a drop, which the server handles). The individual hw_counters are not
// sent: on mlx5 each hw_counters read costs a firmware command, and their
// sum carries the signal the detectors use.
#ifndef VIGIL_AGENT_INFINIBAND_COLLECTOR_H_
#define VIGIL_AGENT_INFINIBAND_COLLECTOR_H_

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

struct InfinibandOptions {
  // Root of sysfs. Default "/sys"; tests point it at a fixture tree.
  std::string sys_root = "/sys";
  // Seconds of tick time between re-discoveries of devices, ports and
  // counter files (a hot-added or removed NIC shows up or goes within this
  // long). Default 60; 0 rediscovers every tick. Must be >= 0.
  double rescan_seconds = 60;
};

// Collects RDMA port counters and link state. Files are found at the first
// tick and on each rescan, kept open and re-read every tick. A file that
// does not exist (no hw_counters on an IB port, a counter an older driver
// lacks) is skipped quietly; one that cannot be read or does not parse is
// skipped, with the series it feeds, and named in Collect's status.
// Not thread-safe (the agent calls it from one thread).
class InfinibandCollector : public Collector {
 public:
  // kInvalidArgument if `options` are out of range. Does no I/O.
  static absl::StatusOr<std::unique_ptr<InfinibandCollector>> Create(
      InfinibandOptions options);

  std::string_view name() const override { return "infiniband"; }
  // kNotFound if <sys_root>/class/infiniband does not exist (no RDMA stack
  // loaded), so the agent runs without this collector.
  absl::Status Start(EventSink* events) override;
  // Appends every port's series; problems as described above.
  absl::Status Collect(Tick* tick) override;

 private:
  // One counter series of a port: those of its files that exist, summed
  // and scaled.
  struct Series {
    const char* metric;
    double scale;
    std::vector<HostFile> files;
  };
  struct Port {
    std::vector<Label> labels;  // {"dev", ...}
    std::vector<Series> counters;
    std::optional<HostFile> state;
    std::optional<HostFile> rate;
  };

  explicit InfinibandCollector(InfinibandOptions options);
  std::string ClassDir() const;
  // Replaces ports_ with what sysfs holds now.
  void Discover(ProblemList* problems);
  void CollectPort(const Port& port, Tick* tick, ProblemList* problems);

  InfinibandOptions options_;
  RescanTimer rescan_;
  std::vector<Port> ports_;
  std::vector<char> buf_;  // read buffer, reused
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_INFINIBAND_COLLECTOR_H_
