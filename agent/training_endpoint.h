// The training process's way into the agent: a Unix socket that the job's
// ranks on this node push step readings into (protocol in
// agent/training_protocol.h and python/README.md; the `vigil` Python package
// is a client), and a Collector that turns the latest readings of the
// node's ranks into the train_* and torch_* series of each tick.
//
// Aggregation at each tick, over the live ranks (heard from within
// `staleness_seconds`) of one job:
//   - the job: the job of the rank heard from most recently; Tick::job is
//     left unset when that is empty (no hello named one, no default_job);
//   - Tick::step: the highest completed step any of its ranks reported;
//   - train_loss, train_grad_norm, train_mfu_ratio: mean over ranks of
//     their latest step. Non-finite values propagate (one NaN rank gives a
//     NaN mean; +Inf stays +Inf unless another rank says -Inf or NaN);
//   - train_tokens_per_second: sum over ranks (the node's throughput);
//   - train_step_time_seconds, train_dataloader_wait_seconds: max;
//   - train_loss_scale: min, only when some rank sends it (fp16 jobs);
//   - train_phase: 1 while any rank is between checkpoint_start and _end,
//     else 2 while any is between eval_start and _end, else 0; only once
//     some rank of the job has sent a phase marker (otherwise the server
//     infers phases from the data);
//   - torch_reserved_bytes, torch_allocated_bytes, torch_alloc_retries_total
//     with label gpu = the rank's hello "gpu", else its local_rank, else its
//     rank; summed over ranks that share a GPU.
// A metric no rank sent is left out. Like a real job's readings, the
// values repeat every tick until a newer step arrives or the ranks go
// stale - or exit: a rank that closes its connection and does not come back
// within disconnect_grace_seconds is gone, and when a job has no rank left
// the next tick carries its end (Tick::job_end) and the node's idle job. A step whose loss is not finite is also delivered at once to the
// EventSink (once per step), so a single NaN between two ticks is not lost.
#ifndef VIGIL_AGENT_TRAINING_ENDPOINT_H_
#define VIGIL_AGENT_TRAINING_ENDPOINT_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "agent/collector.h"
#include "agent/job_identity.h"
#include "agent/training_protocol.h"
#include "agent/training_ranks.h"
#include "common/clock.h"

namespace vigil::agent {

// Configuration of a TrainingCollector.
struct TrainingCollectorOptions {
  // Where the socket is created. Its directory is created (mode 0755) when
  // missing, one level only.
  std::string socket_path = "/run/vigil/train.sock";
  // Permission bits of the socket file. Default 0666: ranks run as whatever
  // user submitted the job, not as the agent's user, and connecting to a
  // Unix socket needs write permission on it. Anyone on the node can thus
  // connect; what a connection may claim is checked by job_resolver.
  uint32_t socket_mode = 0666;
  // Checks each hello's job against the job the connecting process really
  // runs in (its pid and uid come from the kernel, SO_PEERCRED); null
  // leaves every claim unverified. With it:
  //   - a process in a Slurm job may claim only that job (its id or name;
  //     a hello naming no job gets it); another claim is refused, and so
  //     is a job its uid does not own. A process in a Kubernetes pod is
  //     verified when it claims the pod's UID, else left unverified (the
  //     pod's job name would take the API server);
  //   - a process in no job (or when the scheduler cannot answer) is
  //     accepted unverified, or refused when refuse_unverified;
  //   - an unverified claim of a job that has a verified rank is refused.
  // Ticks carry Tick::verified_job_id only for jobs all of whose ranks were
  // verified; the server acts automatically only on those.
  std::shared_ptr<ProcessJobResolver> job_resolver;
  bool refuse_unverified = false;
  // Connections served at once; one more is accepted, told why, and closed.
  // At most 4 x this many ranks are kept (see TrainingRanksOptions).
  int max_connections = 512;
  // Longest line accepted, newline excluded; longer ones are dropped.
  size_t max_line_bytes = 64 * 1024;
  // Bytes of incomplete lines held for all connections together (the
  // endpoint's memory, whatever the number of connections): a line that
  // would take more is dropped and rejected like an overlong one.
  size_t max_buffered_bytes = 4 << 20;
  // A rank whose last message is older than this stops counting.
  double staleness_seconds = 300;
  // A rank whose connections all closed stops counting after this long
  // (when it has not reconnected): its process exited, its job ended on
  // this node, and the next frame says so (Tick::job_end).
  double disconnect_grace_seconds = 5;
  // The job of ranks whose hello names none; empty leaves Tick::job unset.
  std::string default_job;
  // Time of receipt and of staleness. Not owned; null means RealClock().
  Clock* clock = nullptr;
};

// What the endpoint has seen since it was constructed (monotonic across
// Stop and Start, as /metrics counters must be), for the agent's /metrics.
struct TrainingEndpointStats {
  uint64_t lines_accepted = 0;
  uint64_t lines_rejected = 0;        // bad JSON, bad fields, too long, ...
  uint64_t connections_accepted = 0;  // total, refused ones excluded
  uint64_t connections_refused = 0;   // over max_connections
  uint64_t connections_open = 0;
  uint64_t claims_verified = 0;    // hellos whose job the scheduler confirmed
  uint64_t claims_unverified = 0;  // hellos accepted unchecked
  uint64_t claims_refused = 0;     // hellos for a job not the process's
};

// Serves the training socket from one background thread and aggregates the
// ranks' readings in Collect. Collect is called from one thread at a time;
// stats() and WaitForStats() from any thread.
class TrainingCollector : public Collector {
 public:
  explicit TrainingCollector(TrainingCollectorOptions options);
  ~TrainingCollector() override;  // Stop()s

