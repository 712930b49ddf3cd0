// StreamClient against the fake server: the healthy path.
#include "agent/stream_client.h"

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/support/channel_arguments.h>

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
  options.node = "n001";
  if (options.security == nullptr) options.security = testing::Plaintext();
  options.interval_seconds = 1.0;
  options.initial_backoff_seconds = 0.01;
  options.max_backoff_seconds = 0.05;
  absl::StatusOr<std::unique_ptr<StreamClient>> c =
      StreamClient::Create(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

v1::Frame MakeFrame(double ts, const std::vector<uint32_t>& ids) {
  v1::Frame f;
  f.set_job("job");
  f.set_step(static_cast<int64_t>(ts));
  f.set_ts(ts);
  for (uint32_t id : ids) {
    f.add_series_ids(id);
    f.add_values(ts + id);
  }
  return f;
}

std::vector<uint32_t> Register(StreamClient& c, int n, int gpu_base = 0) {
  std::vector<uint32_t> ids;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<uint32_t> id = c.RegisterSeries(
        {"gpu_power_watts", {{"gpu", std::to_string(gpu_base + i)}}});
    EXPECT_TRUE(id.ok());
    ids.push_back(*id);
  }
  return ids;
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t s = from; s <= to; ++s) v.push_back(s);
  return v;
}

TEST(StreamClientTest, DeliversInOrderWithHelloAndDictionaryFirst) {
  FakeIngestServer server;
  std::unique_ptr<StreamClient> client = MakeClient(server.address());
  std::vector<uint32_t> ids = Register(*client, 3);
  EXPECT_EQ(ids, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(*client->RegisterSeries({"gpu_power_watts", {{"gpu", "1"}}}), 1u);
  client->Start();
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<uint64_t> seq = client->Enqueue({MakeFrame(i, ids)});
    ASSERT_TRUE(seq.ok()) << seq.status();
    EXPECT_EQ(*seq, last + 1);
    last = *seq;
  }
  ASSERT_TRUE(client->WaitForAcked(last, RealClock()->Now() + 20));
  EXPECT_EQ(server.accepted(), Range(1, 20));
  std::vector<ReceivedBatch> got = server.received();
  ASSERT_EQ(got.size(), 20u);
  EXPECT_TRUE(got[0].hello);
  EXPECT_EQ(got[0].hello_node, "n001");
  EXPECT_EQ(got[0].hello_instance, client->agent_instance());
  EXPECT_EQ(got[0].hello_version, kAgentVersion);
  EXPECT_EQ(got[0].hello_interval, 1.0);
  EXPECT_EQ(got[0].series, 3);
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_FALSE(got[i].hello);
    EXPECT_EQ(got[i].series, 0);
  }
  StreamClientStats s = client->stats();
  EXPECT_EQ(s.batches_enqueued, 20u);
  EXPECT_EQ(s.batches_sent, 20u);
  EXPECT_EQ(s.batches_acked, 20u);
  EXPECT_EQ(s.acked_seq, 20u);
  EXPECT_EQ(s.pending_batches, 0u);
  EXPECT_EQ(s.reconnects, 0u);
  EXPECT_GT(s.last_ack_time, 0);
  EXPECT_TRUE(s.streaming);
  EXPECT_EQ(client->agent_instance().size(), 16u);
}

TEST(StreamClientTest, SeriesAddedLaterTravelWithTheirFirstBatch) {
  FakeIngestServer server;
  std::unique_ptr<StreamClient> client = MakeClient(server.address());
  std::vector<uint32_t> ids = Register(*client, 2);
  client->Start();
  ASSERT_TRUE(client->Enqueue({MakeFrame(1, ids)}).ok());
  ASSERT_TRUE(client->WaitForAcked(1, RealClock()->Now() + 20));
  std::vector<uint32_t> more = Register(*client, 2, 10);
  ASSERT_TRUE(client->Enqueue({MakeFrame(2, more)}).ok());
  ASSERT_TRUE(client->WaitForAcked(2, RealClock()->Now() + 20));
  EXPECT_EQ(server.accepted(), Range(1, 2));  // the server knew the ids
  EXPECT_EQ(server.received()[1].series, 2);
}

TEST(StreamClientTest, SplitsBigEnqueuesIntoBatchesUnder4MiB) {
  FakeIngestServer server;
  std::unique_ptr<StreamClient> client = MakeClient(server.address());
  std::vector<uint32_t> ids = Register(*client, 1000);
  client->Start();
  std::vector<v1::Frame> frames;
  for (int i = 0; i < 1000; ++i) frames.push_back(MakeFrame(i, ids));
  // One frame far bigger than a batch: split into frames too.
  std::vector<uint32_t> many;
  for (int i = 0; i < 400000; ++i) many.push_back(ids[i % ids.size()]);
  frames.push_back(MakeFrame(5000, many));
  absl::StatusOr<uint64_t> last = client->Enqueue(std::move(frames));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_GT(*last, 10u);
  ASSERT_TRUE(client->WaitForAcked(*last, RealClock()->Now() + 30));
  EXPECT_EQ(server.accepted(), Range(1, *last));
  EXPECT_EQ(server.accepted_samples(), 1000u * 1000 + 400000);
  for (const ReceivedBatch& b : server.received()) {
    EXPECT_LT(b.bytes, 4u << 20);
  }
}

TEST(StreamClientTest, EnqueueRejectsMalformedFrames) {
  FakeIngestServer server;
  std::unique_ptr<StreamClient> client = MakeClient(server.address());
  std::vector<uint32_t> ids = Register(*client, 2);
  EXPECT_EQ(client->Enqueue({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Enqueue({MakeFrame(1, {0, 7})}).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::Frame uneven = MakeFrame(1, ids);
  uneven.add_values(1);
  EXPECT_EQ(client->Enqueue({uneven}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->stats().batches_enqueued, 0u);
  EXPECT_EQ(client->RegisterSeries({"bad name", {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(StreamClient::Create({}).ok());
}

// The agent's connection: its own subchannel (our backoff paces retries)
// and no bandwidth probes (a ping for every ack read costs the server CPU;
// bench/RESULTS.md, "gRPC's bandwidth probe off").
TEST(StreamClientTest, IngestChannelHasItsOwnSubchannelAndNoBandwidthProbe) {
  grpc::ChannelArguments args;
  SetIngestChannelArguments(&args);
  const grpc_channel_args c = args.c_channel_args();
  auto int_arg = [&](const std::string& key) -> int {
    for (size_t i = 0; i < c.num_args; ++i) {
      if (key == c.args[i].key && c.args[i].type == GRPC_ARG_INTEGER)
        return c.args[i].value.integer;
    }
    return -1;
  };
  EXPECT_EQ(int_arg(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL), 1);
  EXPECT_EQ(int_arg(GRPC_ARG_HTTP2_BDP_PROBE), 0);
}

}  // namespace
}  // namespace vigil::agent
