// NvmlCollector per tick, against the fake libnvidia-ml.so.1: every metric
// and its unit, batched reads, unsupported readings, errors, lost and
// missing GPUs, init failures and broken libraries.
#include "agent/nvml_collector.h"

#include <string>
#include <vector>

#include "agent/nvml.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_nvml/fake_nvml_control.h"

namespace vigil::agent {
namespace {

using testing::CountFor;
using testing::Fake;
using testing::FakeAt;
using testing::FakeSink;
using testing::Find;
using testing::LogCapture;

constexpr int kNotSupported = 3;
constexpr int kGpuIsLost = 15;
constexpr int kDriverNotLoaded = 9;
constexpr int kUnknownError = 999;
// Series per healthy GPU with events on.
constexpr size_t kSeriesPerGpu = 23;

class NvmlCollectorTest : public ::testing::Test {
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

  // Collects one tick; the status goes to `status` when given.
  Tick CollectOnce(NvmlCollector& c, absl::Status* status = nullptr) {
    Tick t;
    t.ts = clock_.Now();
    absl::Status s = c.Collect(&t);
    if (status != nullptr) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
    return t;
  }

  FakeClock clock_;
  LogCapture log_;
  FakeSink sink_;
};

TEST_F(NvmlCollectorTest, EmitsEveryMetricInItsUnit) {
  const auto& f = Fake();
  ASSERT_EQ(f.set_value(1, "utilization_gpu", 55), 0);
  ASSERT_EQ(f.set_value(1, "power_mw", 412345), 0);
  ASSERT_EQ(f.set_value(1, "temperature", 71), 0);
  ASSERT_EQ(f.set_value(1, "sm_clock_mhz", 1410), 0);
  ASSERT_EQ(f.set_value(1, "memory_clock_mhz", 1593), 0);
  ASSERT_EQ(f.set_value(1, "clock_event_reasons", 0x48), 0);
  ASSERT_EQ(f.set_value(1, "memory_used", 1234567890), 0);
  ASSERT_EQ(f.set_value(1, "memory_total", 85899345920.0), 0);
  ASSERT_EQ(f.set_value(1, "pcie_width", 8), 0);
  ASSERT_EQ(f.set_value(1, "pcie_generation", 4), 0);
  f.set_field(1, 3, 5);       // ECC SBE volatile
  f.set_field(1, 4, 1);       // ECC DBE volatile
  f.set_field(1, 38, 7);      // NVLink CRC flit, all links
  f.set_field(1, 45, 3);      // NVLink CRC data, all links
  f.set_field(1, 52, 2);      // NVLink replay
  f.set_field(1, 59, 1);      // NVLink recovery
  f.set_field(1, 82, 85);     // HBM temperature
  f.set_field(1, 94, 9);      // PCIe replays
  f.set_field(1, 138, 1000);  // NVLink TX KiB
  f.set_field(1, 139, 2000);  // NVLink RX KiB
  f.set_field(1, 144, 1);     // remap pending
  f.set_field(1, 145, 3);     // remap failure (any non-zero is 1)

  NvmlCollector c(Options());
  EXPECT_EQ(c.name(), "nvml");
  ASSERT_TRUE(c.Start(&sink_).ok());
  Tick t = CollectOnce(c);

  const std::vector<std::pair<std::string, double>> want = {
      {"gpu_utilization_ratio", 0.55},
      {"gpu_power_watts", 412.345},
      {"gpu_temperature_celsius", 71},
      {"gpu_memory_temperature_celsius", 85},
      {"gpu_sm_clock_mhz", 1410},
      {"gpu_memory_clock_mhz", 1593},
      {"gpu_throttle_reasons", 0x48},
      {"gpu_memory_used_bytes", 1234567890},
      {"gpu_memory_total_bytes", 85899345920.0},
      {"gpu_nvlink_tx_bytes_total", 1024000},
      {"gpu_nvlink_rx_bytes_total", 2048000},
      {"gpu_nvlink_crc_errors_total", 10},
      {"gpu_nvlink_replay_errors_total", 2},
      {"gpu_nvlink_recovery_errors_total", 1},
      {"gpu_ecc_sbe_total", 5},
      {"gpu_ecc_dbe_total", 1},
      {"gpu_remapped_rows_pending", 1},
      {"gpu_remapped_rows_failure", 1},
      {"gpu_xid_errors_total", 0},
      {"gpu_xid_last", 0},
      {"gpu_pcie_replays_total", 9},
      {"gpu_pcie_link_width", 8},
      {"gpu_pcie_link_generation", 4}};
  ASSERT_EQ(want.size(), kSeriesPerGpu);
  for (const auto& [metric, value] : want) {
    std::optional<double> got = Find(t, metric, 1);
    ASSERT_TRUE(got.has_value()) << metric;
    EXPECT_DOUBLE_EQ(*got, value) << metric;
  }
  EXPECT_EQ(CountFor(t, 0), kSeriesPerGpu);
  EXPECT_EQ(CountFor(t, 1), kSeriesPerGpu);
  EXPECT_EQ(t.samples.size(), 2 * kSeriesPerGpu);
  for (const Sample& s : t.samples) {
    EXPECT_EQ(s.key.labels.size(), 1u) << s.key.ToString();
  }
  EXPECT_DOUBLE_EQ(*Find(t, "gpu_utilization_ratio", 0), 0.97);
  EXPECT_DOUBLE_EQ(*Find(t, "gpu_power_watts", 0), 650);
}

TEST_F(NvmlCollectorTest, ReadsEachGpuWithOneBatchAndFewCalls) {
  Fake().set_device_count(8);
  // Without the event thread, whose waits would run concurrently with the
  // tick and make the count racy.
  NvmlCollectorOptions o = Options();
  o.events = false;
  NvmlCollector c(o);
  ASSERT_TRUE(c.Start(&sink_).ok());
  CollectOnce(c);
  const long calls = Fake().calls("");
  const long batches = Fake().calls("nvmlDeviceGetFieldValues");
  const long ecc_reads = Fake().field_reads(3);
  Tick t = CollectOnce(c);
  // gpu_xid_errors_total and gpu_xid_last need the events.
  EXPECT_EQ(t.samples.size(), 8 * (kSeriesPerGpu - 2));
  EXPECT_EQ(Fake().calls("nvmlDeviceGetFieldValues") - batches, 8);
  EXPECT_EQ(Fake().field_reads(3) - ecc_reads, 8);
  // One device count, then per GPU nine plain calls and one batch.
  EXPECT_EQ(Fake().calls("") - calls, 1 + 8 * 10);
}

TEST_F(NvmlCollectorTest, NotSupportedIsSkippedQuietlyAndNotAskedAgain) {
  Fake().fail("nvmlDeviceGetPowerUsage", 0, kNotSupported);
  Fake().fail_field(0, 82, kNotSupported);
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  for (int i = 0; i < 3; ++i) {
    Tick t = CollectOnce(c);  // expects OK
    EXPECT_FALSE(Find(t, "gpu_power_watts", 0).has_value());
    EXPECT_FALSE(Find(t, "gpu_memory_temperature_celsius", 0).has_value());
    EXPECT_TRUE(Find(t, "gpu_power_watts", 1).has_value());
    EXPECT_TRUE(Find(t, "gpu_memory_temperature_celsius", 1).has_value());
    EXPECT_EQ(CountFor(t, 0), kSeriesPerGpu - 2);
  }
  // GPU 0 was asked once, GPU 1 every tick.
  EXPECT_EQ(Fake().calls("nvmlDeviceGetPowerUsage"), 1 + 3);
  EXPECT_EQ(Fake().field_reads(82), 1 + 3);
}

TEST_F(NvmlCollectorTest, FieldValuesNotSupportedDropsTheBatch) {
  Fake().fail("nvmlDeviceGetFieldValues", 0, kNotSupported);
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  Tick t = CollectOnce(c);
  t = CollectOnce(c);
  EXPECT_FALSE(Find(t, "gpu_ecc_dbe_total", 0).has_value());
  EXPECT_TRUE(Find(t, "gpu_ecc_dbe_total", 1).has_value());
  EXPECT_TRUE(Find(t, "gpu_power_watts", 0).has_value());
  EXPECT_EQ(Fake().calls("nvmlDeviceGetFieldValues"), 1 + 2);
}

TEST_F(NvmlCollectorTest, OtherErrorsAreReportedAndRetriedNextTick) {
  Fake().fail("nvmlDeviceGetTemperature", 1, kUnknownError);
  Fake().fail_field(1, 38, 2);  // CRC flit: invalid argument
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  absl::Status s;
  Tick t = CollectOnce(c, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_NE(s.message().find("gpu 1: nvmlDeviceGetTemperature: Unknown Error"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("gpu 1: field 38: Invalid Argument"),
            std::string::npos)
      << s;
  EXPECT_FALSE(Find(t, "gpu_temperature_celsius", 1).has_value());
  // A sum missing a part is not sent: it would look like a counter reset.
  EXPECT_FALSE(Find(t, "gpu_nvlink_crc_errors_total", 1).has_value());
  EXPECT_EQ(CountFor(t, 1), kSeriesPerGpu - 2);
  EXPECT_EQ(CountFor(t, 0), kSeriesPerGpu);

  Fake().fail("nvmlDeviceGetTemperature", 1, 0);
  Fake().fail_field(1, 38, 0);
  t = CollectOnce(c);
  EXPECT_EQ(CountFor(t, 1), kSeriesPerGpu);
}

TEST_F(NvmlCollectorTest, LostGpuStopsItsSamplesAndIsLoggedOnce) {
  Fake().set_device_count(3);
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  EXPECT_EQ(CollectOnce(c).samples.size(), 3 * kSeriesPerGpu);

  Fake().set_lost(1, 1);
  for (int i = 0; i < 3; ++i) {
    absl::Status s;
    Tick t = CollectOnce(c, &s);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("gpu 1: "), std::string::npos) << s;
    EXPECT_NE(s.message().find("GPU is lost"), std::string::npos) << s;
    EXPECT_EQ(CountFor(t, 1), 0u);
    EXPECT_EQ(CountFor(t, 0), kSeriesPerGpu);
    EXPECT_EQ(CountFor(t, 2), kSeriesPerGpu);
  }
  EXPECT_EQ(log_.Count("gpu 1 lost"), 1);

  Fake().set_lost(1, 0);
  Tick t = CollectOnce(c);
  EXPECT_EQ(CountFor(t, 1), kSeriesPerGpu);
  EXPECT_EQ(log_.Count("gpu 1 is readable again"), 1);
}

TEST_F(NvmlCollectorTest, LostInsideTheBatchDropsSamplesAlreadyRead) {
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  Fake().fail("nvmlDeviceGetTemperature", 0, kUnknownError);
  Fake().fail_field(1, 4, kGpuIsLost);
  absl::Status s;
  Tick t = CollectOnce(c, &s);
  // The lost GPU sets the code though GPU 0's error came first.
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("gpu 0: nvmlDeviceGetTemperature"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("gpu 1: nvmlDeviceGetFieldValues: GPU is lost"),
            std::string::npos)
      << s;
  EXPECT_EQ(CountFor(t, 0), kSeriesPerGpu - 1);
  EXPECT_EQ(CountFor(t, 1), 0u);
}

TEST_F(NvmlCollectorTest, DeviceCountDropReportsTheMissingGpu) {
  Fake().set_device_count(4);
  NvmlCollector c(Options());
  ASSERT_TRUE(c.Start(&sink_).ok());
  EXPECT_EQ(CountFor(CollectOnce(c), 3), kSeriesPerGpu);

  Fake().set_device_count(3);
  for (int i = 0; i < 2; ++i) {
    absl::Status s;
    Tick t = CollectOnce(c, &s);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("gpu 3: missing, NVML reports 3 GPUs"),
              std::string::npos)
        << s;
    EXPECT_EQ(CountFor(t, 3), 0u);
    EXPECT_EQ(t.samples.size(), 3 * kSeriesPerGpu);
  }
  EXPECT_EQ(log_.Count("gpu 3 missing"), 1);

  Fake().set_device_count(5);
  Tick t = CollectOnce(c);
  EXPECT_EQ(CountFor(t, 3), kSeriesPerGpu);
  EXPECT_EQ(CountFor(t, 4), kSeriesPerGpu);
  EXPECT_EQ(log_.Count("gpu 4 appeared"), 1);
}

TEST_F(NvmlCollectorTest, InitFailureFailsStartWhenNotRetrying) {
  Fake().fail("nvmlInit_v2", -1, kDriverNotLoaded);
  NvmlCollectorOptions o = Options();
  o.init_retry_seconds = 0;
  NvmlCollector c(o);
  absl::Status s = c.Start(&sink_);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("nvmlInit_v2: Driver Not Loaded (NVML error 9)"),
            std::string::npos)
      << s;
  Tick t;
  EXPECT_EQ(c.Collect(&t).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(NvmlCollectorTest, InitFailureIsRetriedOnSchedule) {
  Fake().fail("nvmlInit_v2", -1, kDriverNotLoaded);
  NvmlCollectorOptions o = Options();
  o.init_retry_seconds = 30;
  NvmlCollector c(o);
  ASSERT_TRUE(c.Start(&sink_).ok());
  EXPECT_EQ(log_.Count("NVML not initialized"), 1);

  absl::Status s;
  Tick t = CollectOnce(c, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("Driver Not Loaded"), std::string::npos) << s;
  EXPECT_TRUE(t.samples.empty());

  Fake().fail("nvmlInit_v2", -1, 0);
  clock_.Advance(29);
  CollectOnce(c, &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Fake().calls("nvmlInit_v2"), 1);

  clock_.Advance(1);
  t = CollectOnce(c);
  EXPECT_EQ(t.samples.size(), 2 * kSeriesPerGpu);
  EXPECT_EQ(Fake().calls("nvmlInit_v2"), 2);
  EXPECT_EQ(log_.Count("NVML initialized, 2 GPUs"), 1);
}

TEST_F(NvmlCollectorTest, NoGpuFailsStartAndShutsNvmlDown) {
  Fake().set_device_count(0);
  NvmlCollectorOptions o = Options();
  o.init_retry_seconds = 0;
  NvmlCollector c(o);
  absl::Status s = c.Start(&sink_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("no GPU"), std::string::npos) << s;
  EXPECT_EQ(Fake().init_count(), 0);
}

TEST_F(NvmlCollectorTest, ShutsNvmlDownWhenDestroyed) {
  {
    NvmlCollector c(Options());
    ASSERT_TRUE(c.Start(&sink_).ok());
    EXPECT_EQ(Fake().init_count(), 1);
    EXPECT_EQ(c.Start(&sink_).code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(Fake().init_count(), 0);
}

TEST_F(NvmlCollectorTest, MissingLibraryFailsStart) {
  NvmlCollectorOptions o = Options();
  o.library_path = "/nonexistent/libnvidia-ml.so.1";
  NvmlCollector c(o);
  absl::Status s = c.Start(&sink_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << s;
}

TEST_F(NvmlCollectorTest, MissingRequiredSymbolFailsStartNamingIt) {
  NvmlCollectorOptions o = Options();
  o.library_path = FAKE_NVML_BROKEN_PATH;
  NvmlCollector c(o);
  absl::Status s = c.Start(&sink_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("lacks the required symbol nvmlDeviceGetCount_v2"),
            std::string::npos)
      << s;
}

TEST_F(NvmlCollectorTest, MissingOptionalSymbolsDisableOnlyTheirReadings) {
  const testing::FakeNvml& legacy = FakeAt(FAKE_NVML_LEGACY_PATH);
  legacy.reset();
  legacy.set_device_count(1);
  legacy.set_value(0, "clock_event_reasons", 0x20);
  NvmlCollectorOptions o = Options();
  o.library_path = FAKE_NVML_LEGACY_PATH;
  NvmlCollector c(o);
  ASSERT_TRUE(c.Start(&sink_).ok());
  EXPECT_EQ(log_.Count("events off"), 1);
  Tick t = CollectOnce(c);
  // The nine plain readings (clock events through the older symbol), but
  // nothing from field values and no XID series without events.
  EXPECT_EQ(t.samples.size(), 10u);
  EXPECT_DOUBLE_EQ(*Find(t, "gpu_throttle_reasons", 0), 0x20);
  EXPECT_EQ(legacy.calls("nvmlDeviceGetCurrentClocksThrottleReasons"), 1);
  EXPECT_FALSE(Find(t, "gpu_ecc_dbe_total", 0).has_value());
  EXPECT_FALSE(Find(t, "gpu_xid_errors_total", 0).has_value());
}

TEST(NvmlStatusTest, TranslatesReturnCodes) {
  EXPECT_EQ(nvml::StatusCodeOf(nvml::kSuccess), absl::StatusCode::kOk);
  EXPECT_EQ(nvml::StatusCodeOf(nvml::kErrorNotSupported),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(nvml::StatusCodeOf(nvml::kErrorGpuIsLost),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(nvml::StatusCodeOf(nvml::kErrorDriverNotLoaded),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(nvml::StatusCodeOf(nvml::kErrorNoPermission),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(nvml::StatusCodeOf(nvml::kErrorTimeout),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(nvml::StatusCodeOf(12345), absl::StatusCode::kUnknown);
}

}  // namespace
}  // namespace vigil::agent
