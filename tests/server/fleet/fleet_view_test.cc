// FleetView: newest GPU readings per node, job membership, one-minute
// sparkline buckets of step rate, tokens/s (summed over nodes) and MFU
// (averaged), and the series listed per figure.
#include "server/fleet/fleet_view.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vigil {
namespace {

constexpr double kT0 = 1764000000.0;  // a multiple of 60
constexpr int kRate = static_cast<int>(JobFigure::kStepRate);
constexpr int kTokens = static_cast<int>(JobFigure::kTokensPerSecond);
constexpr int kMfu = static_cast<int>(JobFigure::kMfu);

class FleetViewTest : public ::testing::Test {
 protected:
  FleetViewTest() {
    StoreOptions options;
    options.clock = &clock_;
    store_ = NewMemoryStore(options);
  }

  // The store id of `metric` of (`job`, `node`), on GPU `gpu` unless empty.
  SeriesId Id(const std::string& job, const std::string& node,
              const std::string& metric, const std::string& gpu = "") {
    SeriesKey key{metric, {{"job", job}, {"node", node}}};
    if (!gpu.empty()) key.labels.emplace_back("gpu", gpu);
    EXPECT_TRUE(NormalizeSeriesKey(&key).ok());
    absl::StatusOr<SeriesId> id = store_->Resolve(key);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  void Send(FleetView& view, const std::string& node, const std::string& job,
            double ts, std::optional<int64_t> step, std::vector<uint32_t> ids,
            std::vector<double> values) {
    view.OnFrame(FrameView{node, job, step, ts, ids, values});
  }

  // Job `job`, which must exist.
  static JobSnapshot MustJob(const FleetView& view, const std::string& job) {
    std::optional<JobSnapshot> s = view.Job(job);
    EXPECT_TRUE(s.has_value()) << job;
    return s.value_or(JobSnapshot{});
  }

  FakeClock clock_;
  std::unique_ptr<SeriesStore> store_;
};

TEST_F(FleetViewTest, GpuReadingsLandPerNodeAndGpu) {
  FleetView view(store_.get());
  const SeriesId p0 = Id("a", "n2", "gpu_power_watts", "0");
  const SeriesId p1 = Id("a", "n2", "gpu_power_watts", "1");
  const SeriesId t1 = Id("a", "n2", "gpu_temperature_celsius", "1");
  const SeriesId thr1 = Id("a", "n2", "gpu_throttle_reasons", "1");
  const SeriesId u0 = Id("a", "n2", "gpu_utilization_ratio", "0");
  const SeriesId clk0 = Id("a", "n2", "gpu_sm_clock_mhz", "0");
  const SeriesId q0 = Id("a", "n1", "gpu_power_watts", "0");
  Send(view, "n2", "a", kT0, 7, {p0, p1, t1, thr1, u0, clk0},
       {400, 410, 70, 32, 0.9, 1980});
  Send(view, "n1", "a", kT0 + 1, 8, {q0}, {300});
  Send(view, "n2", "a", kT0 + 2, 9, {p1}, {420});

  std::vector<NodeSnapshot> nodes = view.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].node, "n1");
  EXPECT_EQ(nodes[1].node, "n2");
  const NodeSnapshot& n2 = nodes[1];
  EXPECT_EQ(n2.job, "a");
  EXPECT_EQ(n2.last_frame_ts, kT0 + 2);
  EXPECT_EQ(n2.step, 9);
  ASSERT_EQ(n2.gpus.size(), 2u);
  EXPECT_EQ(n2.gpus[0].gpu, 0);
  EXPECT_EQ(n2.gpus[0].ts, kT0);
  EXPECT_EQ(n2.gpus[0].power_watts, 400);
  EXPECT_EQ(n2.gpus[0].utilization, 0.9);
  EXPECT_EQ(n2.gpus[0].sm_clock_mhz, 1980);
  EXPECT_TRUE(std::isnan(n2.gpus[0].temperature_celsius));
  EXPECT_TRUE(std::isnan(n2.gpus[0].throttle_reasons));
  EXPECT_EQ(n2.gpus[1].gpu, 1);
  EXPECT_EQ(n2.gpus[1].ts, kT0 + 2);
  EXPECT_EQ(n2.gpus[1].power_watts, 420);  // the newest
  EXPECT_EQ(n2.gpus[1].temperature_celsius, 70);
  EXPECT_EQ(n2.gpus[1].throttle_reasons, 32);
  ASSERT_EQ(nodes[0].gpus.size(), 1u);
  EXPECT_EQ(nodes[0].gpus[0].power_watts, 300);

