// Drives a simulated node: ticks the Simulator on a fixed interval grid,
// turns its frames into wire frames and hands them to the StreamClient.
#ifndef VIGIL_AGENT_RUNNER_H_
#define VIGIL_AGENT_RUNNER_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "agent/simulator.h"
#include "agent/stream_client.h"
#include "common/clock.h"

namespace vigil::agent {

// How a NodeRunner ticks.
struct NodeRunnerOptions {
  // Seconds between ticks; ticks fall on multiples of it in Unix time.
  double interval_seconds = 1.0;
  // Stop after this many seconds; 0 runs until Stop().
  double duration_seconds = 0;
  // Seconds between status lines on stderr; 0 prints none.
  double status_every_seconds = 10;
};

// Feeds one simulated node into one stream client. Run() blocks; Stop() may
// be called from any thread (a signal-handling thread, a test).
class NodeRunner {
 public:
  // `sim`, `client` and `clock` are not owned and must outlive the runner.
  NodeRunner(NodeRunnerOptions options, Simulator* sim, StreamClient* client,
             Clock* clock);

  // Registers the simulator's series with the client, then ticks until
  // Stop() or the duration ends. An error if a series or frame is refused.
  absl::Status Run();
  // Makes Run() return soon. Thread-safe.
  void Stop();
  // Seq of the last batch enqueued (0 before the first). Thread-safe.
  uint64_t last_seq() const;

 private:
  // Converts and enqueues the frame of tick `ts` (if the node is up).
  absl::Status TickOnce(double ts);

  const NodeRunnerOptions options_;
  Simulator* const sim_;
  StreamClient* const client_;
  Clock* const clock_;
  std::vector<uint32_t> ids_;  // client id of each simulator series

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_RUNNER_H_
