// Cancels ingest streams whose first batch does not come in time (a peer
// that opens streams and sends nothing holds a slot of ingest.max_streams).
//
// "In time" is judged by what the server could have read, not by when it
// got round to reading: a server that restarts under 1,250 agents reads
// their first batches one after the other on its completion-queue thread
// (each creates its node's series), and a batch that came within the
// deadline may wait longer than it in the queue. So a stream is cancelled
// only once it is past its deadline and its queue has had nothing to do
// since the deadline: then its first batch did not come. Under a load
// that never lets the queue rest, late streams wait until it does.
#ifndef VIGIL_SERVER_INGEST_FIRST_BATCH_WATCHDOG_H_
#define VIGIL_SERVER_INGEST_FIRST_BATCH_WATCHDOG_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/clock.h"

namespace vigil {

class FirstBatchWatchdog {
 public:
  // What the watchdog tells apart: a stream and the queue whose thread
  // reads it, both opaque.
  using StreamHandle = void*;
  using QueueHandle = const void*;

  // Cancels through `cancel` (called on the watchdog's own thread, never
  // twice for a stream) streams whose first batch did not come within
  // `seconds` of `clock` time. Starts its thread.
  FirstBatchWatchdog(Clock* clock, double seconds,
                     std::function<void(StreamHandle)> cancel);
  // Stops its thread; cancels nothing more.
  ~FirstBatchWatchdog();
  FirstBatchWatchdog(const FirstBatchWatchdog&) = delete;
  FirstBatchWatchdog& operator=(const FirstBatchWatchdog&) = delete;

  // Starts the clock of `stream`'s first batch, read by `queue`'s thread.
  void Watch(StreamHandle stream, QueueHandle queue);
  // Stops it; true if the stream was cancelled for being late.
  bool Done(StreamHandle stream);

  // `queue`'s thread found no event to handle (it is about to wait for
  // one), or found one after waiting. Cheap: called at every such turn.
  void QueueIdle(QueueHandle queue);
  void QueueBusy(QueueHandle queue);

 private:
  struct Deadline {
    double at;
    QueueHandle queue;
  };
  struct QueueState {
    bool idle = false;
    double idle_since = -1;  // when it last found nothing to do
  };

  void Run();

  Clock* const clock_;
  const double timeout_;
  const std::function<void(StreamHandle)> cancel_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  absl::flat_hash_map<StreamHandle, Deadline> deadlines_;
  absl::flat_hash_set<StreamHandle> cancelled_;
  absl::flat_hash_map<QueueHandle, QueueState> queues_;
  // Streams past their deadline whose queue has not rested since.
  int overdue_ = 0;
  std::thread thread_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_FIRST_BATCH_WATCHDOG_H_
