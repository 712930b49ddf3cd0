// Detector::Baseline: what the k-sigma rule currently holds for a series.
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "detector/detector.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

constexpr uint32_t kTemp = 0;     // gauge, baseline kHigh
constexpr uint32_t kTx = 1;       // counter, baseline of its rate
constexpr uint32_t kUtil = 2;     // gauge without a baseline detector
constexpr double kTxPerSecond = 4e10;

class BaselineQueryTest : public ::testing::Test {
 protected:
  static DetectorOptions Options() {
    DetectorOptions o;
    o.baseline.learn_steps = 50;
    o.baseline.warmup_steps = 0;
    o.baseline.k_sigma = 4;
    o.lifecycle.rewarm_s = 0;
    o.lifecycle.rewarm_steps = 0;
    return o;
  }

  BaselineQueryTest() : detector_(Options()) {
    auto key = [](const char* metric) {
      return SeriesKey{metric, {{"gpu", "0"}, {"job", "j"}, {"node", "n"}}};
    };
    EXPECT_TRUE(detector_.RegisterSeries(kTemp, key("gpu_temperature_celsius")).ok());
    EXPECT_TRUE(detector_.RegisterSeries(kTx, key("gpu_nvlink_tx_bytes_total")).ok());
    EXPECT_TRUE(detector_.RegisterSeries(kUtil, key("gpu_utilization_ratio")).ok());
  }

  // Frames for steps [from, to): temperature 60 +- 0.5, NVLink bytes
  // growing at kTxPerSecond, utilisation 0.9; one second apart.
  void Run(int64_t from, int64_t to) {
    const std::vector<uint32_t> ids = {kTemp, kTx, kUtil};
    std::vector<Anomaly> out;
    for (int64_t step = from; step < to; ++step) {
      const std::vector<double> values = {step % 2 ? 60.5 : 59.5,
                                          1e12 + kTxPerSecond * step, 0.9};
      detector_.ProcessFrame(
          FrameView{"n", "j", step, 1000.0 + static_cast<double>(step), ids, values},
          &out);
    }
    EXPECT_TRUE(out.empty()) << out.size() << " anomalies from steady data";
  }

  Detector detector_;
};

TEST_F(BaselineQueryTest, UnknownSeriesHasNone) {
  EXPECT_FALSE(detector_.Baseline(3).has_value());
  EXPECT_FALSE(detector_.Baseline(Detector::kMaxSeriesId + 5).has_value());
}

TEST_F(BaselineQueryTest, NotLearnedBeforeLearnSteps) {
  std::optional<SeriesBaseline> fresh = detector_.Baseline(kTemp);
  ASSERT_TRUE(fresh.has_value());
  EXPECT_FALSE(fresh->learned);
  EXPECT_EQ(fresh->evaluated, 0);

  Run(0, 10);
  std::optional<SeriesBaseline> temp = detector_.Baseline(kTemp);
  ASSERT_TRUE(temp.has_value());
  EXPECT_FALSE(temp->learned);
  EXPECT_EQ(temp->evaluated, 10);
  EXPECT_FALSE(temp->rate);
  EXPECT_EQ(temp->k_sigma, 4);
  std::optional<SeriesBaseline> tx = detector_.Baseline(kTx);
  ASSERT_TRUE(tx.has_value());
  EXPECT_FALSE(tx->learned);
  EXPECT_EQ(tx->evaluated, 9);  // the first sample gives no rate
  EXPECT_TRUE(tx->rate);
}

TEST_F(BaselineQueryTest, LearnedAfterLearnSteps) {
  Run(0, 80);
  std::optional<SeriesBaseline> temp = detector_.Baseline(kTemp);
  ASSERT_TRUE(temp.has_value());
  EXPECT_TRUE(temp->learned);
  EXPECT_NEAR(temp->mean, 60, 0.5);
  EXPECT_GT(temp->sigma, 0);
  EXPECT_EQ(temp->k_sigma, 4);
  EXPECT_EQ(temp->evaluated, 80);
  EXPECT_FALSE(temp->rate);

  std::optional<SeriesBaseline> tx = detector_.Baseline(kTx);
  ASSERT_TRUE(tx.has_value());
  EXPECT_TRUE(tx->learned);
  EXPECT_TRUE(tx->rate);
  EXPECT_NEAR(tx->mean, kTxPerSecond, kTxPerSecond * 1e-6);
  EXPECT_GT(tx->sigma, 0);

  // Utilisation has no baseline detector: never learned.
  std::optional<SeriesBaseline> util = detector_.Baseline(kUtil);
  ASSERT_TRUE(util.has_value());
  EXPECT_FALSE(util->learned);
  EXPECT_EQ(util->mean, 0);
}

}  // namespace
}  // namespace vigil
