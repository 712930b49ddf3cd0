// The request body: snappy-compressed protobuf WriteRequest, decoded here
// and checked label by label and sample by sample.
#include "server/remote_write/write_request.h"

#include <snappy.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/remote_write/decode.h"
#include "prometheus/remote_write.pb.h"

namespace vigil {
namespace {


std::vector<std::pair<std::string, std::string>> Labels(
    const prometheus::TimeSeries& ts) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const prometheus::Label& l : ts.labels()) out.emplace_back(l.name(), l.value());
  return out;
}

TEST(WriteRequest, ExportNames) {
  EXPECT_EQ(ExportName("gpu_power_watts", ExportKind::kRaw), "gpu_power_watts");
  EXPECT_EQ(ExportName("gpu_power_watts", ExportKind::kMin), "gpu_power_watts:min_1m");
  EXPECT_EQ(ExportName("gpu_power_watts", ExportKind::kMax), "gpu_power_watts:max_1m");
  EXPECT_EQ(ExportName("gpu_power_watts", ExportKind::kAvg), "gpu_power_watts:avg_1m");
  EXPECT_EQ(ExportName("gpu_power_watts", ExportKind::kCount),
            "gpu_power_watts:count_1m");
}

TEST(WriteRequest, RoundTripKeepsLabelsSortedAndSamples) {
  const SeriesKey power{"gpu_power_watts",
                        {{"gpu", "3"}, {"job", "llm-70b"}, {"node", "n001"}}};
  // A capitalised label name sorts before "__name__".
  const SeriesKey xid{"gpu_xid_errors", {{"Zone", "a"}, {"node", "n002"}}};
  const SeriesKey bare{"up", {}};
  std::vector<ExportSeries> series = {
      {&power, ExportKind::kAvg, {{1764000000000, 301.5}, {1764000060000, 299}}},
      {&xid, ExportKind::kRaw, {{1764000001234, 79}}},
      {&bare, ExportKind::kCount, {{1764000000000, 60}}},
  };
  const prometheus::WriteRequest request = Decode(EncodeWriteRequest(series));
  ASSERT_EQ(request.timeseries_size(), 3);

  using L = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(Labels(request.timeseries(0)),
            (L{{"__name__", "gpu_power_watts:avg_1m"},
               {"gpu", "3"},
               {"job", "llm-70b"},
               {"node", "n001"}}));
  ASSERT_EQ(request.timeseries(0).samples_size(), 2);
  EXPECT_EQ(request.timeseries(0).samples(0).timestamp(), 1764000000000);
  EXPECT_EQ(request.timeseries(0).samples(0).value(), 301.5);
  EXPECT_EQ(request.timeseries(0).samples(1).timestamp(), 1764000060000);
  EXPECT_EQ(request.timeseries(0).samples(1).value(), 299);

  EXPECT_EQ(Labels(request.timeseries(1)),
            (L{{"Zone", "a"}, {"__name__", "gpu_xid_errors"}, {"node", "n002"}}));
  EXPECT_EQ(request.timeseries(1).samples(0).timestamp(), 1764000001234);
  EXPECT_EQ(request.timeseries(1).samples(0).value(), 79);

  EXPECT_EQ(Labels(request.timeseries(2)), (L{{"__name__", "up:count_1m"}}));
}

TEST(WriteRequest, EmptyRequestIsValid) {
  const prometheus::WriteRequest request = Decode(EncodeWriteRequest({}));
  EXPECT_EQ(request.timeseries_size(), 0);
}

}  // namespace
}  // namespace vigil
