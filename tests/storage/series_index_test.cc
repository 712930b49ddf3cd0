#include "storage/series_index.h"

#include <string>

#include "gtest/gtest.h"

namespace vigil {
namespace {

SeriesKey Key(std::string metric, std::string job, std::string node,
              std::string gpu = "0") {
  SeriesKey key{std::move(metric),
                {{"gpu", std::move(gpu)}, {"job", std::move(job)}, {"node", std::move(node)}}};
  EXPECT_TRUE(NormalizeSeriesKey(&key).ok());
  return key;
}

TEST(SeriesIndexTest, GivesDenseIdsAndFindsThemByKey) {
  SeriesIndex index;
  const SeriesKey a = Key("gpu_power_watts", "train", "n001");
  const SeriesKey b = Key("gpu_power_watts", "train", "n002");
  EXPECT_EQ(index.Add(EncodeSeriesKey(a)), 0u);
  EXPECT_EQ(index.Add(EncodeSeriesKey(b)), 1u);
  EXPECT_EQ(index.size(), 2u);
  EXPECT_EQ(index.Find(EncodeSeriesKey(a)), 0u);
  EXPECT_EQ(index.Find(EncodeSeriesKey(b)), 1u);
  EXPECT_FALSE(index.Find(EncodeSeriesKey(Key("gpu_power_watts", "train", "n003"))));
  EXPECT_EQ(*index.Key(1), b);
  EXPECT_EQ(index.Encoded(0), EncodeSeriesKey(a));
}

TEST(SeriesIndexTest, ExpiredIdsStayTakenAndTheirKeysAreForgotten) {
  SeriesIndex index;
  const SeriesKey a = Key("m", "j", "n");
  index.AddExpired();
  EXPECT_EQ(index.Add(EncodeSeriesKey(a)), 1u);
  EXPECT_FALSE(index.Live(0));
  EXPECT_TRUE(index.Live(1));
  index.Expire(1);
  EXPECT_FALSE(index.Live(1));
  EXPECT_FALSE(index.Find(EncodeSeriesKey(a)));
  EXPECT_EQ(index.Key(1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(index.Key(7).status().code(), absl::StatusCode::kNotFound);
  // The same key comes back under a new id.
  EXPECT_EQ(index.Add(EncodeSeriesKey(a)), 2u);
  EXPECT_EQ(index.Find(EncodeSeriesKey(a)), 2u);
}

TEST(SeriesIndexTest, MatchesFiltersOnTheEncodedKey) {
  SeriesIndex index;
  index.Add(EncodeSeriesKey(Key("gpu_power_watts", "train", "n001")));
  // A label value long enough for a two-byte length prefix.
  const std::string long_job(200, 'j');
  index.Add(EncodeSeriesKey(Key("gpu_temp_celsius", long_job, "n002")));
  struct Case {
    SeriesFilter filter;
    bool first, second;
  };
  const Case cases[] = {
      {{}, true, true},
      {{.metric = "gpu_power_watts"}, true, false},
      {{.job = "train"}, true, false},
      {{.job = long_job}, false, true},
      {{.node = "n002"}, false, true},
      {{.job = "train", .node = "n002"}, false, false},
      {{.metric = "gpu"}, false, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(index.Matches(0, c.filter), c.first)
        << c.filter.metric << "/" << c.filter.job << "/" << c.filter.node;
    EXPECT_EQ(index.Matches(1, c.filter), c.second)
        << c.filter.metric << "/" << c.filter.job.size() << "/" << c.filter.node;
  }
}

TEST(SeriesIndexTest, ManyKeysRoundTrip) {
  SeriesIndex index;
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(index.Add(EncodeSeriesKey(Key("m", "job", "n" + std::to_string(i % 100),
                                            std::to_string(i / 100)))),
              static_cast<SeriesId>(i));
  }
  for (int i = 0; i < 5000; i += 37) {
    const SeriesKey key = Key("m", "job", "n" + std::to_string(i % 100), std::to_string(i / 100));
    EXPECT_EQ(index.Find(EncodeSeriesKey(key)), static_cast<SeriesId>(i));
    EXPECT_EQ(*index.Key(i), key);
  }
}

}  // namespace
}  // namespace vigil
