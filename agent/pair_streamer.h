// The agent's side of a Vigil cluster (docs/SCALING.md): every frame goes
// to both members of the shard pair that owns the node's current job, as
// Prometheus HA pairs scrape twice, each through its own StreamClient and
// queue, so either member can lead with the same data. Servers tell the
// agent who the owners are (Ack.owners, or a FAILED_PRECONDITION refusal
// naming them); the streamer moves its two streams accordingly. Against a
// single server (no owners ever reported) it is one StreamClient.
#ifndef VIGIL_AGENT_PAIR_STREAMER_H_
#define VIGIL_AGENT_PAIR_STREAMER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "agent/batch_queue.h"
#include "agent/stream_client.h"
#include "common/periodic_thread.h"

namespace vigil::agent {

class PairStreamer : public FrameSink {
 public:
  // `options.server` is the servers to ask, comma-separated (any members
  // of the cluster, or the single server); the first stream starts on the
  // first of them and uses `queue` (the spool; a memory queue when null),
  // the second an in-memory queue of options.max_pending_bytes. When no
  // stream has had an ack for `rehome_seconds` (both servers of the pair
  // gone, say), the first stream asks the next of those servers, which
  // names the job's owners now. Errors: StreamClient::Create's.
  static absl::StatusOr<std::unique_ptr<PairStreamer>> Create(
      StreamClientOptions options, std::unique_ptr<BatchQueue> queue = nullptr,
      double rehome_seconds = 15);
  ~PairStreamer() override;
  PairStreamer(const PairStreamer&) = delete;
  PairStreamer& operator=(const PairStreamer&) = delete;

  // FrameSink. Frames go to every stream that has a server; the second
  // stream gets only frames enqueued while it has one.
  absl::StatusOr<uint32_t> RegisterSeries(SeriesKey key) override;
  absl::StatusOr<uint64_t> Enqueue(std::vector<v1::Frame> frames) override;
  // The first stream's counters, with the last ack and "streaming" of
  // either stream and both streams' redirects.
  StreamClientStats stats() const override;

  // Starts both streams' threads. Call once.
  void Start();
  // Waits until every stream with a server has no pending batch, or the
  // clock reaches `deadline`; true in the first case.
  bool Flush(double deadline);
  // Stops both streams. Idempotent.
  void Stop();

  // The servers the two streams go to ("" = idle).
  std::array<std::string, 2> targets() const;
  // The random id of the first stream's agent instance.
  const std::string& agent_instance() const { return streams_[0]->agent_instance(); }

 private:
  PairStreamer() = default;
  // The re-homing round (see Create).
  void CheckProgress();
  // Moves the streams so that each owner has one: a stream already on an
  // owner stays; the others take the remaining owners, or go idle
  // dropping their batches (the stream on the surviving owner carries
  // them) when none remain.
  void OnOwners(const std::vector<std::string>& owners);

  std::array<std::unique_ptr<StreamClient>, 2> streams_;
  Clock* clock_ = nullptr;
  std::vector<std::string> seeds_;
  double rehome_seconds_ = 15;
  size_t next_seed_ = 1;     // CheckProgress thread only
  double last_progress_ = 0;  // CheckProgress thread only
  std::unique_ptr<PeriodicThread> rehome_;
  std::mutex move_mu_;  // one OnOwners at a time
  mutable std::mutex mu_;
  // Series by the first stream's ids, and their ids on the second stream.
  absl::flat_hash_map<uint32_t, SeriesKey> keys_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, uint32_t> second_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_PAIR_STREAMER_H_
