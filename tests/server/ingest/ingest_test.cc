// Ingest.Stream over loopback gRPC: the happy path, resends, node claims
// and the detection hook.
#include <chrono>
#include <cmath>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

constexpr double kT0 = 1764000000.0;  // FakeClock's default start

// Store samples of the series named by `metric` on `node`.
std::vector<Sample> SamplesOf(SeriesStore* store, const std::string& node,
                              const std::string& metric) {
  std::vector<SeriesInfo> series =
      store->ListSeries(SeriesFilter{"", node, metric});
  if (series.size() != 1) {
    ADD_FAILURE() << series.size() << " series for " << metric;
    return {};
  }
  absl::StatusOr<std::vector<Sample>> samples =
      store->Query(series[0].id, 0, 1e12);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<Sample>{};
}

// The first batch of a stream: hello, two series, one frame.
v1::FrameBatch FirstBatch(const std::string& node, const std::string& instance,
                          uint64_t seq = 1) {
  v1::FrameBatch batch = Batch(seq, node, instance);
  *batch.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
  *batch.add_series() = Def(2, "train_loss", {});
  *batch.add_frames() = Frame("llm", kT0 - 100, {1, 2}, {250.5, 2.25});
  return batch;
}

TEST(IngestTest, StoresAcksAndLabelsSeries) {
  TestServer t;
  IngestClient client(t.server.grpc_port());
  client.Open();
  std::optional<v1::Ack> ack = client.Send(FirstBatch("n1", "a"));
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->acked_seq(), 1u);
  EXPECT_EQ(ack->dropped_samples(), 0u);

  v1::FrameBatch second = Batch(2);
  *second.add_frames() = Frame("llm", kT0 - 99, {2, 1}, {NAN, 251});
  *second.add_frames() = Frame("llm", kT0 - 98, {1}, {-INFINITY});
  ack = client.Send(second);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->acked_seq(), 2u);
  EXPECT_TRUE(client.Finish().ok());

  std::vector<SeriesInfo> series = t.server.store()->ListSeries({});
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].key.ToString(),
            "gpu_power_watts{gpu=\"0\",job=\"llm\",node=\"n1\"}");
  EXPECT_EQ(series[1].key.ToString(), "train_loss{job=\"llm\",node=\"n1\"}");
  std::vector<Sample> power = SamplesOf(t.server.store(), "n1", "gpu_power_watts");
  EXPECT_EQ(power, (std::vector<Sample>{{kT0 - 100, 250.5},
                                        {kT0 - 99, 251},
                                        {kT0 - 98, -INFINITY}}));
  std::vector<Sample> loss = SamplesOf(t.server.store(), "n1", "train_loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_TRUE(std::isnan(loss[1].value));

  const IngestMetrics& m = t.server.metrics();
  EXPECT_EQ(m.samples.load(), 5u);
  EXPECT_EQ(m.frames.load(), 3u);
  EXPECT_EQ(m.batches.load(), 2u);
}

TEST(IngestTest, SameSeriesInAnotherJobIsAnotherSeries) {
  TestServer t;
  IngestClient client(t.server.grpc_port());
  client.Open();
  v1::FrameBatch batch = FirstBatch("n1", "a");
  *batch.add_frames() = Frame("other", kT0 - 99, {1}, {7});
  ASSERT_TRUE(client.Send(batch).has_value());
  EXPECT_EQ(t.server.store()->ListSeries(SeriesFilter{"other", "", ""}).size(),
            1u);
  EXPECT_EQ(t.server.store()->ListSeries(SeriesFilter{"llm", "", ""}).size(),
            2u);
}

