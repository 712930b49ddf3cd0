// CollectRunner: collectors' readings become frames in the stream client's
// queue (the client is never started, so no network is involved).
#include "agent/collect_runner.h"

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/agent_metrics.h"
#include "agent/batch_queue.h"
#include "agent/sim/simulator.h"
#include "agent/simulator_collector.h"
#include "agent/transport_security.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_ingest_server.h"

namespace vigil::agent {
namespace {

// Remembers every batch pushed, on top of an in-memory queue.
class RecordingQueue : public MemoryBatchQueue {
 public:
  RecordingQueue() : MemoryBatchQueue(1 << 20) {}
  absl::Status Push(std::shared_ptr<const v1::FrameBatch> batch) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const v1::Frame& f : batch->frames()) frames_.push_back(f);
    }
    return MemoryBatchQueue::Push(std::move(batch));
  }
  std::vector<v1::Frame> frames() const {
    std::lock_guard<std::mutex> l(mu_);
    return frames_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<v1::Frame> frames_;
};

// A collector that adds what the test scripts.
class ScriptedCollector : public Collector {
 public:
  explicit ScriptedCollector(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  absl::Status Start(EventSink* events) override {
    events_ = events;
    return start_status;
  }
  absl::Status Collect(Tick* tick) override {
    ++collected;
    for (const Sample& s : samples) tick->samples.push_back(s);
    if (!job.empty()) tick->job = job;
    if (step.has_value()) tick->step = step;
    return collect_status;
  }
  void Stop() override { ++stopped; }
  std::vector<std::pair<std::string, double>> HealthCounters() const override {
    return counters;
  }
  EventSink* events() const { return events_; }

  absl::Status start_status;
  absl::Status collect_status;
  std::vector<Sample> samples;
  std::string job;
  std::optional<int64_t> step;
  std::vector<std::pair<std::string, double>> counters;
  int collected = 0;
  int stopped = 0;

 private:
  std::string name_;
  EventSink* events_ = nullptr;
};

// Starts the runner's collectors and takes one tick at t = 1000.
Tick CollectFirst(CollectRunner& runner) {
  runner.StartCollectors();
  return runner.CollectNow(1000);
}

class CollectRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto queue = std::make_unique<RecordingQueue>();
    queue_ = queue.get();
    StreamClientOptions options;
    options.server = "127.0.0.1:1";  // never dialled: the client is not started
    options.node = "n001";
    options.clock = &clock_;
    AgentTransportConfig plaintext;
    plaintext.insecure = true;
    options.security = *TransportSecurity::Create(plaintext);
    absl::StatusOr<std::unique_ptr<StreamClient>> client =
        StreamClient::Create(options, std::move(queue));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // Moves the clock to `t` and waits until `runner` has ticked `ticks`
  // times; false (the test fails) if it does not within 20 s.
  bool TickTo(const CollectRunner& runner, double t, uint64_t ticks) {
    clock_.Set(t);
    return testing::WaitFor([&] { return runner.stats().ticks >= ticks; });
  }

  // The id `key` has in the client's dictionary.
  uint32_t Id(SeriesKey key) { return *client_->RegisterSeries(std::move(key)); }

  FakeClock clock_{1000.0};
  RecordingQueue* queue_ = nullptr;
  std::unique_ptr<StreamClient> client_;
};

TEST_F(CollectRunnerTest, OneFramePerTickWithEveryCollectorsSamples) {
  ScriptedCollector gpu("nvml"), train("training");
  gpu.samples = {{{"gpu_power_watts", {{"gpu", "0"}}}, 512.5},
                 {{"gpu_power_watts", {{"gpu", "1"}}}, 498.0}};
  train.samples = {{{"train_loss", {}}, 2.5}};
  train.job = "llama";
  train.step = 42;
  CollectRunnerOptions options;
  options.interval_seconds = 1;
  options.duration_seconds = 3;
  options.status_every_seconds = 0;
  CollectRunner runner(options, {&gpu, &train}, client_.get(), &clock_);
  std::thread run([&] { EXPECT_TRUE(runner.Run().ok()); });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(TickTo(runner, 1000 + i, i + 1));
  clock_.Advance(5);
  run.join();
  std::vector<v1::Frame> frames = queue_->frames();
  ASSERT_EQ(frames.size(), 3u);
  const v1::Frame& f = frames[0];
  EXPECT_EQ(f.job(), "llama");
  EXPECT_EQ(f.step(), 42);
  EXPECT_DOUBLE_EQ(f.ts(), 1000.0);  // on the interval grid
  EXPECT_DOUBLE_EQ(frames[1].ts(), 1001.0);
  ASSERT_EQ(f.series_ids_size(), 3);
  EXPECT_EQ(f.series_ids(0), Id({"gpu_power_watts", {{"gpu", "0"}}}));
  EXPECT_EQ(f.series_ids(2), Id({"train_loss", {}}));
  EXPECT_DOUBLE_EQ(f.values(0), 512.5);
  EXPECT_DOUBLE_EQ(f.values(2), 2.5);
  EXPECT_EQ(gpu.stopped, 1);
  EXPECT_EQ(train.stopped, 1);
  CollectRunnerStats stats = runner.stats();
  EXPECT_EQ(stats.series, 3u);
  EXPECT_EQ(stats.collectors[0].samples, 6u);
}

