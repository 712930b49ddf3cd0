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

namespace vigil::agent {
namespace {

// A finished job's ranks close their connections: a few seconds later the
// node reports its idle job and the tick says which job ended, at which
// step, and why - not 300 s later at a frozen step (which looks like a
// hang).
TEST(TrainingRanksTest, RanksThatLeaveEndTheirJob) {
  TrainingRanksOptions options;
  options.default_job = "";
  TrainingRanks ranks(options);
  Conn a, b;
  ASSERT_TRUE(Hello(ranks, a, 0, 100).ok());
  ASSERT_TRUE(Hello(ranks, b, 1, 100).ok());
  StepMessage s;
  s.step = 41;
  s.loss = 2.0;
  Step(ranks, a, s, 101);
  Step(ranks, b, s, 101);
  Tick running;
  ranks.Collect(102, &running);
  EXPECT_EQ(running.job, "j");
  EXPECT_EQ(running.step, 41);
  EXPECT_FALSE(running.job_end.has_value());
  // Both ranks exit; within the grace they still count (a reconnect).
  ranks.Disconnected(*a.hello, 103);
  ranks.Disconnected(*b.hello, 103);
  Tick grace;
  ranks.Collect(105, &grace);
  EXPECT_EQ(grace.job, "j");
  EXPECT_FALSE(grace.job_end.has_value());
  Tick ended;
  ranks.Collect(109, &ended);
  EXPECT_EQ(ended.job, "");
  ASSERT_TRUE(ended.job_end.has_value());
  EXPECT_EQ(ended.job_end->job, "j");
  EXPECT_EQ(ended.job_end->step, 41);
  EXPECT_EQ(ended.job_end->reason, "ranks_exited");
  // Said once.
  Tick after;
  ranks.Collect(110, &after);
  EXPECT_FALSE(after.job_end.has_value());
}

// A rank that reconnects within the grace (a DataLoader fork closing its
// copy, a network blip) keeps its job alive.
TEST(TrainingRanksTest, ReconnectWithinGraceKeepsTheJob) {
  TrainingRanks ranks({});
  Conn a, again;
  ASSERT_TRUE(Hello(ranks, a, 0, 100).ok());
  ranks.Disconnected(*a.hello, 101);
  ASSERT_TRUE(Hello(ranks, again, 0, 102).ok());
  Tick tick;
  ranks.Collect(120, &tick);
  EXPECT_EQ(tick.job, "j");
  EXPECT_FALSE(tick.job_end.has_value());
}

// Ranks that fall silent without closing (a hung process keeps its socket
// open) are dropped at staleness, and the end says so.
TEST(TrainingRanksTest, StaleRanksEndTheirJobAsStale) {
  TrainingRanksOptions options;
  options.staleness_seconds = 300;
  TrainingRanks ranks(options);
  Conn a;
  ASSERT_TRUE(Hello(ranks, a, 0, 100).ok());
  Tick first;
  ranks.Collect(101, &first);
  EXPECT_EQ(first.job, "j");
  Tick later;
  ranks.Collect(500, &later);
  ASSERT_TRUE(later.job_end.has_value());
  EXPECT_EQ(later.job_end->reason, "ranks_stale");
}

}  // namespace
}  // namespace vigil::agent
