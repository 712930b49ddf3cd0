// TrainingRanks without sockets: limits and edge cases of the aggregation
// (the common cases run over a real socket in training_endpoint_test.cc).
#include "agent/training_ranks.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::map<std::string, double> Values(const Tick& tick) {
  std::map<std::string, double> out;
  for (const Sample& s : tick.samples) {
    out[s.key.labels.empty() ? s.key.metric : s.key.ToString()] = s.value;
  }
  return out;
}

// One connection's identity.
struct Conn {
  std::optional<HelloMessage> hello;
};

absl::Status Hello(TrainingRanks& ranks, Conn& conn, int64_t rank,
                   double now = 0) {
  std::optional<Tick> event;
  HelloMessage hello;
  hello.job = "j";
  hello.rank = rank;
  return ranks.Apply(hello, now, &conn.hello, &event);
}

void Step(TrainingRanks& ranks, Conn& conn, StepMessage step, double now = 0) {
  std::optional<Tick> event;
  ASSERT_TRUE(ranks.Apply(step, now, &conn.hello, &event).ok());
}

TEST(TrainingRanksTest, OppositeInfinitiesAndNaNMaxMin) {
  TrainingRanks ranks({});
  Conn a, b;
  ASSERT_TRUE(Hello(ranks, a, 0).ok());
  ASSERT_TRUE(Hello(ranks, b, 1).ok());
  StepMessage sa, sb;
  sa.grad_norm = kInf;
  sb.grad_norm = -kInf;
  sa.loss = kInf;
  sb.loss = 1.0;
  sa.step_time_seconds = std::nan("");
  sb.step_time_seconds = 2.0;
  sa.loss_scale = 1024;
  sb.loss_scale = std::nan("");
  Step(ranks, a, sa);
  Step(ranks, b, sb);
  Tick tick;
  ranks.Collect(0, &tick);
  std::map<std::string, double> v = Values(tick);
  EXPECT_TRUE(std::isnan(v.at("train_grad_norm")));
  EXPECT_EQ(v.at("train_loss"), kInf);
  EXPECT_TRUE(std::isnan(v.at("train_step_time_seconds")));
  EXPECT_TRUE(std::isnan(v.at("train_loss_scale")));
}

TEST(TrainingRanksTest, RefusesRanksBeyondTheLimitUntilSomeGoStale) {
  TrainingRanksOptions options;
  options.max_ranks = 2;
  options.staleness_seconds = 10;
  TrainingRanks ranks(options);
  Conn a, b, c;
  ASSERT_TRUE(Hello(ranks, a, 0, 0).ok());
  ASSERT_TRUE(Hello(ranks, b, 1, 5).ok());
  absl::Status full = Hello(ranks, c, 2, 6);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(c.hello.has_value());
  EXPECT_TRUE(Hello(ranks, a, 0, 6).ok()) << "a known rank is no new one";
  EXPECT_TRUE(Hello(ranks, c, 2, 15.5).ok()) << "rank 1 went stale at 15";
}

TEST(TrainingRanksTest, NonFiniteLossEventOncePerJobAndStep) {
  TrainingRanks ranks({});
  Conn a, b;
  ASSERT_TRUE(Hello(ranks, a, 0).ok());
  ASSERT_TRUE(Hello(ranks, b, 1).ok());
  StepMessage nan_step;
  nan_step.step = 9;
  nan_step.loss = std::nan("");
  std::optional<Tick> event;
  ASSERT_TRUE(ranks.Apply(nan_step, 3, &a.hello, &event).ok());
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->ts, 3);
  EXPECT_EQ(event->job, "j");
  EXPECT_EQ(event->step, 9);
  event.reset();
  ASSERT_TRUE(ranks.Apply(nan_step, 3, &b.hello, &event).ok());
  EXPECT_FALSE(event.has_value()) << "same step from another rank";
  nan_step.step = 10;
  nan_step.loss = -kInf;
  ASSERT_TRUE(ranks.Apply(nan_step, 4, &b.hello, &event).ok());
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->samples.at(0).value, -kInf);
}

}  // namespace
}  // namespace vigil::agent