  std::string_view name() const override { return "training"; }
  // Binds the socket and starts serving. A socket file nobody listens on
  // (left by a crashed agent) is replaced. Errors: kAlreadyExists when
  // another process listens on the path, kFailedPrecondition when the path
  // exists and is not a socket or when already started, kInvalidArgument
  // for a path too long for a Unix socket or options out of range,
  // kInternal for other system errors (all naming the path).
  absl::Status Start(EventSink* events) override;
  // Appends the aggregated readings (see the file comment) and sets
  // tick->job and tick->step. kInvalidArgument summarizing the lines
  // rejected since the previous call (count, last reason, the pid/uid that
  // sent it), for the agent's log; kInternal once the serving thread has
  // stopped on a system error. The readings are added all the same.
  absl::Status Collect(Tick* tick) override;
  // Stops serving, closes every connection and removes the socket file.
  // Returns promptly; idempotent.
  void Stop() override;

  // stats() as lines_{accepted,rejected}_total,
  // connections_{accepted,refused}_total and connections_open.
  std::vector<std::pair<std::string, double>> HealthCounters() const override;

  // The counters.
  TrainingEndpointStats stats() const;
  // Blocks until `done(stats())` holds, re-checked whenever the endpoint
  // has handled input, or until `timeout` passes. True when it held.
  bool WaitForStats(
      const std::function<bool(const TrainingEndpointStats&)>& done,
      std::chrono::milliseconds timeout) const;

 private:
  struct Connection {
    int fd = -1;
    pid_t pid = 0;
    uid_t uid = 0;
    std::string buffer;           // an incomplete line
    bool discarding = false;      // inside a line already rejected as long
    bool replies_broken = false;  // an error reply went out in part
    uint64_t lines = 0;
    std::optional<HelloMessage> hello;  // job defaulted
    // The process's job, asked at its first hello.
    std::optional<absl::StatusOr<ProcessJob>> job;
  };

  void Serve();
  void Accept();
  // Reads what `conn` has sent; false when it has closed (or must be).
  bool Read(Connection& conn);
  void HandleLine(Connection& conn, std::string_view line);
  void Reject(Connection& conn, std::string_view reason);
  // Checks `hello`'s claim against the connection's process (see
  // job_resolver); sets hello->verified_job_id. An error is the reason to
  // refuse it.
  absl::Status CheckClaim(Connection& conn, HelloMessage* hello);
  void CloseAll();

  const TrainingCollectorOptions options_;
  Clock* const clock_;
  EventSink* events_ = nullptr;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that makes Serve() return
  dev_t socket_dev_ = 0;
  ino_t socket_ino_ = 0;
  std::thread thread_;
  // Serving thread only.
  std::map<int, Connection> connections_;
  size_t buffered_bytes_ = 0;   // sum of the connections' buffers
  bool accept_paused_ = false;  // out of file descriptors

  mutable std::mutex mu_;
  mutable std::condition_variable handled_;
  TrainingRanks ranks_ ABSL_GUARDED_BY(mu_);
  TrainingEndpointStats stats_ ABSL_GUARDED_BY(mu_);
  // Rejections since the last Collect, and the last one's description.
  uint64_t rejected_since_collect_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_rejection_ ABSL_GUARDED_BY(mu_);
  // Why serving stopped early (poll failed); empty while it runs.
  std::string serve_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_TRAINING_ENDPOINT_H_