TEST(IngestTest, ResentBatchIsAckedWithoutReapplying) {
  TestServer t;
  IngestClient client(t.server.grpc_port());
  client.Open();
  ASSERT_TRUE(client.Send(FirstBatch("n1", "a")).has_value());
  v1::FrameBatch second = Batch(2);
  *second.add_frames() = Frame("llm", kT0 - 99, {1}, {251});
  ASSERT_TRUE(client.Send(second).has_value());
  EXPECT_TRUE(client.Finish().ok());

  // The ack of batch 2 was "lost": the agent resends it on a new stream,
  // with hello and the dictionary, then carries on.
  client.Open();
  v1::FrameBatch resend = FirstBatch("n1", "a", 2);
  resend.clear_frames();
  *resend.add_frames() = Frame("llm", kT0 - 99, {1}, {251});
  std::optional<v1::Ack> ack = client.Send(resend);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->acked_seq(), 2u);
  v1::FrameBatch third = Batch(3);
  *third.add_frames() = Frame("llm", kT0 - 98, {1}, {252});
  ack = client.Send(third);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->acked_seq(), 3u);
  EXPECT_TRUE(client.Finish().ok());

  EXPECT_EQ(SamplesOf(t.server.store(), "n1", "gpu_power_watts"),
            (std::vector<Sample>{
                {kT0 - 100, 250.5}, {kT0 - 99, 251}, {kT0 - 98, 252}}));
  EXPECT_EQ(t.server.metrics().resent_batches.load(), 1u);
  EXPECT_EQ(t.server.metrics().batches.load(), 3u);
}

TEST(IngestTest, DroppedSamplesAreReportedInTheAck) {
  TestServer t;
  IngestClient client(t.server.grpc_port());
  client.Open();
  ASSERT_TRUE(client.Send(FirstBatch("n1", "a")).has_value());
  v1::FrameBatch late = Batch(2);
  *late.add_frames() = Frame("llm", kT0 - 100, {1}, {250.5});  // duplicate
  *late.add_frames() = Frame("llm", kT0 - 200, {2}, {1.0});    // out of order
  std::optional<v1::Ack> ack = client.Send(late);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->dropped_samples(), 2u);
  EXPECT_EQ(t.server.metrics().dropped_duplicate.load(), 1u);
  EXPECT_EQ(t.server.metrics().dropped_out_of_order.load(), 1u);
}

TEST(IngestTest, NodeHasOneAgentInstanceAtATime) {
  TestServer t;
  IngestClient a(t.server.grpc_port());
  a.Open();
  ASSERT_TRUE(a.Send(FirstBatch("n3", "instance-a")).has_value());

  IngestClient b(t.server.grpc_port());
  b.Open();
  EXPECT_FALSE(b.Send(FirstBatch("n3", "instance-b")).has_value());
  grpc::Status refused = b.Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(refused.error_message(),
            "node n3 is already streamed by agent instance instance-a since "
            "2025-11-24T16:00:00Z");

  // The same instance reconnecting replaces its old stream.
  IngestClient a2(t.server.grpc_port());
  a2.Open();
  v1::FrameBatch again = FirstBatch("n3", "instance-a", 2);
  again.mutable_frames(0)->set_ts(kT0 - 99);
  std::optional<v1::Ack> ack = a2.Send(again);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->acked_seq(), 2u);
  EXPECT_EQ(a.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(a2.Finish().ok());

  // Once the node has no live stream, another instance may take it.
  b.Open();
  ack = b.Send(FirstBatch("n3", "instance-b"));
  ASSERT_TRUE(ack.has_value()) << b.Finish().error_message();
  EXPECT_EQ(ack->acked_seq(), 1u);
  EXPECT_EQ(t.server.metrics().rejected[static_cast<size_t>(
                RejectReason::kNodeTaken)].load(),
            1u);
}