TEST_F(CollectRunnerTest, IdleJobWhenNoCollectorNamesOneAndNoStep) {
  ScriptedCollector gpu("nvml");
  gpu.samples = {{{"gpu_temperature_celsius", {{"gpu", "0"}}}, 40}};
  CollectRunnerOptions options;
  options.idle_job = "idle";
  CollectRunner runner(options, {&gpu}, client_.get(), &clock_);
  Tick tick = CollectFirst(runner);
  EXPECT_EQ(tick.job, "idle");
  EXPECT_FALSE(tick.step.has_value());
}

// When the node's job changes without a collector saying why, the first
// frame of the new job carries the old one's end; the frame sent says so.
TEST_F(CollectRunnerTest, JobChangeIsMarkedInTheFrame) {
  ScriptedCollector gpu("nvml"), train("training");
  gpu.samples = {{{"gpu_temperature_celsius", {{"gpu", "0"}}}, 40}};
  train.job = "llm";
  train.step = 77;
  CollectRunnerOptions options;
  options.idle_job = "idle";
  CollectRunner runner(options, {&gpu, &train}, client_.get(), &clock_);
  Tick first = CollectFirst(runner);
  EXPECT_FALSE(first.job_end.has_value());
  train.job.clear();
  train.step.reset();
  Tick idle = runner.CollectNow(1001);
  EXPECT_EQ(idle.job, "idle");
  ASSERT_TRUE(idle.job_end.has_value());
  EXPECT_EQ(idle.job_end->job, "llm");
  EXPECT_EQ(idle.job_end->step, 77);
  EXPECT_EQ(idle.job_end->reason, "job_changed");
  runner.Deliver(idle);  // sends it as a frame now
  ASSERT_FALSE(queue_->frames().empty());
  const v1::Frame f = queue_->frames().back();
  EXPECT_EQ(f.job(), "idle");
  ASSERT_TRUE(f.has_job_end());
  EXPECT_EQ(f.job_end().job(), "llm");
  EXPECT_EQ(f.job_end().step(), 77);
  // Idle to idle: nothing ended.
  Tick again = runner.CollectNow(1002);
  EXPECT_FALSE(again.job_end.has_value());
}

TEST_F(CollectRunnerTest, CollectorThatCannotStartIsLeftOutAndReported) {
  ScriptedCollector gpu("nvml"), disk("disk");
  gpu.start_status = absl::UnavailableError("libnvidia-ml.so.1: not found");
  gpu.samples = {{{"gpu_power_watts", {{"gpu", "0"}}}, 1}};
  disk.samples = {{{"disk_reads_total", {{"dev", "nvme0n1"}}}, 7}};
  CollectRunner runner({}, {&gpu, &disk}, client_.get(), &clock_);
  Tick tick = CollectFirst(runner);
  EXPECT_EQ(gpu.collected, 0);
  ASSERT_EQ(tick.samples.size(), 1u);
  EXPECT_EQ(tick.samples[0].key.metric, "disk_reads_total");
  CollectRunnerStats stats = runner.stats();
  EXPECT_FALSE(stats.collectors[0].running);
  EXPECT_EQ(stats.collectors[0].start_error, "libnvidia-ml.so.1: not found");
  EXPECT_TRUE(stats.collectors[1].running);
  runner.StopCollectors();
  EXPECT_EQ(gpu.stopped, 0);  // never started
  EXPECT_EQ(disk.stopped, 1);
}