  JobSnapshot a = MustJob(view, "a");
  EXPECT_EQ(a.nodes, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(a.step, 9);
  EXPECT_EQ(a.last_frame_ts, kT0 + 2);
  EXPECT_FALSE(view.Job("b").has_value());
}

TEST_F(FleetViewTest, UnknownAndUntrackedSeriesAreIgnored) {
  FleetView view(store_.get());
  const SeriesId no_gpu = Id("a", "n1", "gpu_power_watts");  // no gpu label
  const SeriesId bad_gpu = Id("a", "n1", "gpu_power_watts", "x");
  const SeriesId other = Id("a", "n1", "gpu_ecc_dbe_total", "0");
  const SeriesId loss = Id("a", "n1", "train_loss");
  Send(view, "n1", "a", kT0, 1, {no_gpu, bad_gpu, other, loss, 12345},
       {400, 400, 3, 2.5, 1});
  std::vector<NodeSnapshot> nodes = view.Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(nodes[0].gpus.empty());
  JobSnapshot a = MustJob(view, "a");
  for (int f = 0; f < kJobFigures; ++f) EXPECT_TRUE(a.series[f].empty()) << f;
  ASSERT_EQ(a.spark[kTokens].size(), 1u);
  EXPECT_TRUE(std::isnan(a.spark[kTokens][0].value));
  EXPECT_TRUE(std::isnan(a.spark[kMfu][0].value));
}

TEST_F(FleetViewTest, NodeMovingToAnotherJobLeavesItsOldJob) {
  FleetView view(store_.get());
  const SeriesId pa = Id("a", "n1", "gpu_power_watts", "0");
  const SeriesId pb = Id("b", "n1", "gpu_power_watts", "1");
  const SeriesId other = Id("a", "n2", "gpu_power_watts", "0");
  Send(view, "n1", "a", kT0, 500, {pa}, {400});
  Send(view, "n2", "a", kT0, 500, {other}, {400});
  Send(view, "n1", "b", kT0 + 1, 3, {pb}, {300});

  std::vector<NodeSnapshot> nodes = view.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].job, "b");
  EXPECT_EQ(nodes[0].step, 3);
  // The old job's GPU readings went with it.
  ASSERT_EQ(nodes[0].gpus.size(), 1u);
  EXPECT_EQ(nodes[0].gpus[0].gpu, 1);
  EXPECT_EQ(MustJob(view, "a").nodes, std::vector<std::string>{"n2"});
  EXPECT_EQ(MustJob(view, "b").nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(MustJob(view, "b").step, 3);
  std::vector<JobSnapshot> jobs = view.Jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job, "a");
  EXPECT_EQ(jobs[1].job, "b");
}