// Holds every frame on its worker until opened.
class GateObserver : public FrameObserver {
 public:
  void OnFrame(const FrameView&) override {
    std::unique_lock<std::mutex> l(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(l, [this] { return open_; });
  }
  // Waits until `n` frames entered.
  void WaitEntered(int n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return entered_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

// Acks wait for the frame workers; a worker whose queue is full makes
// ingest refuse the batches of its shard before storing anything, with a
// status that says why, and the agent's resend is taken once it caught up.
TEST(IngestTest, ABackloggedWorkerRefusesBatchesBeforeStoringThem) {
  GateObserver gate;
  ServerOptions options = TestOptions();
  options.detection_queue_batches = 1;
  TestServer t(options, &gate);
  IngestClient a(t.server.grpc_port()), b(t.server.grpc_port()), c(t.server.grpc_port());
  a.Open();
  b.Open();
  c.Open();
  std::optional<v1::Ack> ack_a, ack_b;
  std::thread send_a([&] { ack_a = a.Send(FirstBatch("na", "x")); });
  gate.WaitEntered(1);  // the worker runs a's batch (and holds it)
  std::thread send_b([&] { ack_b = b.Send(FirstBatch("nb", "x")); });
  const IngestMetrics& m = t.server.metrics();
  for (int i = 0; i < 10'000 && m.worker_queued[0].load() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(m.worker_queued[0].load(), 2);  // a running, b queued
  EXPECT_FALSE(ack_a.has_value());          // not acked before detection

  EXPECT_FALSE(c.Send(FirstBatch("nc", "x")).has_value());
  const grpc::Status refused = c.Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused.error_message().find("detection is behind"), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(t.server.store()->ListSeries({.node = "nc"}).empty());
  EXPECT_EQ(m.rejected[static_cast<size_t>(RejectReason::kDetectionBacklog)].load(), 1u);

  gate.Open();
  send_a.join();
  send_b.join();
  ASSERT_TRUE(ack_a.has_value());
  ASSERT_TRUE(ack_b.has_value());
  c.Open();
  ASSERT_TRUE(c.Send(FirstBatch("nc", "x")).has_value());
  EXPECT_EQ(t.server.store()->ListSeries({.node = "nc"}).size(), 2u);
}

// The server's own view of its ack latency: a batch whose detection is held
// for 120 ms is counted past 0.1 s in vigil_ingest_batch_ack_seconds and
// vigil_ingest_batch_detect_seconds, while its store append is counted
// too; every batch is counted once in each.
TEST(IngestTest, BatchLatenciesCountTheWaitForDetection) {
  GateObserver gate;
  TestServer t(TestOptions(), &gate);
  IngestClient a(t.server.grpc_port());
  a.Open();
  std::optional<v1::Ack> ack;
  std::thread send([&] { ack = a.Send(FirstBatch("na", "x")); });
  gate.WaitEntered(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  gate.Open();
  send.join();
  ASSERT_TRUE(ack.has_value());
  v1::FrameBatch second = Batch(2);
  *second.add_frames() = Frame("llm", kT0 - 99, {1}, {251});
  ASSERT_TRUE(a.Send(second).has_value());
  EXPECT_TRUE(a.Finish().ok());

  const IngestMetrics& m = t.server.metrics();
  EXPECT_EQ(m.batch_apply.count(), 2u);
  EXPECT_EQ(m.batch_ack.count(), 2u);
  EXPECT_EQ(m.batch_detect.count(), 2u);  // one shard: one part a batch
  // Detection itself held the first part 120 ms.
  std::string detect;
  m.batch_detect.AppendText(&detect, "d", "help");
  EXPECT_EQ(detect.find("d_bucket{le=\"0.1\"} 2\n"), std::string::npos) << detect;
  // Cumulative: the held batch is past 0.1 s (only the second may be
  // within it), and both within 10 s.
  std::string text;
  m.batch_ack.AppendText(&text, "ack", "help");
  const std::string within_100ms = "ack_bucket{le=\"0.1\"} ";
  const size_t at = text.find(within_100ms);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_LE(std::stoi(text.substr(at + within_100ms.size())), 1) << text;
  EXPECT_NE(text.find("ack_bucket{le=\"10\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ack_bucket{le=\"+Inf\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nack_count 2\n"), std::string::npos) << text;
}

TEST(LatencyHistogramTest, CumulativeBucketsSumAndCount) {
  LatencyHistogram h;
  for (double s : {0.0001, 0.0005, 0.003, 0.2, 30.0, -1.0, std::nan("")}) h.Observe(s);
  EXPECT_EQ(h.count(), 7u);
  std::string text;
  h.AppendText(&text, "x_seconds", "What it times.");
  EXPECT_EQ(text,
            "# HELP x_seconds What it times.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.0005\"} 4\n"
            "x_seconds_bucket{le=\"0.001\"} 4\n"
            "x_seconds_bucket{le=\"0.0025\"} 4\n"
            "x_seconds_bucket{le=\"0.005\"} 5\n"
            "x_seconds_bucket{le=\"0.01\"} 5\n"
            "x_seconds_bucket{le=\"0.025\"} 5\n"
            "x_seconds_bucket{le=\"0.05\"} 5\n"
            "x_seconds_bucket{le=\"0.1\"} 5\n"
            "x_seconds_bucket{le=\"0.25\"} 6\n"
            "x_seconds_bucket{le=\"0.5\"} 6\n"
            "x_seconds_bucket{le=\"1\"} 6\n"
            "x_seconds_bucket{le=\"2.5\"} 6\n"
            "x_seconds_bucket{le=\"10\"} 6\n"
            "x_seconds_bucket{le=\"+Inf\"} 7\n"
            "x_seconds_sum 30.2036\n"
            "x_seconds_count 7\n");
}

// Records what the detection hook is given.
class RecordingObserver : public FrameObserver {
 public:
  struct Seen {
    std::string node, job;
    std::optional<int64_t> step;
    double ts;
    std::vector<uint32_t> ids;
    std::vector<double> values;
  };
  void OnFrame(const FrameView& f) override {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back({std::string(f.node), std::string(f.job), f.step, f.ts,
                    {f.ids.begin(), f.ids.end()},
                    {f.values.begin(), f.values.end()}});
  }
  std::mutex mu;
  std::vector<Seen> seen;
};

TEST(IngestTest, ObserverSeesAcceptedFramesWithStoreIds) {
  RecordingObserver observer;
  TestServer t(TestOptions(), &observer);
  IngestClient client(t.server.grpc_port());
  client.Open();
  v1::FrameBatch batch = FirstBatch("n1", "a");
  batch.mutable_frames(0)->set_step(42);
  ASSERT_TRUE(client.Send(batch).has_value());
  // Seq 1 again is refused; the hook ran for batch 1 before that.
  EXPECT_FALSE(client.Send(batch).has_value());
  client.Finish();

  std::lock_guard<std::mutex> l(observer.mu);
  ASSERT_EQ(observer.seen.size(), 1u);
  const RecordingObserver::Seen& s = observer.seen[0];
  EXPECT_EQ(s.node, "n1");
  EXPECT_EQ(s.job, "llm");
  EXPECT_EQ(s.step, 42);
  EXPECT_EQ(s.ts, kT0 - 100);
  EXPECT_EQ(s.values, (std::vector<double>{250.5, 2.25}));
  ASSERT_EQ(s.ids.size(), 2u);
  EXPECT_EQ(t.server.store()->Key(s.ids[0])->metric, "gpu_power_watts");
  EXPECT_EQ(t.server.store()->Key(s.ids[1])->metric, "train_loss");
}

TEST(IngestTest, StopCancelsLiveStreamsAndRestartServes) {
  TestServer t;
  IngestClient client(t.server.grpc_port());
  client.Open();
  ASSERT_TRUE(client.Send(FirstBatch("n1", "a")).has_value());
  EXPECT_TRUE(t.server.Stop().ok());
  EXPECT_FALSE(client.Finish().ok());
  EXPECT_EQ(t.server.store(), nullptr);
  ASSERT_TRUE(t.server.Start().ok());
  IngestClient again(t.server.grpc_port());
  again.Open();
  EXPECT_TRUE(again.Send(FirstBatch("n1", "a")).has_value());
}

// Streams spread over several completion-queue threads; stopping the
// server while some wait for their next batch ends them all.
TEST(IngestTest, SeveralThreadsServeConcurrentStreamsAndStopEndsThem) {
  ServerOptions options = TestOptions();
  options.ingest_threads = 3;
  TestServer t(options);
  constexpr int kStreams = 12;
  constexpr int kBatches = 20;
  std::vector<std::unique_ptr<IngestClient>> clients;
  for (int c = 0; c < kStreams; ++c) {
    clients.push_back(std::make_unique<IngestClient>(t.server.grpc_port()));
    clients.back()->Open();
  }
  std::vector<int> acked(kStreams, 0);
  std::vector<std::thread> senders;
  for (int c = 0; c < kStreams; ++c) {
    senders.emplace_back([&, c] {
      const std::string node = absl::StrCat("n", c);
      if (!clients[c]->Send(FirstBatch(node, "a")).has_value()) return;
      ++acked[c];
      for (int b = 2; b <= kBatches; ++b) {
        v1::FrameBatch batch = Batch(b);
        *batch.add_frames() = Frame("llm", kT0 - 100 + b, {1, 2}, {250.0 + b, 2.0});
        std::optional<v1::Ack> ack = clients[c]->Send(batch);
        if (!ack.has_value() || ack->acked_seq() != static_cast<uint64_t>(b)) return;
        ++acked[c];
      }
    });
  }
  for (std::thread& s : senders) s.join();
  for (int c = 0; c < kStreams; ++c) {
    EXPECT_EQ(acked[c], kBatches) << "stream " << c;
    EXPECT_EQ(SamplesOf(t.server.store(), absl::StrCat("n", c), "gpu_power_watts").size(),
              static_cast<size_t>(kBatches));
  }
  EXPECT_EQ(t.server.metrics().connected_agents.load(), kStreams);
  // Every stream now waits for a batch: Stop cancels them and returns.
  EXPECT_TRUE(t.server.Stop().ok());
  for (std::unique_ptr<IngestClient>& client : clients) EXPECT_FALSE(client->Finish().ok());
}

}  // namespace
}  // namespace vigil::testing

namespace vigil::testing {
namespace {

// A limit refuses only new series: the batch's known series are stored and
// the stream carries on; the ack says how many samples were refused and why.
TEST(IngestLimitsTest, ANodeOverItsSeriesLimitKeepsItsKnownSeries) {
  ServerOptions options = TestOptions();
  options.max_new_series_per_node = 2;
  TestServer t(options);
  IngestClient client(t.server.grpc_port());
  client.Open();
  ASSERT_TRUE(client.Send(FirstBatch("n1", "a")).has_value());
  // A third series, and the two known ones, in one frame.
  v1::FrameBatch second = Batch(2);
  *second.add_series() = Def(3, "gpu_temperature_celsius", {{"gpu", "0"}});
  *second.add_frames() = Frame("llm", kT0 - 99, {1, 3, 2}, {251, 60, 2.5});
  std::optional<v1::Ack> ack = client.Send(second);
  ASSERT_TRUE(ack.has_value()) << client.Finish().error_message();
  EXPECT_EQ(ack->acked_seq(), 2u);
  EXPECT_EQ(ack->refused_samples(), 1u);
  EXPECT_EQ(ack->dropped_samples(), 1u);
  EXPECT_NE(ack->refused_reason().find("node n1 created 2 new series"),
            std::string::npos)
      << ack->refused_reason();
  EXPECT_EQ(SamplesOf(t.server.store(), "n1", "gpu_power_watts"),
            (std::vector<Sample>{{kT0 - 100, 250.5}, {kT0 - 99, 251}}));
  EXPECT_EQ(SamplesOf(t.server.store(), "n1", "train_loss").size(), 2u);
  EXPECT_TRUE(t.server.store()
                  ->ListSeries(SeriesFilter{"", "", "gpu_temperature_celsius"})
                  .empty());
  // Another node is not affected.
  IngestClient other(t.server.grpc_port());
  other.Open();
  ack = other.Send(FirstBatch("n2", "b"));
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->refused_samples(), 0u);
  EXPECT_EQ(t.server.metrics().series_refused[static_cast<size_t>(SeriesLimit::kNode)].load(), 1u);
  EXPECT_EQ(t.server.metrics().dropped_series_limit.load(), 1u);
}

TEST(IngestLimitsTest, AJobOverItsSeriesLimitKeepsItsKnownSeries) {
  ServerOptions options = TestOptions();
  options.max_new_series_per_job = 3;
  TestServer t(options);
  IngestClient a(t.server.grpc_port()), b(t.server.grpc_port());
  a.Open();
  b.Open();
  ASSERT_TRUE(a.Send(FirstBatch("n1", "a")).has_value());
  std::optional<v1::Ack> ack = b.Send(FirstBatch("n2", "b"));
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->refused_samples(), 1u);
  EXPECT_NE(ack->refused_reason().find("job llm created 3 new series"),
            std::string::npos)
      << ack->refused_reason();
  // The same series under another job name is another job's budget.
  v1::FrameBatch next = Batch(2);
  *next.add_frames() = Frame("other", kT0 - 99, {1, 2}, {1, 2});
  ack = b.Send(next);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->refused_samples(), 0u) << ack->refused_reason();
}

TEST(IngestLimitsTest, AFullDictionaryDropsNewIdsNotTheStream) {
  ServerOptions options = TestOptions();
  options.max_series_per_stream = 2;
  TestServer t(options);
  IngestClient client(t.server.grpc_port());
  client.Open();
  ASSERT_TRUE(client.Send(FirstBatch("n1", "a")).has_value());
  v1::FrameBatch second = Batch(2);
  *second.add_series() = Def(3, "gpu_temperature_celsius", {{"gpu", "0"}});
  *second.add_frames() = Frame("llm", kT0 - 99, {3, 1}, {60, 251});
  std::optional<v1::Ack> ack = client.Send(second);
  ASSERT_TRUE(ack.has_value()) << client.Finish().error_message();
  EXPECT_EQ(ack->refused_samples(), 1u);
  EXPECT_EQ(SamplesOf(t.server.store(), "n1", "gpu_power_watts").size(), 2u);
  EXPECT_EQ(t.server.metrics().series_refused[static_cast<size_t>(SeriesLimit::kStream)].load(), 1u);
  // An id never defined at all is still a client error while the
  // dictionary has room; here it is full, so it is dropped too.
  v1::FrameBatch third = Batch(3);
  *third.add_frames() = Frame("llm", kT0 - 98, {99, 1}, {1, 252});
  ack = client.Send(third);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(SamplesOf(t.server.store(), "n1", "gpu_power_watts").size(), 3u);
}

TEST(IngestLimitsTest, TheStoresGlobalLimitKeepsKnownSeriesToo) {
  ServerOptions options = TestOptions();
  options.max_series = 2;
  TestServer t(options);
  IngestClient client(t.server.grpc_port());
  client.Open();
  ASSERT_TRUE(client.Send(FirstBatch("n1", "a")).has_value());
  v1::FrameBatch second = Batch(2);
  *second.add_series() = Def(3, "gpu_temperature_celsius", {{"gpu", "0"}});
  *second.add_frames() = Frame("llm", kT0 - 99, {1, 3}, {251, 60});
  std::optional<v1::Ack> ack = client.Send(second);
  ASSERT_TRUE(ack.has_value()) << client.Finish().error_message();
  EXPECT_EQ(ack->refused_samples(), 1u);
  EXPECT_NE(ack->refused_reason().find("series limit 2 reached"), std::string::npos);
  EXPECT_EQ(SamplesOf(t.server.store(), "n1", "gpu_power_watts").size(), 2u);
}

}  // namespace
}  // namespace vigil::testing
