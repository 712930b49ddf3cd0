// NvmlCollector's event thread against the fake libnvidia-ml.so.1: XID and
// ECC events are delivered at once, Stop joins promptly; and the fake's
// unscripted FAKE_NVML_GPUS mode that benchmarks and demos rely on.
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/nvml_collector.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_nvml/fake_nvml_control.h"

namespace vigil::agent {
namespace {

using testing::Fake;
using testing::FakeSink;
using testing::Find;
using testing::kFakeEventDbe;
using testing::kFakeEventXid;
using testing::LogCapture;

class NvmlEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Fake().reset();
    Fake().set_device_count(2);
  }

  NvmlCollectorOptions Options() {
    NvmlCollectorOptions o;
    o.library_path = FAKE_NVML_PATH;
    o.clock = &clock_;
    o.log = log_.Sink();
    o.event_wait_ms = 20;
    return o;
  }

  FakeClock clock_;
  LogCapture log_;
  FakeSink sink_;
};

TEST_F(NvmlEventsTest, XidIsDeliveredWithoutWaitingForATick) {
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  clock_.Advance(5);
  ASSERT_EQ(Fake().push_event(1, kFakeEventXid, 79), 1);
  std::vector<Tick> got = sink_.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_DOUBLE_EQ(got[0].ts, clock_.Now());
  EXPECT_EQ(got[0].samples.size(), 2u);
  EXPECT_EQ(Find(got[0], "gpu_xid_errors_total", 1), 1);
  EXPECT_EQ(Find(got[0], "gpu_xid_last", 1), 79);

  ASSERT_EQ(Fake().push_event(1, kFakeEventXid, 48), 1);
  got = sink_.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(Find(got[1], "gpu_xid_errors_total", 1), 2);
  EXPECT_EQ(Find(got[1], "gpu_xid_last", 1), 48);

  // Ticks carry the same counts.
  Tick t;
  ASSERT_TRUE(c.Collect(&t).ok());
  EXPECT_EQ(Find(t, "gpu_xid_errors_total", 1), 2);
  EXPECT_EQ(Find(t, "gpu_xid_last", 1), 48);
  EXPECT_EQ(Find(t, "gpu_xid_errors_total", 0), 0);
  EXPECT_EQ(Find(t, "gpu_xid_last", 0), 0);
}

TEST_F(NvmlEventsTest, EccEventDeliversFreshCounters) {
  Fake().set_field(0, 3, 7);  // SBE volatile
  Fake().set_field(0, 4, 2);  // DBE volatile
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  ASSERT_EQ(Fake().push_event(0, kFakeEventDbe, 0), 1);
  std::vector<Tick> got = sink_.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].samples.size(), 2u);
  EXPECT_EQ(Find(got[0], "gpu_ecc_dbe_total", 0), 2);
  EXPECT_EQ(Find(got[0], "gpu_ecc_sbe_total", 0), 7);
}

TEST_F(NvmlEventsTest, EventsOffWatchesNothing) {
  NvmlCollectorOptions o = Options();
  o.events = false;
  NvmlCollector c(o);
  ASSERT_TRUE(c.Start(&sink_).ok());
  EXPECT_EQ(Fake().push_event(0, kFakeEventXid, 79), 0);
  EXPECT_EQ(Fake().calls("nvmlEventSetCreate"), 0);
  Tick t;
  ASSERT_TRUE(c.Collect(&t).ok());
  EXPECT_FALSE(Find(t, "gpu_xid_errors_total", 0).has_value());
}

TEST_F(NvmlEventsTest, GpuWithoutEventSupportIsNotWatched) {
  ASSERT_EQ(Fake().set_value(0, "event_types", 0), 0);
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  EXPECT_EQ(log_.Count("gpu 0: events not watched"), 1);
  EXPECT_EQ(Fake().push_event(0, kFakeEventXid, 79), 0);
  Tick t;
  ASSERT_TRUE(c.Collect(&t).ok());
  EXPECT_FALSE(Find(t, "gpu_xid_errors_total", 0).has_value());
  EXPECT_TRUE(Find(t, "gpu_xid_errors_total", 1).has_value());
}

TEST_F(NvmlEventsTest, StopJoinsPromptlyAndIsIdempotent) {
  NvmlCollectorOptions o = Options();
  o.event_wait_ms = 200;
  NvmlCollector c(o);
  ASSERT_TRUE(c.Start(&sink_).ok());
  // After one event the thread is back in (or on its way into) a wait.
  ASSERT_EQ(Fake().push_event(0, kFakeEventXid, 13), 1);
  ASSERT_EQ(sink_.WaitFor(1).size(), 1u);
  const auto start = std::chrono::steady_clock::now();
  c.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(Fake().calls("nvmlEventSetFree"), 1);
  c.Stop();
  EXPECT_EQ(Fake().calls("nvmlEventSetFree"), 1);
}

TEST_F(NvmlEventsTest, StopJoinsWhileWaitingOutAFailingEventWait) {
  Fake().fail("nvmlEventSetWait_v2", -1, 999);
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  ASSERT_TRUE(log_.WaitFor("waiting for events failed"));
  // The fake clock never advances: the thread waits for Stop alone.
  const auto start = std::chrono::steady_clock::now();
  c.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(Fake().calls("nvmlEventSetWait_v2"), 1);
}

// Runs in a fresh process (a death test re-executes the binary), where no
// test has scripted the fake.
bool UnscriptedFakePresentsGrowingGpus() {
  NvmlCollectorOptions o;
  o.library_path = FAKE_NVML_PATH;
  o.events = false;
  NvmlCollector c(o);
  if (!c.Start(nullptr).ok()) return false;
  Tick a, b;
  if (!c.Collect(&a).ok() || !c.Collect(&b).ok()) return false;
  std::optional<double> before = Find(a, "gpu_nvlink_tx_bytes_total", 2);
  std::optional<double> after = Find(b, "gpu_nvlink_tx_bytes_total", 2);
  return !Find(a, "gpu_power_watts", 3).has_value() && before && after &&
         *after > *before && Find(b, "gpu_ecc_dbe_total", 0) == 0;
}

TEST(FakeNvmlTest, EnvironmentPresentsHealthyGpusWhenUnscripted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("FAKE_NVML_GPUS", "3", 1);
  EXPECT_EXIT(std::exit(UnscriptedFakePresentsGrowingGpus() ? 0 : 1),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace vigil::agent