TEST_F(FleetViewTest, SparklinesAggregateOverNodes) {
  FleetView view(store_.get());
  const SeriesId tok1 = Id("a", "n1", "train_tokens_per_second");
  const SeriesId tok2 = Id("a", "n2", "train_tokens_per_second");
  const SeriesId mfu1 = Id("a", "n1", "train_mfu_ratio");
  const SeriesId mfu2 = Id("a", "n2", "train_mfu_ratio");
  const SeriesId st1 = Id("a", "n1", "train_step_time_seconds");
  const SeriesId st2 = Id("a", "n2", "train_step_time_seconds");
  const SeriesId tok_b = Id("b", "n3", "train_tokens_per_second");
  // Minute 0: n1 at 100 and 200 tokens/s, n2 at 300 and 500; steps
  // 100 -> 120 over 10 s.
  Send(view, "n1", "a", kT0, 100, {tok1, mfu1, st1}, {100, 0.4, 0.5});
  Send(view, "n2", "a", kT0, 100, {tok2, mfu2, st2}, {300, 0.3, 0.5});
  Send(view, "n1", "a", kT0 + 10, 120, {tok1, mfu1, st1}, {200, 0.5, 0.5});
  Send(view, "n2", "a", kT0 + 10, 120, {tok2, mfu2, st2}, {500, NAN, 0.5});
  // Minute 1: only n1, 1 step in 30 s.
  Send(view, "n1", "a", kT0 + 60, 121, {tok1, mfu1}, {1000, 0.2});
  Send(view, "n1", "a", kT0 + 90, 122, {tok1, mfu1}, {3000, 0.4});
  // Another job is kept apart.
  Send(view, "n3", "b", kT0 + 5, 1, {tok_b}, {7});

  JobSnapshot a = MustJob(view, "a");
  ASSERT_EQ(a.spark[kRate].size(), 2u);
  ASSERT_EQ(a.spark[kTokens].size(), 2u);
  ASSERT_EQ(a.spark[kMfu].size(), 2u);
  EXPECT_EQ(a.spark[kTokens][0].ts, kT0);
  EXPECT_EQ(a.spark[kTokens][1].ts, kT0 + 60);
  EXPECT_DOUBLE_EQ(a.spark[kRate][0].value, 2.0);
  EXPECT_DOUBLE_EQ(a.spark[kRate][1].value, 1.0 / 30);
  // Per-node means 150 and 400, summed; then n1 alone.
  EXPECT_DOUBLE_EQ(a.spark[kTokens][0].value, 550);
  EXPECT_DOUBLE_EQ(a.spark[kTokens][1].value, 2000);
  // Mean of the finite samples (the NaN is skipped).
  EXPECT_DOUBLE_EQ(a.spark[kMfu][0].value, 0.4);
  EXPECT_DOUBLE_EQ(a.spark[kMfu][1].value, 0.3);

  // Each series is listed once under the figure it gives a baseline for.
  EXPECT_EQ(a.series[kTokens], (std::vector<SeriesId>{tok1, tok2}));
  EXPECT_EQ(a.series[kMfu], (std::vector<SeriesId>{mfu1, mfu2}));
  EXPECT_EQ(a.series[kRate], (std::vector<SeriesId>{st1, st2}));

  JobSnapshot b = MustJob(view, "b");
  ASSERT_EQ(b.spark[kTokens].size(), 1u);
  EXPECT_DOUBLE_EQ(b.spark[kTokens][0].value, 7);
  EXPECT_TRUE(std::isnan(b.spark[kRate][0].value));  // one frame: no rate
  EXPECT_EQ(b.series[kTokens], std::vector<SeriesId>{tok_b});
}

