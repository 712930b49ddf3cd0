#include "promcompat/text_format.h"

#include <cmath>

#include "gtest/gtest.h"

namespace vigil::promcompat {
namespace {

TEST(TextFormatTest, ReadsADcgmExporterPage) {
  const char* page =
      "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
      "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
      "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-1\",Hostname=\"n1\","
      "modelName=\"NVIDIA H100 80GB HBM3\"} 612.25\n"
      "\n"
      "node_disk_read_bytes_total{device=\"nvme0n1\"} 1.5e+12 1700000000000\r\n"
      "  go_goroutines 12\n"
      "odd{msg=\"a \\\"quoted\\\" back\\\\slash\\nnewline\",} NaN\n"
      "up +Inf\n";
  absl::StatusOr<std::vector<TextSample>> s = ParseTextFormat(page);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ((*s)[0].name, "DCGM_FI_DEV_POWER_USAGE");
  ASSERT_EQ((*s)[0].labels.size(), 4u);
  EXPECT_EQ((*s)[0].labels[3].second, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ((*s)[0].value, 612.25);
  EXPECT_EQ((*s)[1].value, 1.5e12);
  EXPECT_EQ((*s)[2].name, "go_goroutines");
  EXPECT_EQ((*s)[3].labels[0].second, "a \"quoted\" back\\slash\nnewline");
  EXPECT_TRUE(std::isnan((*s)[3].value));
  EXPECT_TRUE(std::isinf((*s)[4].value));
}

TEST(TextFormatTest, AMalformedLineIsNamed) {
  for (const char* bad : {"ok 1\nbroken{gpu=\"0\" 1\n", "ok 1\nx{gpu=0} 1\n",
                          "ok 1\nx{gpu=\"0\"} twelve\n", "ok 1\nx 1 soon\n",
                          "ok 1\n{gpu=\"0\"} 1\n", "ok 1\nx{gpu=\"0} 1\n"}) {
    absl::StatusOr<std::vector<TextSample>> s = ParseTextFormat(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().message().substr(0, 7), "line 2:") << s.status();
  }
}

}  // namespace
}  // namespace vigil::promcompat
