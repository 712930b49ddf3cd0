// EventHub: sequence numbers, waiting for notices, timeouts, wake-ups from
// another thread and gaps after the ring overflowed.
#include "server/escalation/event_hub.h"

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vigil {
namespace {

using Json = nlohmann::json;

std::vector<uint64_t> Seqs(const ChangeBatch& batch) {
  std::vector<uint64_t> seqs;
  for (const ChangeNotice& n : batch.notices) seqs.push_back(n.seq);
  return seqs;
}

TEST(EventHubTest, NumbersNoticesFromOneAndStampsTheJson) {
  EventHub hub;
  EXPECT_EQ(hub.last_seq(), 0u);
  hub.Publish({{"topic", "incident"}, {"id", "inc-000001"}});
  hub.Publish({{"topic", "audit"}});
  EXPECT_EQ(hub.last_seq(), 2u);

  ChangeBatch all = hub.WaitAfter(0, 0);
  EXPECT_FALSE(all.gap);
  ASSERT_EQ(Seqs(all), (std::vector<uint64_t>{1, 2}));
  const Json first = Json::parse(all.notices[0].json, nullptr, false);
  ASSERT_FALSE(first.is_discarded()) << all.notices[0].json;
  EXPECT_EQ(first["seq"], 1);
  EXPECT_EQ(first["topic"], "incident");
  EXPECT_EQ(first["id"], "inc-000001");
  EXPECT_EQ(Json::parse(all.notices[1].json)["seq"], 2);

  ChangeBatch after_one = hub.WaitAfter(1, 0);
  EXPECT_FALSE(after_one.gap);
  EXPECT_EQ(Seqs(after_one), std::vector<uint64_t>{2});
}

TEST(EventHubTest, NothingNewTimesOutEmpty) {
  EventHub hub;
  hub.Publish({{"topic", "audit"}});
  const auto start = std::chrono::steady_clock::now();
  ChangeBatch batch = hub.WaitAfter(1, 0.05);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(batch.notices.empty());
  EXPECT_FALSE(batch.gap);
  EXPECT_GE(waited, 0.04);
  // A position beyond the last one is not a gap either.
  EXPECT_TRUE(hub.WaitAfter(7, 0).notices.empty());
  EXPECT_FALSE(hub.WaitAfter(7, 0).gap);
}

TEST(EventHubTest, PublishWakesAWaiterInAnotherThread) {
  EventHub hub;
  auto waiter = std::async(std::launch::async, [&hub] {
    const auto start = std::chrono::steady_clock::now();
    ChangeBatch batch = hub.WaitAfter(0, 60);
    return std::make_pair(
        batch, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                   .count());
  });
  hub.Publish({{"topic", "incident"}});
  // Bounded by the waiter's own timeout; it must return long before it.
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  auto [batch, waited] = waiter.get();
  EXPECT_EQ(Seqs(batch), std::vector<uint64_t>{1});
  EXPECT_FALSE(batch.gap);
  EXPECT_LT(waited, 30);
}

TEST(EventHubTest, FallingBehindTheRingIsAGap) {
  EventHub hub(3);
  for (int i = 0; i < 5; ++i) hub.Publish({{"n", i}});
  EXPECT_EQ(hub.last_seq(), 5u);

  ChangeBatch from_start = hub.WaitAfter(0, 0);
  EXPECT_TRUE(from_start.gap);
  EXPECT_EQ(Seqs(from_start), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(Json::parse(from_start.notices[0].json)["n"], 2);
  EXPECT_TRUE(hub.WaitAfter(1, 0).gap);
  // Seq 3 is the oldest kept: a stream that sent 2 missed nothing.
  ChangeBatch caught_up = hub.WaitAfter(2, 0);
  EXPECT_FALSE(caught_up.gap);
  EXPECT_EQ(Seqs(caught_up), (std::vector<uint64_t>{3, 4, 5}));
}

TEST(EventHubTest, ZeroCapacityKeepsTheNewest) {
  EventHub hub(0);
  hub.Publish({{"n", 1}});
  hub.Publish({{"n", 2}});
  ChangeBatch batch = hub.WaitAfter(1, 0);
  EXPECT_FALSE(batch.gap);
  EXPECT_EQ(Seqs(batch), std::vector<uint64_t>{2});
}

}  // namespace
}  // namespace vigil