TEST_F(FleetViewTest, WindowKeepsTheNewestBucketsAndIgnoresOlderFrames) {
  FleetViewOptions options;
  options.bucket_seconds = 60;
  options.buckets = 3;
  FleetView view(store_.get(), options);
  const SeriesId tok = Id("a", "n1", "train_tokens_per_second");
  for (int minute = 0; minute < 5; ++minute)
    Send(view, "n1", "a", kT0 + 60 * minute + 1, minute, {tok}, {100.0 * minute});

  JobSnapshot a = MustJob(view, "a");
  ASSERT_EQ(a.spark[kTokens].size(), 3u);
  EXPECT_EQ(a.spark[kTokens][0].ts, kT0 + 120);
  EXPECT_EQ(a.spark[kTokens][2].ts, kT0 + 240);
  EXPECT_DOUBLE_EQ(a.spark[kTokens][0].value, 200);
  EXPECT_DOUBLE_EQ(a.spark[kTokens][2].value, 400);

  // A frame from before the window changes no bucket.
  Send(view, "n1", "a", kT0 + 5, 0, {tok}, {1e6});
  a = MustJob(view, "a");
  ASSERT_EQ(a.spark[kTokens].size(), 3u);
  EXPECT_DOUBLE_EQ(a.spark[kTokens][0].value, 200);
  EXPECT_DOUBLE_EQ(a.spark[kTokens][1].value, 300);
  EXPECT_DOUBLE_EQ(a.spark[kTokens][2].value, 400);

  // A long gap leaves empty buckets, still `buckets` of them.
  Send(view, "n1", "a", kT0 + 3600, 10, {tok}, {900});
  a = MustJob(view, "a");
  ASSERT_EQ(a.spark[kTokens].size(), 3u);
  EXPECT_EQ(a.spark[kTokens][0].ts, kT0 + 3480);
  EXPECT_TRUE(std::isnan(a.spark[kTokens][0].value));
  EXPECT_TRUE(std::isnan(a.spark[kTokens][1].value));
  EXPECT_EQ(a.spark[kTokens][2].ts, kT0 + 3600);
  EXPECT_DOUBLE_EQ(a.spark[kTokens][2].value, 900);
}

TEST_F(FleetViewTest, NonsenseOptionsFallBackToTheDefaults) {
  FleetViewOptions options;
  options.bucket_seconds = 0;
  options.buckets = 0;
  FleetView view(store_.get(), options);
  const SeriesId tok = Id("a", "n1", "train_tokens_per_second");
  Send(view, "n1", "a", kT0 + 59, 1, {tok}, {5});
  JobSnapshot a = MustJob(view, "a");
  ASSERT_EQ(a.spark[kTokens].size(), 1u);
  EXPECT_EQ(a.spark[kTokens][0].ts, kT0);  // 60 s buckets
}

// A job whose nodes all moved to other jobs leaves the view a day (data
// time) after its last frame; a job whose node went silent stays, as the
// node still runs it as far as anyone knows; the view's memory follows the
// jobs of the day, not every job since the server started.
TEST_F(FleetViewTest, JobsNoNodeRunsAreForgottenADayAfterTheirLastFrame) {
  FleetView view(store_.get());
  const SeriesId a = Id("a", "n1", "gpu_power_watts", "0");
  const SeriesId b = Id("b", "n1", "gpu_power_watts", "0");
  const SeriesId c = Id("c", "n2", "gpu_power_watts", "0");
  Send(view, "n1", "a", kT0, 1, {a}, {400});
  Send(view, "n2", "c", kT0, 1, {c}, {400});
  Send(view, "n1", "b", kT0 + 60, 1, {b}, {400});  // n1 moves on to b
  for (double t = kT0 + 3600; t < kT0 + 86400; t += 3600)
    Send(view, "n1", "b", t, 2, {b}, {400});
  EXPECT_TRUE(view.Job("a").has_value()) << "forgotten before a day passed";
  Send(view, "n1", "b", kT0 + 86400 + 700, 3, {b}, {400});
  EXPECT_FALSE(view.Job("a").has_value());
  EXPECT_TRUE(view.Job("b").has_value());
  EXPECT_TRUE(view.Job("c").has_value()) << "n2 still runs c";
  std::vector<JobSnapshot> jobs = view.Jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job, "b");
  EXPECT_EQ(jobs[1].job, "c");
  // A job seen again comes back.
  Send(view, "n1", "a", kT0 + 86400 + 800, 1, {a}, {400});
  EXPECT_TRUE(view.Job("a").has_value());
}

}  // namespace
}  // namespace vigil
