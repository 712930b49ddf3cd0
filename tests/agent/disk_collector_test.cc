// DiskCollector against /proc/diskstats and /sys/block fixtures.
#include "agent/disk_collector.h"

#include <cmath>
#include <memory>
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

DiskOptions FixtureOptions(const std::string& root) {
  DiskOptions options;
  options.proc_root = root + "/proc";
  options.sys_root = root + "/sys";
  return options;
}

std::unique_ptr<DiskCollector> Make(DiskOptions options) {
  absl::StatusOr<std::unique_ptr<DiskCollector>> c =
      DiskCollector::Create(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

Tick CollectOk(DiskCollector& c, double ts) {
  Tick tick = At(ts);
  absl::Status s = c.Collect(&tick);
  EXPECT_TRUE(s.ok()) << s;
  return tick;
}

TEST(DiskCollector, ConvertsUnitsFromFixture) {
  auto c = Make(FixtureOptions(TestData("")));
  ASSERT_TRUE(c->Start(nullptr).ok());
  EXPECT_EQ(c->name(), "disk");
  Tick t = CollectOk(*c, kT0);
  // nvme0n1 1834567 1023 367248224 412345 9823451 2345678 781234560 5123456
  //   0 2345678 ...
  EXPECT_EQ(Value(t, "disk_reads_total", "nvme0n1"), 1834567);
  EXPECT_EQ(Value(t, "disk_read_bytes_total", "nvme0n1"), 367248224.0 * 512);
  EXPECT_DOUBLE_EQ(*Value(t, "disk_read_seconds_total", "nvme0n1"), 412.345);
  EXPECT_EQ(Value(t, "disk_writes_total", "nvme0n1"), 9823451);
  EXPECT_EQ(Value(t, "disk_write_bytes_total", "nvme0n1"), 781234560.0 * 512);
  EXPECT_DOUBLE_EQ(*Value(t, "disk_write_seconds_total", "nvme0n1"), 5123.456);
  EXPECT_DOUBLE_EQ(*Value(t, "disk_io_seconds_total", "nvme0n1"), 2345.678);
  EXPECT_DOUBLE_EQ(*Value(t, "disk_io_seconds_total", "sda"), 45.678);
}

TEST(DiskCollector, WholeDisksOnlyByDefault) {
  auto c = Make(FixtureOptions(TestData("")));
  Tick t = CollectOk(*c, kT0);
  // Not partitions (nvme0n1p1, sda1), loop, ram, zram or sr devices.
  EXPECT_THAT(Devs(t, "disk_reads_total"),
              ElementsAre("dm-0", "nvme0n1", "nvme1n1", "sda"));
  EXPECT_EQ(t.samples.size(), 4u * 7);
}

TEST(DiskCollector, ExplicitDevicesAndAMissingOne) {
  DiskOptions options = FixtureOptions(TestData(""));
  options.devices = {"sda1", "loop0", "nvme9n1"};
  auto c = Make(options);
  Tick t = At(kT0);
  absl::Status s = c->Collect(&t);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("disk nvme9n1 is not in"));
  EXPECT_THAT(Devs(t, "disk_reads_total"), ElementsAre("loop0", "sda1"));
  EXPECT_EQ(Value(t, "disk_reads_total", "sda1"), 45000);
}

TEST(DiskCollector, GarbledLineIsReportedAndOthersStillRead) {
  FixtureCopy root("");
  root.Write("proc/diskstats",
             " 259 0 nvme0n1 1 0 8 1 2 0 16 3 0 4 5 0 0 0 0 0 0\n"
             " 259 2 nvme1n1 1 0 8 x 2 0 16 3 0 4 5\n"
             "   8 0 sda 1 0 8\n"
             " 253 0 dm-0 7 0 8 1 2 0 16 3 0 4\n");
  auto c = Make(FixtureOptions(root.root()));
  Tick t = At(kT0);
  absl::Status s = c->Collect(&t);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("2 problems"));
  EXPECT_THAT(s.message(), HasSubstr("line of nvme1n1 does not parse"));
  EXPECT_THAT(s.message(), HasSubstr("line of sda does not parse"));
  EXPECT_THAT(Devs(t, "disk_reads_total"), ElementsAre("dm-0", "nvme0n1"));
  EXPECT_EQ(Value(t, "disk_io_seconds_total", "dm-0"), 0.004);
}

