// The latest readings of a node's training ranks and how they fold into the
// series of one tick (the rules are in agent/training_endpoint.h). Pure:
// times are passed in, no I/O.
#ifndef VIGIL_AGENT_TRAINING_RANKS_H_
#define VIGIL_AGENT_TRAINING_RANKS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "agent/collector.h"
#include "agent/training_protocol.h"

namespace vigil::agent {

// Configuration of TrainingRanks.
struct TrainingRanksOptions {
  // A rank whose last message is older than this stops counting and is
  // forgotten.
  double staleness_seconds = 300;
  // The job of ranks whose hello names none; empty leaves Tick::job unset.
  std::string default_job;
  // Ranks kept at most; a hello for one more is refused until some go
  // stale.
  size_t max_ranks = 2048;
};

// Ranks by (job, rank), so that a rank that reconnects carries on. Not
// thread-safe.
class TrainingRanks {
 public:
  explicit TrainingRanks(TrainingRanksOptions options);

  // Applies `message`, received at `now` on a connection whose identity is
  // `*hello` (unset until the connection's hello, which sets it with the
  // job defaulted). Sets `*event` to a frame to send at once when the
  // message calls for one: the first report of a non-finite loss for a
  // (job, step). kFailedPrecondition for a step or phase before any
  // hello, kResourceExhausted when max_ranks are kept; nothing changes
  // then.
  absl::Status Apply(const TrainingMessage& message, double now,
                     std::optional<HelloMessage>* hello,
                     std::optional<Tick>* event);

  // Forgets ranks stale at `now`, then appends the aggregated readings of
  // the live ranks of the most recently heard job to `tick` and sets
  // tick->job and tick->step (job: default_job when no rank is live).
  void Collect(double now, Tick* tick);

 private:
  struct Rank {
    std::string gpu;  // label value of its torch_* series
    double last_heard = 0;
    std::optional<StepMessage> step;  // its latest
    bool phase_seen = false;
    bool checkpoint = false;
    bool eval = false;
  };
  using RankKey = std::pair<std::string, int64_t>;  // job, rank

  // The rank `hello` names, created if new and marked heard at `now`;
  // null when max_ranks are kept.
  Rank* Touch(const HelloMessage& hello, double now);
  void DropStale(double now);

  const TrainingRanksOptions options_;
  std::map<RankKey, Rank> ranks_;
  // The last (job, step) whose non-finite loss went out as an event.
  std::optional<std::pair<std::string, int64_t>> last_nan_event_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_TRAINING_RANKS_H_
