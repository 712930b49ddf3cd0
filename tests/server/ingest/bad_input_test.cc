// Bad input on Ingest.Stream: every case ends the stream with the right
// status and message, is counted by reason, applies nothing of the bad
// batch and loses nothing acked before it. Text fields are proto `bytes`, so
// invalid UTF-8 reaches the service and is refused with a reason.
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

constexpr double kT0 = 1764000000.0;  // FakeClock's default start

struct BadInputCase {
  std::string name;
  std::function<void(v1::FrameBatch*)> mutate;
  RejectReason reason;
  std::string message_prefix;  // the whole message starts with this
  std::string message_part;    // ...and contains this
};

std::string CaseName(const ::testing::TestParamInfo<BadInputCase>& info) {
  return info.param.name;
}

v1::FrameBatch ValidFirstBatch() {
  v1::FrameBatch batch = Batch(1, "n1", "a");
  *batch.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
  *batch.add_series() = Def(2, "train_loss", {});
  *batch.add_frames() = Frame("llm", kT0 - 100, {1, 2}, {250, 2.5});
  return batch;
}

// A valid second batch: a new series and two frames.
v1::FrameBatch ValidSecondBatch() {
  v1::FrameBatch batch = Batch(2);
  *batch.add_series() = Def(3, "gpu_temp_celsius", {{"gpu", "0"}});
  *batch.add_frames() = Frame("llm", kT0 - 50, {1, 2, 3}, {251, 2.4, 60});
  *batch.add_frames() = Frame("llm", kT0 - 49, {1, 2, 3}, {252, 2.3, 61});
  return batch;
}

void ExpectRefused(TestServer& t, IngestClient& client,
                   const v1::FrameBatch& batch, const BadInputCase& c) {
  EXPECT_FALSE(client.Send(batch).has_value());
  grpc::Status status = client.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind(c.message_prefix, 0), 0u)
      << status.error_message();
  EXPECT_NE(status.error_message().find(c.message_part), std::string::npos)
      << status.error_message();
  EXPECT_EQ(t.server.metrics().rejected[static_cast<size_t>(c.reason)].load(),
            1u);
}

class BadBatchTest : public ::testing::TestWithParam<BadInputCase> {};

TEST_P(BadBatchTest, EndsStreamAndKeepsWhatWasAcked) {
  const BadInputCase& c = GetParam();
  TestServer t;
  IngestClient client(t.server.grpc_port());
  client.Open();
  ASSERT_TRUE(client.Send(ValidFirstBatch()).has_value());
  v1::FrameBatch bad = ValidSecondBatch();
  c.mutate(&bad);
  ExpectRefused(t, client, bad, c);

  // Batch 1 is intact; nothing of the bad batch was applied.
  std::vector<SeriesInfo> series = t.server.store()->ListSeries({});
  ASSERT_EQ(series.size(), 2u);
  for (const SeriesInfo& s : series) {
    absl::StatusOr<std::vector<Sample>> samples =
        t.server.store()->Query(s.id, 0, 1e12);
    ASSERT_TRUE(samples.ok());
    ASSERT_EQ(samples->size(), 1u) << s.key.ToString();
    EXPECT_EQ((*samples)[0].ts, kT0 - 100);
  }
  EXPECT_EQ(t.server.metrics().batches.load(), 1u);

  // The agent can reconnect and go on.
  client.Open();
  v1::FrameBatch next = ValidFirstBatch();
  next.set_seq(3);
  next.mutable_frames(0)->set_ts(kT0 - 10);
  std::optional<v1::Ack> ack = client.Send(next);
  ASSERT_TRUE(ack.has_value()) << client.Finish().error_message();
  EXPECT_EQ(ack->acked_seq(), 3u);
}

