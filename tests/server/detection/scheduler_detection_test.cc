// DetectionService with the scheduler as the source of truth on jobs'
// lives: a job it still runs whose nodes all fell silent is one P1
// (job_unreachable); a job it lists as ended is never a fault, even while
// an agent goes on reporting it.
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/detection/detection_service.h"
#include "storage/series_store.h"

namespace vigil {
namespace {

constexpr double kT0 = 1764000000;

// The scheduler's answers, set by the test.
class FakeScheduler {
 public:
  void Set(SchedulerJobState state) {
    std::lock_guard<std::mutex> l(mu_);
    state_ = state;
  }
  int queries() const {
    std::lock_guard<std::mutex> l(mu_);
    return queries_;
  }
  absl::StatusOr<std::vector<SchedulerJobStatus>> Query(
      const std::vector<std::string>& jobs) {
    std::lock_guard<std::mutex> l(mu_);
    ++queries_;
    std::vector<SchedulerJobStatus> out;
    for (const std::string& j : jobs) {
      SchedulerJobStatus s;
      s.job = j;
      s.state = state_;
      out.push_back(s);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  SchedulerJobState state_ = SchedulerJobState::kRunning;
  int queries_ = 0;
};

class SchedulerDetectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.clock = &clock_;
    store_ = NewMemoryStore(so);
    DetectionOptions o;
    o.store = store_.get();
    o.clock = &clock_;
    o.job_state = [this](const std::vector<std::string>& jobs) {
      return scheduler_.Query(jobs);
    };
    o.scheduler_poll_seconds = 5;
    o.snapshot_seconds = 0;
    o.detector.lifecycle.await_scheduler_s = 30;
    o.detector.lifecycle.rewarm_s = 0;
    detection_ = std::make_unique<DetectionService>(o);
    ASSERT_TRUE(detection_->Start().ok());
  }
  void TearDown() override { detection_->Stop(); }

  // One frame of `node` (power of one GPU) at the clock's time.
  void Frame(const std::string& node, int64_t step, double power = 600) {
    SeriesKey key{"gpu_power_watts",
                  {{"gpu", "0"}, {"job", "llm"}, {"node", node}}};
    absl::StatusOr<SeriesId> id = store_->Resolve(key);
    ASSERT_TRUE(id.ok()) << id.status();
    const uint32_t ids[] = {*id};
    const double values[] = {power};
    FrameView f;
    f.node = node;
    f.job = "llm";
    f.step = step;
    f.ts = clock_.Now();
    f.ids = ids;
    f.values = values;
    detection_->OnFrame(f);
  }

  // Moves the clock second by second (the service's tick and scheduler
  // threads run on it) and waits for them to catch up.
  void Run(int seconds) {
    for (int i = 0; i < seconds; ++i) {
      clock_.Advance(1);
      detection_->AdvanceTime(clock_.Now());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::vector<nlohmann::json> All() {
    IncidentFilter f;
    f.limit = 1000;
    return detection_->ListIncidents(f);
  }

  FakeClock clock_{kT0};
  FakeScheduler scheduler_;
  std::unique_ptr<SeriesStore> store_;
  std::unique_ptr<DetectionService> detection_;
};

TEST_F(SchedulerDetectionTest, RunningJobWhoseNodesAllStopIsOneP1) {
  for (int s = 0; s < 60; ++s) {
    Frame("n1", s);
    Frame("n2", s);
    Run(1);
  }
  Run(90);  // both stop; the scheduler still runs the job
  std::vector<nlohmann::json> all = All();
  ASSERT_EQ(all.size(), 1u) << all.size();
  EXPECT_EQ(all[0]["kind"], "job_unreachable");
  EXPECT_EQ(all[0]["severity"], "P1");
  EXPECT_EQ(all[0]["nodes"], (nlohmann::json{"n1", "n2"})) << all[0].dump();
  EXPECT_GT(scheduler_.queries(), 0);
  EXPECT_GT(detection_->counters().scheduler_queries, 0u);
}

TEST_F(SchedulerDetectionTest, EndedJobIsNeverAFault) {
  for (int s = 0; s < 60; ++s) {
    Frame("n1", s);
    Frame("n2", s);
    Run(1);
  }
  scheduler_.Set(SchedulerJobState::kEnded);
  // An old agent goes on reporting the finished job at its last step (and
  // its GPU, whose memory it does not report): no hang, no node down.
  for (int s = 0; s < 300; ++s) {
    Frame("n1", 59, 80);
    Frame("n2", 59, 80);
    Run(1);
  }
  Run(120);
  for (const nlohmann::json& inc : All()) {
    EXPECT_EQ(inc["severity"], "P3") << inc.dump();
    EXPECT_EQ(inc["kind"], "job_ended") << inc.dump();
  }
  EXPECT_FALSE(All().empty());
}

}  // namespace
}  // namespace vigil
