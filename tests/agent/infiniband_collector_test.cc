// InfinibandCollector against sysfs fixture trees: a ConnectX-7 IB port, a
// ConnectX-7 RoCE port and a two-port ConnectX-3 without hw_counters.
#include "agent/infiniband_collector.h"

#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/host_test_util.h"

namespace vigil::agent {
namespace {

using testing::At;
using testing::Devs;
using ::testing::ElementsAre;
using testing::FixtureCopy;
using ::testing::HasSubstr;
using testing::TestData;
using testing::Value;

constexpr double kT0 = 1764000000;
const char kIb[] = "class/infiniband/";

std::unique_ptr<InfinibandCollector> Make(const std::string& sys_root) {
  InfinibandOptions options;
  options.sys_root = sys_root;
  absl::StatusOr<std::unique_ptr<InfinibandCollector>> c =
      InfinibandCollector::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

Tick CollectOk(InfinibandCollector& c, double ts) {
  Tick tick = At(ts);
  absl::Status s = c.Collect(&tick);
  EXPECT_TRUE(s.ok()) << s;
  return tick;
}

TEST(InfinibandCollector, ConvertsUnitsAndSumsFromFixture) {
  auto c = Make(TestData("sys"));
  ASSERT_TRUE(c->Start(nullptr).ok());
  EXPECT_EQ(c->name(), "infiniband");
  Tick t = CollectOk(*c, kT0);
  // 4-byte words to bytes.
  EXPECT_EQ(Value(t, "net_tx_bytes_total", "mlx5_0"), 1234567890123.0 * 4);
  EXPECT_EQ(Value(t, "net_rx_bytes_total", "mlx5_0"), 987654321098.0 * 4);
  // port_xmit_discards 3 + port_rcv_errors 2 (remote physical 6 left out).
  EXPECT_EQ(Value(t, "net_drops_total", "mlx5_0"), 5);
  // IB port: out_of_sequence 11 + packet_seq_err 5 + local_ack_timeout_err 2
  // + implied_nak_seq_err 1; duplicate_request and rnr_nak_retry_err not.
  EXPECT_EQ(Value(t, "net_retransmits_total", "mlx5_0"), 19);
  // RoCE port: 100 + 20 + 3 + 0 + roce_adp_retrans 40; not the _to one.
  EXPECT_EQ(Value(t, "net_retransmits_total", "mlx5_1"), 163);
  EXPECT_EQ(Value(t, "net_link_downed_total", "mlx5_0"), 1);
  EXPECT_EQ(Value(t, "net_symbol_errors_total", "mlx5_0"), 7);
  EXPECT_EQ(Value(t, "net_link_error_recovery_total", "mlx5_0"), 0);
  EXPECT_EQ(Value(t, "net_link_up", "mlx5_0"), 1);
  EXPECT_EQ(Value(t, "net_link_rate_gbps", "mlx5_0"), 400);
  EXPECT_EQ(Value(t, "net_link_rate_gbps", "mlx5_1"), 200);
  // A saturated 32-bit PMA counter of an old driver is passed through.
  EXPECT_EQ(Value(t, "net_tx_bytes_total", "mlx4_0:1"), 4294967295.0 * 4);
}

TEST(InfinibandCollector, MultiPortDevicesAreLabelledWithThePort) {
  auto c = Make(TestData("sys"));
  Tick t = CollectOk(*c, kT0);
  EXPECT_THAT(Devs(t, "net_tx_bytes_total"),
              ElementsAre("mlx4_0:1", "mlx4_0:2", "mlx5_0", "mlx5_1"));
}

TEST(InfinibandCollector, LinkDownHasNoRate) {
  auto c = Make(TestData("sys"));
  Tick t = CollectOk(*c, kT0);
  EXPECT_EQ(Value(t, "net_link_up", "mlx4_0:2"), 0);
  EXPECT_EQ(Value(t, "net_link_rate_gbps", "mlx4_0:2"), std::nullopt);
  EXPECT_EQ(Value(t, "net_link_rate_gbps", "mlx4_0:1"), 56);
}

TEST(InfinibandCollector, MissingFilesAreSkippedQuietly) {
  // mlx4_0 has no hw_counters and no link_error_recovery: OK status.
  auto c = Make(TestData("sys"));
  Tick t = CollectOk(*c, kT0);
  EXPECT_THAT(Devs(t, "net_retransmits_total"),
              ElementsAre("mlx5_0", "mlx5_1"));
  EXPECT_THAT(Devs(t, "net_link_error_recovery_total"),
              ElementsAre("mlx5_0", "mlx5_1"));
  EXPECT_EQ(Value(t, "net_drops_total", "mlx4_0:1"), 13);
}

TEST(InfinibandCollector, RereadsOpenFilesEveryTickAndPassesWrapsThrough) {
  FixtureCopy sys("sys");
  auto c = Make(sys.root());
  CollectOk(*c, kT0);
  const std::string port = std::string(kIb) + "mlx5_0/ports/1/";
  sys.Write(port + "counters/port_xmit_data", "1234567890200\n");
  sys.Write(port + "hw_counters/local_ack_timeout_err", "5\n");
  sys.Write(port + "state", "1: DOWN\n");
  Tick t = CollectOk(*c, kT0 + 1);
  EXPECT_EQ(Value(t, "net_tx_bytes_total", "mlx5_0"), 1234567890200.0 * 4);
  EXPECT_EQ(Value(t, "net_retransmits_total", "mlx5_0"), 22);
  EXPECT_EQ(Value(t, "net_link_up", "mlx5_0"), 0);
  // A reset (driver reload, counter wrap): the new value as is.
  sys.Write(port + "counters/port_xmit_data", "10\n");
  t = CollectOk(*c, kT0 + 2);
  EXPECT_EQ(Value(t, "net_tx_bytes_total", "mlx5_0"), 40);
}

TEST(InfinibandCollector, GarbledCounterIsReportedAndOthersStillRead) {
  FixtureCopy sys("sys");
  const std::string port = std::string(kIb) + "mlx5_0/ports/1/";
  sys.Write(port + "counters/port_xmit_data", "garbage\n");
  // A garbled part of a sum drops the sum: never a partial total.
  sys.Write(port + "hw_counters/packet_seq_err", "-3\n");
  auto c = Make(sys.root());
  Tick t = At(kT0);
  absl::Status s = c->Collect(&t);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("2 problems"));
  EXPECT_THAT(s.message(), HasSubstr("port_xmit_data: not an unsigned "
                                     "integer: \"garbage\\n\""));
  EXPECT_THAT(s.message(), HasSubstr("packet_seq_err"));
  EXPECT_EQ(Value(t, "net_tx_bytes_total", "mlx5_0"), std::nullopt);
  EXPECT_EQ(Value(t, "net_retransmits_total", "mlx5_0"), std::nullopt);
  EXPECT_EQ(Value(t, "net_rx_bytes_total", "mlx5_0"), 987654321098.0 * 4);
  EXPECT_EQ(Value(t, "net_retransmits_total", "mlx5_1"), 163);
}

TEST(InfinibandCollector, UnreadableFileIsReported) {
  FixtureCopy sys("sys");
  const std::string port = std::string(kIb) + "mlx5_1/ports/1/";
  // A directory opens read-only but cannot be read (EISDIR).
  sys.Remove(port + "counters/port_rcv_data");
  sys.Write(port + "counters/port_rcv_data/x", "1\n");
  auto c = Make(sys.root());
  Tick t = At(kT0);
  absl::Status s = c->Collect(&t);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("cannot read"));
  EXPECT_THAT(s.message(), HasSubstr("mlx5_1/ports/1/counters/port_rcv_data"));
  EXPECT_EQ(Value(t, "net_rx_bytes_total", "mlx5_1"), std::nullopt);
  EXPECT_EQ(Value(t, "net_tx_bytes_total", "mlx5_1"), 5000000000.0 * 4);
  EXPECT_EQ(Value(t, "net_rx_bytes_total", "mlx5_0"), 987654321098.0 * 4);
}

TEST(InfinibandCollector, GarbledStateAndRateAreReported) {
  FixtureCopy sys("sys");
  sys.Write(std::string(kIb) + "mlx5_0/ports/1/state", "ACTIVE\n");
  sys.Write(std::string(kIb) + "mlx5_1/ports/1/rate", "fast\n");
  auto c = Make(sys.root());
  Tick t = At(kT0);
  absl::Status s = c->Collect(&t);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("state: not a port state: \"ACTIVE\\n\""));
  EXPECT_THAT(s.message(), HasSubstr("rate: not a link rate: \"fast\\n\""));
  EXPECT_EQ(Value(t, "net_link_up", "mlx5_0"), std::nullopt);
  EXPECT_EQ(Value(t, "net_link_up", "mlx5_1"), 1);
  EXPECT_EQ(Value(t, "net_link_rate_gbps", "mlx5_1"), std::nullopt);
}

