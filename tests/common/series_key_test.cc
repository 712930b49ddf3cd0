#include "common/series_key.h"

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(SeriesKeyTest, NormalizeSortsLabels) {
  SeriesKey key{"gpu_power_watts", {{"node", "n1"}, {"gpu", "3"}, {"job", "j"}}};
  ASSERT_TRUE(NormalizeSeriesKey(&key).ok());
  EXPECT_EQ(key.ToString(), R"(gpu_power_watts{gpu="3",job="j",node="n1"})");
  EXPECT_EQ(key.LabelValue("gpu"), "3");
  EXPECT_EQ(key.LabelValue("dev"), "");
}

struct BadKeyCase {
  const char* name;
  SeriesKey key;
  const char* message_part;
};

class BadSeriesKeyTest : public testing::TestWithParam<BadKeyCase> {};

TEST_P(BadSeriesKeyTest, IsRejectedWithReason) {
  SeriesKey key = GetParam().key;
  absl::Status status = NormalizeSeriesKey(&key);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().message_part), std::string::npos)
      << status;
}

INSTANTIATE_TEST_SUITE_P(
    All, BadSeriesKeyTest,
    testing::Values(
        BadKeyCase{"empty_metric", {"", {}}, "empty metric"},
        BadKeyCase{"metric_digit_start", {"9x", {}}, "must start"},
        BadKeyCase{"metric_dash", {"gpu-power", {}}, "may only hold"},
        BadKeyCase{"label_dash", {"m", {{"g-pu", "1"}}}, "may only hold"},
        BadKeyCase{"reserved_label", {"m", {{"__name__", "x"}}}, "reserved"},
        BadKeyCase{"duplicate_label", {"m", {{"gpu", "1"}, {"gpu", "2"}}},
                   "given twice"},
        BadKeyCase{"empty_value", {"m", {{"gpu", ""}}}, "empty value"},
        BadKeyCase{"bad_utf8", {"m", {{"dev", "\xff\xfe"}}}, "UTF-8"},
        BadKeyCase{"truncated_utf8", {"m", {{"dev", "a\xc3"}}}, "UTF-8"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(SeriesKeyTest, AcceptsUtf8Values) {
  SeriesKey key{"m", {{"dev", "网卡0"}}};
  EXPECT_TRUE(NormalizeSeriesKey(&key).ok());
}

TEST(SeriesKeyTest, EncodeDecodeRoundTrip) {
  SeriesKey key{"net_rx_bytes_total", {{"dev", "mlx5_0"}, {"node", "n003"}}};
  auto decoded = DecodeSeriesKey(EncodeSeriesKey(key));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, key);
  EXPECT_FALSE(DecodeSeriesKey("\x05" "ab").ok());
}

}  // namespace
}  // namespace vigil
