// SeriesBudget: per-node and per-job counts of new series over a sliding
// window, so a node's everyday job churn never reaches the limit while a
// runaway one does.
#include "server/ingest/series_budget.h"

#include <string>

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(SeriesBudgetTest, RefusesPastTheLimitAndForgetsOldSeries) {
  SeriesBudget budget({.per_node = 3, .per_job = 0, .window_seconds = 2400});
  const double t = 1764000000;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(budget.Charge("n1", "job" + std::to_string(i), t).ok());
  bool by_node = false;
  absl::Status refused = budget.Charge("n1", "job9", t + 10, &by_node);
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(by_node);
  EXPECT_TRUE(budget.Charge("n2", "job9", t + 10).ok()) << "other nodes have their own";
  // A window later the old series no longer count.
  EXPECT_TRUE(budget.Charge("n1", "job9", t + 2400 + 100).ok());
}

TEST(SeriesBudgetTest, JobsCountOverAllTheirNodes) {
  SeriesBudget budget({.per_node = 0, .per_job = 2, .window_seconds = 3600});
  EXPECT_TRUE(budget.Charge("n1", "llm", 100).ok());
  EXPECT_TRUE(budget.Charge("n2", "llm", 100).ok());
  bool by_node = true;
  absl::Status refused = budget.Charge("n3", "llm", 100, &by_node);
  EXPECT_TRUE(absl::IsResourceExhausted(refused));
  EXPECT_FALSE(by_node);
  EXPECT_NE(refused.message().find("job llm created 2"), std::string::npos);
}

}  // namespace
}  // namespace vigil
