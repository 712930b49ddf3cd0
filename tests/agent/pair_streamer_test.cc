// PairStreamer against fake servers: following the owners a server names,
// streaming to both members of a pair, surviving the loss of one, and
// asking another server when both are gone (docs/SCALING.md).
#include "agent/pair_streamer.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/agent/fake_ingest_server.h"

namespace vigil::agent {
namespace {

using testing::FakeIngestServer;
using testing::WaitFor;

std::unique_ptr<PairStreamer> MakePair(const std::string& servers, double rehome_seconds = 15) {
  StreamClientOptions options;
  options.server = servers;
  options.node = "n001";
  options.security = testing::Plaintext();
  options.initial_backoff_seconds = 0.01;
  options.max_backoff_seconds = 0.05;
  absl::StatusOr<std::unique_ptr<PairStreamer>> pair =
      PairStreamer::Create(std::move(options), nullptr, rehome_seconds);
  EXPECT_TRUE(pair.ok()) << pair.status();
  return std::move(*pair);
}

// Registers two series (registering the second on the first stream first
// so the streams' ids differ) and sends `n` frames.
void Send(PairStreamer& pair, int n, double t0) {
  absl::StatusOr<uint32_t> a = pair.RegisterSeries({"gpu_power_watts", {{"gpu", "0"}}});
  absl::StatusOr<uint32_t> b = pair.RegisterSeries({"gpu_power_watts", {{"gpu", "1"}}});
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < n; ++i) {
    v1::Frame frame;
    frame.set_job("llm-r1");
    frame.set_ts(t0 + i);
    frame.add_series_ids(*a);
    frame.add_values(i);
    frame.add_series_ids(*b);
    frame.add_values(-i);
    ASSERT_TRUE(pair.Enqueue({frame}).ok());
  }
}

size_t AcceptedFrames(const FakeIngestServer& server) {
  size_t frames = 0;
  for (const auto& batch : server.received()) frames += batch.frames;
  return frames;
}

TEST(PairStreamerTest, ASingleServerIsOneStream) {
  FakeIngestServer server;
  auto pair = MakePair(server.address());
  pair->Start();
  Send(*pair, 3, 1764000000);
  ASSERT_TRUE(pair->Flush(RealClock()->Now() + 20));
  EXPECT_EQ(server.accepted().size(), 3u);
  EXPECT_EQ(server.streams(), 1);
  EXPECT_EQ(pair->targets()[1], "");
  pair->Stop();
}

TEST(PairStreamerTest, ARefusalNamingThePairMovesBothStreamsThere) {
  FakeIngestServer other, primary, standby;
  other.SetOwners({primary.address(), standby.address()}, /*redirect=*/true);
  primary.SetOwners({primary.address(), standby.address()}, false);
  standby.SetOwners({primary.address(), standby.address()}, false);
  auto pair = MakePair(other.address());
  pair->Start();
  Send(*pair, 1, 1764000000);
  ASSERT_TRUE(WaitFor([&] { return primary.accepted().size() == 1; }));
  ASSERT_TRUE(WaitFor([&] { return pair->targets()[1] == standby.address(); }));
  Send(*pair, 2, 1764000001);
  ASSERT_TRUE(WaitFor([&] { return primary.accepted().size() == 3; }));
  ASSERT_TRUE(WaitFor([&] { return standby.accepted().size() >= 2; }));
  EXPECT_TRUE(other.accepted().empty());
  EXPECT_EQ(pair->stats().redirects, 1u);
  // Frames reached the standby in its own stream's ids (the fake checks
  // every id against the stream's dictionary).
  EXPECT_EQ(AcceptedFrames(standby), standby.accepted().size());
  pair->Stop();
}

TEST(PairStreamerTest, WhenOneMemberIsGoneTheOtherCarriesOn) {
  auto primary = std::make_unique<FakeIngestServer>();
  FakeIngestServer standby;
  const std::string p = primary->address(), s = standby.address();
  primary->SetOwners({p, s}, false);
  standby.SetOwners({p, s}, false);
  auto pair = MakePair(p);
  pair->Start();
  Send(*pair, 1, 1764000000);
  ASSERT_TRUE(WaitFor([&] { return pair->targets()[1] == s; }));
  primary.reset();  // the leader dies; the standby learns it and says so
  FakeIngestServer* survivor = &standby;
  survivor->SetOwners({s}, false);
  survivor->CancelStreams();  // its next stream's first ack names the owners
  Send(*pair, 3, 1764000001);
  ASSERT_TRUE(WaitFor([&] { return pair->targets()[0] == "" && pair->targets()[1] == s; }));
  ASSERT_TRUE(WaitFor([&] { return survivor->accepted().size() >= 3; }));
  EXPECT_GT(pair->stats().batches_handed_over, 0u);
  pair->Stop();
}

TEST(PairStreamerTest, WithBothMembersGoneItAsksTheNextServer) {
  FakeIngestServer seed, new_owner;
  auto dead = std::make_unique<FakeIngestServer>();
  const std::string dead_address = dead->address();
  dead.reset();
  seed.SetOwners({new_owner.address()}, /*redirect=*/true);
  new_owner.SetOwners({new_owner.address()}, false);
  auto pair = MakePair(dead_address + "," + seed.address(), /*rehome_seconds=*/0.5);
  pair->Start();
  Send(*pair, 2, 1764000000);
  ASSERT_TRUE(WaitFor([&] { return new_owner.accepted().size() == 2; }));
  EXPECT_EQ(pair->targets()[0], new_owner.address());
  pair->Stop();
}

}  // namespace
}  // namespace vigil::agent
