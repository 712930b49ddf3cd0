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
  // A rank whose every connection closed and that has not reconnected
  // within this long has exited: it stops counting at once rather than
  // after staleness_seconds, so a finished job is reported ended (not
  // stuck at its last step, which looks like a hang).
  double disconnect_grace_seconds = 5;
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
  // (job, step).
  //
  // A hello's HelloMessage::verified_job_id says whether its job was
  // checked with the scheduler. A verified hello replaces the unverified
  // ranks of its job (whoever sent them); an unverified hello for a job
  // that has a verified rank is refused, so nobody outside a job can speak
  // for it or make it look unverified.
  //
  // kFailedPrecondition for a step or phase before any hello,
  // kPermissionDenied for an unverified hello of a verified job,
  // kResourceExhausted when max_ranks are kept; nothing changes then.
  absl::Status Apply(const TrainingMessage& message, double now,
                     std::optional<HelloMessage>* hello,
                     std::optional<Tick>* event);

  // A connection whose hello named `hello` closed at `now`.
  void Disconnected(const HelloMessage& hello, double now);

  // Forgets ranks stale at `now` (or gone: disconnect_grace_seconds after
  // their last connection closed), then appends the aggregated readings of
  // the live ranks of the most recently heard job to `tick` and sets
  // tick->job and tick->step (job: default_job when no rank is live), and
  // tick->verified_job_id when all those ranks were verified as one
  // scheduler job.
  // When the job of the previous Collect has no live rank any more, sets
  // tick->job_end to it, its last step and why ("ranks_exited": they
  // closed their connections; "ranks_stale": they fell silent).
  void Collect(double now, Tick* tick);

 private:
  struct Rank {
    std::string gpu;  // label value of its torch_* series
    std::string verified_job_id;  // of the hello that named it; may be empty
    double last_heard = 0;
    int connections = 0;        // open connections whose hello named it
    double disconnected_at = 0;  // when the last of them closed
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
  // Whether some rank of `job` was verified.
  bool HasVerifiedRank(const std::string& job) const;

  const TrainingRanksOptions options_;
  std::map<RankKey, Rank> ranks_;
  // The last (job, step) whose non-finite loss went out as an event.
  std::optional<std::pair<std::string, int64_t>> last_nan_event_;
  // The job and step reported by the previous Collect; why its last rank
  // left, when it did.
  std::string reported_job_;
  std::optional<int64_t> reported_step_;
  std::string last_drop_reason_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_TRAINING_RANKS_H_
