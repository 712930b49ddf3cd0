// StreamClient against the fake server: outages, refusals and bounds.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "agent/stream_client.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_ingest_server.h"

namespace vigil::agent {
namespace {

using testing::FakeIngestServer;
using testing::ReceivedBatch;
using testing::WaitFor;

std::unique_ptr<StreamClient> MakeClient(const std::string& server,
                                         StreamClientOptions options = {}) {
  options.server = server;
  options.node = "n002";
  if (options.security == nullptr) options.security = testing::Plaintext();
  if (options.clock == RealClock()) {
    options.initial_backoff_seconds = 0.01;
    options.max_backoff_seconds = 0.05;
  }
  absl::StatusOr<std::unique_ptr<StreamClient>> c =
      StreamClient::Create(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// Registers two series and enqueues one frame per seq in [from, to].
void Send(StreamClient& c, int from, int to) {
  uint32_t a = *c.RegisterSeries({"train_loss", {}});
  uint32_t b = *c.RegisterSeries({"net_drops_total", {{"dev", "mlx5_0"}}});
  for (int i = from; i <= to; ++i) {
    v1::Frame f;
    f.set_ts(1764000000.0 + i);
    f.add_series_ids(a);
    f.add_values(i);
    f.add_series_ids(b);
    f.add_values(0);
    absl::StatusOr<uint64_t> seq = c.Enqueue({f});
    ASSERT_TRUE(seq.ok());
    ASSERT_EQ(*seq, static_cast<uint64_t>(i));
  }
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t s = from; s <= to; ++s) v.push_back(s);
  return v;
}

TEST(StreamClientReconnectTest, DroppedStreamResendsUnackedWithDictionary) {
  FakeIngestServer server;
  std::unique_ptr<StreamClient> client = MakeClient(server.address());
  client->Start();
  Send(*client, 1, 3);
  ASSERT_TRUE(client->WaitForAcked(3, RealClock()->Now() + 20));
  server.HoldAcks(true);
  Send(*client, 4, 8);
  ASSERT_TRUE(WaitFor([&] { return server.received().size() == 8; }));
  server.HoldAcks(false);
  server.CancelStreams();
  ASSERT_TRUE(client->WaitForAcked(8, RealClock()->Now() + 20));
  Send(*client, 9, 10);
  ASSERT_TRUE(client->WaitForAcked(10, RealClock()->Now() + 20));

  EXPECT_EQ(server.accepted(), Range(1, 10));
  std::vector<ReceivedBatch> got = server.received();
  std::vector<uint64_t> second;
  for (const ReceivedBatch& b : got) {
    if (b.stream == 2) second.push_back(b.seq);
  }
  EXPECT_EQ(second, Range(4, 10));  // unacked ones first, in order
  auto first_of_stream_2 =
      std::find_if(got.begin(), got.end(),
                   [](const ReceivedBatch& b) { return b.stream == 2; });
  ASSERT_NE(first_of_stream_2, got.end());
  EXPECT_TRUE(first_of_stream_2->hello);
  EXPECT_EQ(first_of_stream_2->series, 2);
  StreamClientStats s = client->stats();
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(s.batches_resent, 5u);
  EXPECT_EQ(s.batches_acked, 10u);
}

TEST(StreamClientReconnectTest, ServerRestartLosesNothing) {
  std::optional<FakeIngestServer> server(std::in_place);
  int port = server->port();
  std::unique_ptr<StreamClient> client = MakeClient(server->address());
  client->Start();
  Send(*client, 1, 5);
  ASSERT_TRUE(client->WaitForAcked(5, RealClock()->Now() + 20));
  server.reset();
  Send(*client, 6, 50);
  ASSERT_TRUE(WaitFor([&] { return client->stats().reconnects >= 2; }));
  server.emplace(port);
  ASSERT_TRUE(client->WaitForAcked(50, RealClock()->Now() + 20));
  EXPECT_EQ(server->accepted(), Range(6, 50));
  EXPECT_TRUE(server->received()[0].hello);
}

TEST(StreamClientReconnectTest, InvalidArgumentDropsTheHeadBatch) {
  FakeIngestServer server;
  server.RejectSeq(3);
  std::unique_ptr<StreamClient> client = MakeClient(server.address());
  client->Start();
  Send(*client, 1, 6);
  ASSERT_TRUE(client->WaitForAcked(6, RealClock()->Now() + 20));
  EXPECT_EQ(server.accepted(), (std::vector<uint64_t>{1, 2, 4, 5, 6}));
  StreamClientStats s = client->stats();
  EXPECT_EQ(s.batches_rejected, 1u);
  EXPECT_EQ(s.pending_batches, 0u);
  EXPECT_EQ(s.reconnects, 1u);
}

TEST(StreamClientReconnectTest, AlreadyExistsIsRetried) {
  FakeIngestServer server;
  server.RefuseStreams(2);
  std::unique_ptr<StreamClient> client = MakeClient(server.address());
  client->Start();
  Send(*client, 1, 3);
  ASSERT_TRUE(client->WaitForAcked(3, RealClock()->Now() + 20));
  EXPECT_EQ(server.accepted(), Range(1, 3));
  EXPECT_EQ(client->stats().already_exists, 2u);
  EXPECT_EQ(server.streams(), 3);
}

TEST(StreamClientReconnectTest, BacksOffOnFakeClockUntilServerComesUp) {
  int port;
  {
    FakeIngestServer probe;  // find a free port, then free it
    port = probe.port();
  }
  FakeClock clock;
  StreamClientOptions options;
  options.clock = &clock;
  options.seed = 7;
  std::unique_ptr<StreamClient> client =
      MakeClient("127.0.0.1:" + std::to_string(port), options);
  client->Start();
  Send(*client, 1, 2);
  // Each failed attempt waits about twice as long as the one before.
  double expected = 0.2;
  for (uint64_t attempt = 1; attempt <= 4; ++attempt) {
    ASSERT_TRUE(WaitFor([&] {
      StreamClientStats s = client->stats();
      return s.streams_opened == attempt && s.backoff_seconds > 0.7 * expected;
    }));
    double wait = client->stats().backoff_seconds;
    EXPECT_GE(wait, 0.8 * expected - 1e-9);
    EXPECT_LE(wait, 1.2 * expected + 1e-9);
    clock.Advance(wait);
    expected *= 2;
  }
  FakeIngestServer server(port);
  ASSERT_TRUE(WaitFor([&] {
    clock.Advance(0.5);
    return client->stats().acked_seq == 2;
  }));
  EXPECT_EQ(server.accepted(), Range(1, 2));
}

TEST(StreamClientReconnectTest, FullQueueDropsOldestAndCounts) {
  int port;
  {
    FakeIngestServer probe;
    port = probe.port();
  }
  StreamClientOptions options;
  options.max_pending_bytes = 2000;
  std::unique_ptr<StreamClient> client =
      MakeClient("127.0.0.1:" + std::to_string(port), options);
  Send(*client, 1, 200);  // ~30 bytes each
  StreamClientStats s = client->stats();
  EXPECT_GT(s.batches_dropped, 100u);
  EXPECT_LE(s.pending_bytes, 2000u);
  EXPECT_EQ(s.pending_batches + s.batches_dropped, 200u);
  FakeIngestServer server(port);
  client->Start();
  ASSERT_TRUE(client->WaitForAcked(200, RealClock()->Now() + 20));
  std::vector<uint64_t> accepted = server.accepted();
  EXPECT_EQ(accepted, Range(201 - s.pending_batches, 200));
}

}  // namespace
}  // namespace vigil::agent