TEST(DiskCollector, RereadsEveryTickAndPassesResetsThrough) {
  FixtureCopy root("");
  auto c = Make(FixtureOptions(root.root()));
  CollectOk(*c, kT0);
  root.Write("proc/diskstats",
             " 259 0 nvme0n1 5 0 16 2 0 0 0 0 0 2 2 0 0 0 0 0 0\n"
             " 259 2 nvme1n1 24700 0 3150000 5300 0 0 0 0 0 5500 5300\n"
             "   8 0 sda 45678 1234 3456789 23456 12345 6789 987654 34567 2 "
             "45678 58023\n"
             " 253 0 dm-0 46791 0 3429594 24012 19134 0 987654 51234 0 45987 "
             "75246\n");
  Tick t = CollectOk(*c, kT0 + 1);
  EXPECT_EQ(Value(t, "disk_reads_total", "nvme1n1"), 24700);
  EXPECT_EQ(Value(t, "disk_reads_total", "nvme0n1"), 5);
  EXPECT_EQ(Value(t, "disk_read_bytes_total", "nvme0n1"), 16 * 512);
}

TEST(DiskCollector, HotAddedDiskAppearsOnRescan) {
  FixtureCopy root("");
  DiskOptions options = FixtureOptions(root.root());
  options.rescan_seconds = 10;
  auto c = Make(options);
  CollectOk(*c, kT0);
  // sysfs writes the '/' of cciss/c0d0 as '!'.
  root.Write("sys/block/cciss!c0d0/dev", "104:0\n");
  root.Write("proc/diskstats",
             " 259 0 nvme0n1 1 0 8 1 2 0 16 3 0 4 5\n"
             " 259 2 nvme1n1 1 0 8 1 2 0 16 3 0 4 5\n"
             "   8 0 sda 1 0 8 1 2 0 16 3 0 4 5\n"
             " 253 0 dm-0 1 0 8 1 2 0 16 3 0 4 5\n"
             " 104 0 cciss/c0d0 9 0 8 1 2 0 16 3 0 4 5\n");
  Tick t = CollectOk(*c, kT0 + 5);
  EXPECT_EQ(Value(t, "disk_reads_total", "cciss/c0d0"), std::nullopt);
  t = CollectOk(*c, kT0 + 10);
  EXPECT_EQ(Value(t, "disk_reads_total", "cciss/c0d0"), 9);
}

TEST(DiskCollector, NoDiskstats) {
  FixtureCopy root("");
  root.Remove("proc/diskstats");
  auto c = Make(FixtureOptions(root.root()));
  absl::Status s = c->Start(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("diskstats: missing"));
  Tick t = At(kT0);
  EXPECT_EQ(c->Collect(&t).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(t.samples.empty());
}

TEST(DiskCollector, RejectsBadOptions) {
  struct Case {
    const char* what;
    DiskOptions options;
    const char* error;
  };
  DiskOptions negative;
  negative.rescan_seconds = -5;
  DiskOptions nan;
  nan.rescan_seconds = std::nan("");
  DiskOptions empty_name;
  empty_name.devices = {"sda", ""};
  DiskOptions spaced;
  spaced.devices = {"sda b"};
  DiskOptions twice;
  twice.devices = {"sda", "nvme0n1", "sda"};
  DiskOptions empty_prefix;
  empty_prefix.excluded_prefixes = {"loop", ""};
  const Case cases[] = {
      {"negative rescan", negative, "rescan_seconds must be >= 0"},
      {"NaN rescan", nan, "rescan_seconds must be >= 0"},
      {"empty device", empty_name, "bad device name \"\""},
      {"device with space", spaced, "bad device name \"sda b\""},
      {"device twice", twice, "device sda listed twice"},
      {"empty prefix", empty_prefix, "empty excluded prefix"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<DiskCollector>> got =
        DiskCollector::Create(c.options);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what;
    EXPECT_THAT(got.status().message(), HasSubstr(c.error)) << c.what;
  }
}

}  // namespace
}  // namespace vigil::agent
