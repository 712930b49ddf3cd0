// vigil-sim --multi-job's output replays as it is: frames without a step
// (idle nodes) and with the "job_end" key are good input lines.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/sim/multi_job_sim.h"
#include "gtest/gtest.h"
#include "server/replay/replay.h"

namespace vigil {
namespace {

TEST(MultiJobReplayTest, ReplaysWithoutBadLines) {
  agent::MultiJobOptions options;
  options.nodes = 8;
  options.gpus = 2;
  options.seconds = 6 * 3600;
  options.interval_seconds = 30;
  options.seed = 3;
  options.faults_per_day = 24;
  std::vector<std::string> bad;
  int64_t incidents = 0;
  ReplaySink sink;
  sink.write = [&](std::string_view) { ++incidents; };
  sink.bad_line = [&](int64_t line, std::string_view reason) {
    bad.push_back(absl::StrCat(line, ": ", std::string(reason)));
  };
  Replayer replayer(ReplayOptions(), std::move(sink));
  bool saw_marker = false, saw_idle = false;
  absl::StatusOr<agent::MultiJobResult> result =
      agent::SimulateMultiJob(options, [&](std::string_view chunk) {
        saw_marker = saw_marker || chunk.find("\"job_end\"") != chunk.npos;
        saw_idle = saw_idle || chunk.find("\"job\": \"idle\"") != chunk.npos;
        replayer.Feed(chunk);
      });
  ASSERT_TRUE(result.ok()) << result.status();
  replayer.Finish();
  EXPECT_TRUE(saw_marker);
  EXPECT_TRUE(saw_idle);
  EXPECT_TRUE(bad.empty()) << bad.size() << " bad lines, first: " << bad[0];
  EXPECT_EQ(replayer.stats().frames, static_cast<int64_t>(result->frames));
  EXPECT_EQ(replayer.stats().samples, static_cast<int64_t>(result->samples));
  EXPECT_EQ(
      replayer.stats().incidents,
      incidents - replayer.stats().severity_rises - replayer.stats().reopens);
}

}  // namespace
}  // namespace vigil