TEST(InfinibandCollector, DevicesComeAndGoOnRescan) {
  FixtureCopy sys("sys");
  InfinibandOptions options;
  options.sys_root = sys.root();
  options.rescan_seconds = 30;
  auto c = std::move(*InfinibandCollector::Create(options));
  CollectOk(*c, kT0);
  sys.CopyTree(std::string(kIb) + "mlx5_0", std::string(kIb) + "mlx5_2");
  sys.Remove(std::string(kIb) + "mlx4_0");
  // Before the interval: the file set is the one found at kT0.
  Tick t = CollectOk(*c, kT0 + 29);
  EXPECT_THAT(Devs(t, "net_tx_bytes_total"),
              ElementsAre("mlx4_0:1", "mlx4_0:2", "mlx5_0", "mlx5_1"));
  t = CollectOk(*c, kT0 + 30);
  EXPECT_THAT(Devs(t, "net_tx_bytes_total"),
              ElementsAre("mlx5_0", "mlx5_1", "mlx5_2"));
}

TEST(InfinibandCollector, NoRdmaStack) {
  FixtureCopy sys("sys");
  sys.Remove("class/infiniband");
  auto c = Make(sys.root());
  absl::Status s = c->Start(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("class/infiniband does not exist"));
  Tick t = At(kT0);
  EXPECT_EQ(c->Collect(&t).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(t.samples.empty());
}

TEST(InfinibandCollector, RejectsBadOptions) {
  for (double bad : {-1.0, std::nan("")}) {
    InfinibandOptions options;
    options.rescan_seconds = bad;
    absl::StatusOr<std::unique_ptr<InfinibandCollector>> c =
        InfinibandCollector::Create(options);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("rescan_seconds"));
  }
}

}  // namespace
}  // namespace vigil::agent