void SetLabel(v1::SeriesDef* def, const std::string& name,
              const std::string& value) {
  v1::Label* label = def->add_labels();
  label->set_name(name);
  label->set_value(value);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadBatchTest,
    ::testing::Values(
        BadInputCase{"UnknownSeriesId",
                     [](v1::FrameBatch* b) {
                       b->mutable_frames(1)->set_series_ids(2, 99);
                     },
                     RejectReason::kUnknownSeries,
                     "batch 2 frame 1: unknown series id 99", ""},
        BadInputCase{"RedefinedSeriesId",
                     [](v1::FrameBatch* b) {
                       *b->add_series() = Def(1, "gpu_power_watts", {{"gpu", "1"}});
                     },
                     RejectReason::kBadSeriesDef,
                     "batch 2 series 1 (id 1): id already defined as "
                     "gpu_power_watts{gpu=\"0\",node=\"n1\"}",
                     ""},
        BadInputCase{"BadMetricName",
                     [](v1::FrameBatch* b) {
                       b->mutable_series(0)->set_metric("9lives");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "metric name '9lives' must start with"},
        BadInputCase{"EmptyMetricName",
                     [](v1::FrameBatch* b) { b->mutable_series(0)->set_metric(""); },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "empty metric name"},
        BadInputCase{"BadLabelName",
                     [](v1::FrameBatch* b) {
                       SetLabel(b->mutable_series(0), "gpu-uuid", "x");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "label name 'gpu-uuid'"},
        BadInputCase{"EmptyLabelValue",
                     [](v1::FrameBatch* b) {
                       SetLabel(b->mutable_series(0), "dev", "");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "label 'dev' has an empty value"},
        BadInputCase{"LabelGivenTwice",
                     [](v1::FrameBatch* b) {
                       SetLabel(b->mutable_series(0), "gpu", "1");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "label 'gpu' given twice"},
        BadInputCase{"JobLabelInDictionary",
                     [](v1::FrameBatch* b) {
                       SetLabel(b->mutable_series(0), "job", "x");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "label 'job' is reserved: it comes from the frame"},
        BadInputCase{"NodeLabelInDictionary",
                     [](v1::FrameBatch* b) {
                       SetLabel(b->mutable_series(0), "node", "x");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "label 'node' is reserved: it comes from the hello"},
        BadInputCase{"TooManyLabels",
                     [](v1::FrameBatch* b) {
                       for (int i = 0; i < 15; ++i)
                         SetLabel(b->mutable_series(0), "l" + std::to_string(i), "v");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "at most 14 labels allowed"},
        BadInputCase{"LengthMismatch",
                     [](v1::FrameBatch* b) { b->mutable_frames(1)->add_values(1); },
                     RejectReason::kLengthMismatch,
                     "batch 2 frame 1: 3 series ids but 4 values", ""},
        BadInputCase{"NaNTimestamp",
                     [](v1::FrameBatch* b) { b->mutable_frames(1)->set_ts(NAN); },
                     RejectReason::kBadTimestamp,
                     "batch 2 frame 1: timestamp nan is not a positive, finite "
                     "Unix time",
                     ""},
        BadInputCase{"InfiniteTimestamp",
                     [](v1::FrameBatch* b) {
                       b->mutable_frames(1)->set_ts(INFINITY);
                     },
                     RejectReason::kBadTimestamp, "batch 2 frame 1: ",
                     "timestamp inf is not"},
        BadInputCase{"ZeroTimestamp",
                     [](v1::FrameBatch* b) { b->mutable_frames(1)->set_ts(0); },
                     RejectReason::kBadTimestamp, "batch 2 frame 1: ",
                     "timestamp 0.000 is not"},
        BadInputCase{"NegativeTimestamp",
                     [](v1::FrameBatch* b) { b->mutable_frames(1)->set_ts(-5); },
                     RejectReason::kBadTimestamp, "batch 2 frame 1: ",
                     "timestamp -5.000 is not"},
        BadInputCase{"TimestampInTheFuture",
                     [](v1::FrameBatch* b) {
                       b->mutable_frames(1)->set_ts(kT0 + 301);
                     },
                     RejectReason::kFutureTimestamp,
                     "batch 2 frame 1: timestamp 1764000301.000 is 301.000 s "
                     "ahead of the server clock (at most 300 s)",
                     ""},
        BadInputCase{"TimestampTooOld",
                     [](v1::FrameBatch* b) {
                       b->mutable_frames(1)->set_ts(kT0 - 7 * 86400 - 1);
                     },
                     RejectReason::kTooOld,
                     "batch 2 frame 1: timestamp 1763395199.000 is older than "
                     "the raw retention of 604800 s",
                     ""},
        BadInputCase{"EmptyJob",
                     [](v1::FrameBatch* b) { b->mutable_frames(1)->set_job(""); },
                     RejectReason::kBadJob, "batch 2 frame 1: empty job name",
                     ""},
        BadInputCase{"JobNotUtf8",
                     [](v1::FrameBatch* b) {
                       b->mutable_frames(1)->set_job("llm\xff");
                     },
                     RejectReason::kBadJob, "batch 2 frame 1: bad job name: ",
                     "UTF-8"},
        BadInputCase{"LabelValueNotUtf8",
                     [](v1::FrameBatch* b) {
                       SetLabel(b->mutable_series(0), "dev", "mlx5_\xc3");
                     },
                     RejectReason::kBadSeriesDef, "batch 2 series 0 (id 3): ",
                     "UTF-8"},
        BadInputCase{"SeqRepeated",
                     [](v1::FrameBatch* b) { b->set_seq(1); },
                     RejectReason::kSeqNotIncreasing,
                     "batch 1: seq is not greater than the previous seq 1 of "
                     "this stream",
                     ""},
        BadInputCase{"SeqZero", [](v1::FrameBatch* b) { b->set_seq(0); },
                     RejectReason::kSeqNotIncreasing,
                     "batch 0: seq must start at 1", ""},
        BadInputCase{"HelloForAnotherNode",
                     [](v1::FrameBatch* b) {
                       b->mutable_hello()->set_node("n2");
                       b->mutable_hello()->set_agent_instance("a");
                     },
                     RejectReason::kBadHello,
                     "batch 2: hello names another node", ""}),
    CaseName);

class BadHelloTest : public ::testing::TestWithParam<BadInputCase> {};

TEST_P(BadHelloTest, RefusesTheStream) {
  const BadInputCase& c = GetParam();
  TestServer t;
  IngestClient client(t.server.grpc_port());
  client.Open();
  v1::FrameBatch first = ValidFirstBatch();
  c.mutate(&first);
  ExpectRefused(t, client, first, c);
  EXPECT_TRUE(t.server.store()->ListSeries({}).empty());
  EXPECT_EQ(t.server.metrics().connected_agents.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadHelloTest,
    ::testing::Values(
        BadInputCase{"NoHello", [](v1::FrameBatch* b) { b->clear_hello(); },
                     RejectReason::kMissingHello,
                     "batch 1: the first batch of a stream must carry hello",
                     ""},
        BadInputCase{"EmptyNode",
                     [](v1::FrameBatch* b) { b->mutable_hello()->set_node(""); },
                     RejectReason::kBadHello, "batch 1: hello: bad node name: ",
                     "empty value"},
        BadInputCase{"NodeNotUtf8",
                     [](v1::FrameBatch* b) {
                       b->mutable_hello()->set_node("n\xfe" "1");
                     },
                     RejectReason::kBadHello, "batch 1: hello: bad node name: ",
                     "UTF-8"},
        BadInputCase{"NodeNameReserved",
                     [](v1::FrameBatch* b) { b->mutable_hello()->set_node("@network"); },
                     RejectReason::kBadHello, "batch 1: hello: bad node name: ",
                     "reserved"},
        BadInputCase{"EmptyAgentInstance",
                     [](v1::FrameBatch* b) {
                       b->mutable_hello()->set_agent_instance("");
                     },
                     RejectReason::kBadHello,
                     "batch 1: hello: empty agent_instance", ""},
        BadInputCase{"BadFrameInFirstBatch",
                     [](v1::FrameBatch* b) {
                       b->mutable_frames(0)->set_series_ids(0, 7);
                     },
                     RejectReason::kUnknownSeries,
                     "batch 1 frame 0: unknown series id 7", ""}),
    CaseName);

// A server and a stream of it whose first batch (ValidFirstBatch) was acked.
class AfterFirstBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    client.Open();
    ASSERT_TRUE(client.Send(ValidFirstBatch()).has_value());
  }

  TestServer t;
  IngestClient client{t.server.grpc_port()};
};
using OversizedBatchTest = AfterFirstBatch;
using LargeBatchTest = AfterFirstBatch;

TEST_F(OversizedBatchTest, IsRefusedByGrpcAndKeepsWhatWasAcked) {
  v1::FrameBatch huge = Batch(2);
  v1::Frame* frame = huge.add_frames();
  *frame = Frame("llm", kT0 - 50, {}, {});
  for (int i = 0; i < 600'000; ++i) {  // > 4 MiB of packed doubles
    frame->add_series_ids(1);
    frame->add_values(1.0);
  }
  EXPECT_FALSE(client.Send(huge).has_value());
  EXPECT_EQ(client.Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::vector<SeriesInfo> series =
      t.server.store()->ListSeries(SeriesFilter{"", "", "gpu_power_watts"});
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(t.server.store()->Query(series[0].id, 0, 1e12)->size(), 1u);
}

// A catch-up batch near the message limit passes gRPC's flow control, which
// the server runs without bandwidth probes by default
// (ingest.grpc_bdp_probe, server/config/config.h):
// the stream's window must still open for a message of ~3.8 MiB.
TEST_F(LargeBatchTest, JustUnderTheMessageLimitIsAcked) {
  v1::FrameBatch large = Batch(2);
  for (int f = 0; f < 420; ++f) {  // 420 frames x 1,000 samples x ~9 bytes
    v1::Frame* frame = large.add_frames();
    *frame = Frame("llm", kT0 - 99 + f * 0.1, {}, {});
    for (int i = 0; i < 1'000; ++i) {
      frame->add_series_ids(1);
      frame->add_values(250.0 + i);
    }
  }
  ASSERT_GT(large.ByteSizeLong(), size_t{3'700'000});
  ASSERT_LT(large.ByteSizeLong(), size_t{4} << 20);
  std::optional<v1::Ack> ack = client.Send(large);
  ASSERT_TRUE(ack.has_value()) << client.Finish().error_message();
  EXPECT_EQ(ack->acked_seq(), 2u);
  std::vector<SeriesInfo> series =
      t.server.store()->ListSeries(SeriesFilter{"", "", "gpu_power_watts"});
  ASSERT_EQ(series.size(), 1u);
  // One sample a frame is new; the rest repeat its timestamp.
  EXPECT_EQ(t.server.store()->Query(series[0].id, 0, 1e12)->size(), 421u);
}

}  // namespace
}  // namespace vigil::testing