TEST_F(CollectRunnerTest, PartialFailureStillSendsWhatWasReadAndIsCounted) {
  ScriptedCollector gpu("nvml");
  gpu.samples = {{{"gpu_power_watts", {{"gpu", "0"}}}, 300}};
  gpu.collect_status = absl::UnavailableError("gpu 1: GPU is lost");
  gpu.counters = {{"gpus_lost_total", 1}, {"gpus", 7}};
  CollectRunner runner({}, {&gpu}, client_.get(), &clock_);
  Tick tick = CollectFirst(runner);
  EXPECT_EQ(tick.samples.size(), 1u);
  CollectorStats s = runner.stats().collectors[0];
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.last_error, "gpu 1: GPU is lost");
  CollectRunnerStats stats = runner.stats();
  std::string metrics =
      RenderAgentMetrics(client_->stats(), stats, ReadProcessUsage());
  EXPECT_NE(metrics.find("vigil_agent_collector_up{collector=\"nvml\"} 0"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("vigil_agent_collector_errors_total{collector=\"nvml\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("process_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE vigil_agent_nvml_gpus_lost_total counter\n"
                         "vigil_agent_nvml_gpus_lost_total 1\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("# TYPE vigil_agent_nvml_gpus gauge\n"
                         "vigil_agent_nvml_gpus 7\n"),
            std::string::npos);
}

TEST_F(CollectRunnerTest, EventsAreSentAtOnceWithTheCurrentJobAndStep) {
  ScriptedCollector gpu("nvml"), train("training");
  train.samples = {{{"train_loss", {}}, 2.5}};
  train.job = "llama";
  train.step = 7;
  CollectRunnerOptions options;
  options.interval_seconds = 1;
  options.status_every_seconds = 0;
  CollectRunner runner(options, {&gpu, &train}, client_.get(), &clock_);
  std::thread run([&] { EXPECT_TRUE(runner.Run().ok()); });
  ASSERT_TRUE(TickTo(runner, 1000, 1));
  ASSERT_NE(gpu.events(), nullptr);
  Tick event;
  event.ts = 1001.25;
  event.Add("gpu_xid_errors_total", {{"gpu", "3"}}, 1);
  event.Add("gpu_xid_last", {{"gpu", "3"}}, 79);
  gpu.events()->Deliver(std::move(event));  // no clock movement needed
  runner.Stop();
  run.join();
  std::vector<v1::Frame> frames = queue_->frames();
  ASSERT_GE(frames.size(), 2u);
  const v1::Frame& e = frames.back();
  EXPECT_EQ(e.job(), "llama");
  EXPECT_EQ(e.step(), 7);
  EXPECT_DOUBLE_EQ(e.ts(), 1001.25);
  ASSERT_EQ(e.values_size(), 2);
  EXPECT_EQ(e.series_ids(1), Id({"gpu_xid_last", {{"gpu", "3"}}}));
  EXPECT_DOUBLE_EQ(e.values(1), 79);
  EXPECT_EQ(runner.stats().events, 1u);
}

TEST_F(CollectRunnerTest, MalformedSeriesIsRefusedOnceAndTheRestIsSent) {
  ScriptedCollector c("disk");
  c.samples = {{{"bad metric name", {}}, 1},
               {{"disk_reads_total", {{"dev", "sda"}}}, 5}};
  CollectRunnerOptions options;
  options.interval_seconds = 1;
  options.duration_seconds = 2;
  options.status_every_seconds = 0;
  CollectRunner runner(options, {&c}, client_.get(), &clock_);
  std::thread run([&] { EXPECT_TRUE(runner.Run().ok()); });
  ASSERT_TRUE(TickTo(runner, 1000, 1));
  ASSERT_TRUE(TickTo(runner, 1001, 2));
  clock_.Advance(5);
  run.join();
  std::vector<v1::Frame> frames = queue_->frames();
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].values_size(), 1);
  EXPECT_DOUBLE_EQ(frames[0].values(0), 5);
  EXPECT_EQ(runner.stats().samples_refused, 2u);
}

TEST_F(CollectRunnerTest, SimulatedNodeRunsThroughTheSameRunner) {
  SimulatorOptions sim_options;
  sim_options.node = "n001";
  sim_options.job = "llama-70b";
  absl::StatusOr<Simulator> sim = Simulator::Create(sim_options, nullptr);
  ASSERT_TRUE(sim.ok()) << sim.status();
  SimulatorCollector collector(&*sim);
  CollectRunnerOptions options;
  options.interval_seconds = 1;
  options.duration_seconds = 2;
  options.status_every_seconds = 0;
  CollectRunner runner(options, {&collector}, client_.get(), &clock_);
  std::thread run([&] { EXPECT_TRUE(runner.Run().ok()); });
  ASSERT_TRUE(TickTo(runner, 1000, 1));
  ASSERT_TRUE(TickTo(runner, 1001, 2));
  clock_.Advance(5);
  run.join();
  std::vector<v1::Frame> frames = queue_->frames();
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].job(), "llama-70b");
  EXPECT_EQ(static_cast<size_t>(frames[1].values_size()), sim->series().size());
  EXPECT_EQ(frames[1].series_ids(0), Id(sim->series()[0]));
  EXPECT_EQ(runner.stats().series, sim->series().size());
}

}  // namespace
}  // namespace vigil::agent
