// CpuCollector against /proc/stat fixtures.
#include "agent/cpu_collector.h"

#include <unistd.h>

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/host_test_util.h"

namespace vigil::agent {
namespace {

using testing::At;
using testing::FixtureCopy;
using ::testing::HasSubstr;
using testing::TestData;
using testing::Value;

constexpr double kT0 = 1764000000;

std::unique_ptr<CpuCollector> Make(const std::string& proc_root,
                                   int64_t user_hz = 100) {
  CpuOptions options;
  options.proc_root = proc_root;
  options.user_hz = user_hz;
  absl::StatusOr<std::unique_ptr<CpuCollector>> c =
      CpuCollector::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

Tick CollectOk(CpuCollector& c, double ts) {
  Tick tick = At(ts);
  absl::Status s = c.Collect(&tick);
  EXPECT_TRUE(s.ok()) << s;
  return tick;
}

// A "cpu " line: user nice system idle iowait irq softirq steal guest
// guest_nice.
std::string Stat(int user, int nice, int system, int idle, int iowait, int irq,
                 int softirq, int steal, int guest) {
  return "cpu  " + std::to_string(user) + " " + std::to_string(nice) + " " +
         std::to_string(system) + " " + std::to_string(idle) + " " +
         std::to_string(iowait) + " " + std::to_string(irq) + " " +
         std::to_string(softirq) + " " + std::to_string(steal) + " " +
         std::to_string(guest) + " 0\ncpu0 1 2 3 4 5 6 7 8 9 0\nctxt 5\n";
}

TEST(CpuCollector, FirstTickHasSecondsButNoRatio) {
  auto c = Make(TestData("proc"));
  ASSERT_TRUE(c->Start(nullptr).ok());
  EXPECT_EQ(c->name(), "cpu");
  Tick t = CollectOk(*c, kT0);
  // iowait 16683 ticks at USER_HZ 100.
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_iowait_seconds_total"), 166.83);
  EXPECT_EQ(Value(t, "host_cpu_iowait_ratio"), std::nullopt);
  EXPECT_EQ(Value(t, "host_cpu_busy_ratio"), std::nullopt);
  EXPECT_EQ(t.samples.size(), 1u);
  EXPECT_TRUE(t.samples[0].key.labels.empty());
}

TEST(CpuCollector, RatiosFromTwoSnapshots) {
  FixtureCopy proc("proc");
  auto c = Make(proc.root());
  proc.Write("stat", Stat(1000, 100, 300, 5000, 200, 10, 20, 5, 400));
  CollectOk(*c, kT0);
  // +400 user (guest +300 is inside it), +50 nice, +100 system,
  // +1200 idle, +200 iowait, +10 irq, +30 softirq, +10 steal: 2000 total.
  proc.Write("stat", Stat(1400, 150, 400, 6200, 400, 20, 50, 15, 700));
  Tick t = CollectOk(*c, kT0 + 1);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_iowait_ratio"), 200.0 / 2000);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_busy_ratio"), 600.0 / 2000);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_iowait_seconds_total"), 4.0);
}

TEST(CpuCollector, NoGarbageWhenCountersStallOrGoBack) {
  FixtureCopy proc("proc");
  auto c = Make(proc.root());
  proc.Write("stat", Stat(1000, 0, 300, 5000, 200, 0, 0, 0, 0));
  CollectOk(*c, kT0);
  // Nothing moved: no ratio (0/0).
  Tick t = CollectOk(*c, kT0 + 1);
  EXPECT_EQ(Value(t, "host_cpu_iowait_ratio"), std::nullopt);
  // iowait steps back while the total grows (a known kernel quirk): 0.
  proc.Write("stat", Stat(1100, 0, 300, 5100, 150, 0, 0, 0, 0));
  t = CollectOk(*c, kT0 + 2);
  EXPECT_EQ(Value(t, "host_cpu_iowait_ratio"), 0);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_busy_ratio"), 100.0 / 150);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_iowait_seconds_total"), 1.5);
  // Everything reset: no ratio, the new cumulative value as is.
  proc.Write("stat", Stat(10, 0, 3, 50, 2, 0, 0, 0, 0));
  t = CollectOk(*c, kT0 + 3);
  EXPECT_EQ(Value(t, "host_cpu_iowait_ratio"), std::nullopt);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_iowait_seconds_total"), 0.02);
  // And ratios resume from the reset values.
  proc.Write("stat", Stat(20, 0, 3, 90, 52, 0, 0, 0, 0));
  t = CollectOk(*c, kT0 + 4);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_iowait_ratio"), 0.5);
}

TEST(CpuCollector, GarbledStatIsReported) {
  FixtureCopy proc("proc");
  auto c = Make(proc.root());
  for (const char* bad :
       {"intr 1 2 3\ncpu  1 2 3 4 5 6 7 8 9 0\n", "cpu  1 2 3 4 5\n",
        "cpu  1 2 x 4 5 6 7 8 9 0\n", ""}) {
    proc.Write("stat", bad);
    Tick t = At(kT0);
    absl::Status s = c->Collect(&t);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(s.message(), HasSubstr("is not a \"cpu\" line")) << bad;
    EXPECT_TRUE(t.samples.empty()) << bad;
  }
}

TEST(CpuCollector, NoStatFile) {
  auto c = Make(TestData("no_such_proc"));
  EXPECT_EQ(c->Start(nullptr).code(), absl::StatusCode::kNotFound);
  Tick t = At(kT0);
  EXPECT_EQ(c->Collect(&t).code(), absl::StatusCode::kNotFound);
}

TEST(CpuCollector, UserHz) {
  CpuOptions options;
  options.user_hz = -1;
  absl::StatusOr<std::unique_ptr<CpuCollector>> c =
      CpuCollector::Create(options);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("user_hz must be >= 0"));
  // 0: the system's USER_HZ (100 on Linux).
  options.user_hz = 0;
  options.proc_root = TestData("proc");
  c = CpuCollector::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  Tick t = CollectOk(**c, kT0);
  EXPECT_DOUBLE_EQ(*Value(t, "host_cpu_iowait_seconds_total"),
                   16683.0 / sysconf(_SC_CLK_TCK));
}

}  // namespace
}  // namespace vigil::agent
