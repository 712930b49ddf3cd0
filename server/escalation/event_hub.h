// Change notices for live web pages: every incident change (detection
// updates, acknowledgements, pages, actions) is published here with a
// sequence number, and each server-sent-events stream waits for the ones
// after the last it sent. A bounded ring: a stream that falls more than
// `capacity` notices behind is told to reload instead.
#ifndef VIGIL_SERVER_ESCALATION_EVENT_HUB_H_
#define VIGIL_SERVER_ESCALATION_EVENT_HUB_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "nlohmann/json.hpp"

namespace vigil {

// One published notice: its sequence number (from 1), its topic (the
// notice's "topic", default "incident": the SSE event name) and its JSON
// text, which carries the same number as "seq".
struct ChangeNotice {
  uint64_t seq = 0;
  std::string topic;
  std::string json;
};

// What a waiting stream gets.
struct ChangeBatch {
  std::vector<ChangeNotice> notices;
  // Notices after the stream's position were already dropped from the ring:
  // the stream should tell its page to reload everything.
  bool gap = false;
};

// Thread-safe.
class EventHub {
 public:
  explicit EventHub(size_t capacity = 4096);

  // Stamps `notice` with the next "seq" and wakes the waiting streams.
  void Publish(nlohmann::json notice);

  // The notices after `after`, waiting up to `timeout_seconds` (steady
  // time) for one when there is none yet.
  ChangeBatch WaitAfter(uint64_t after, double timeout_seconds);

  // The last sequence number published (0 before the first).
  uint64_t last_seq() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChangeNotice> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_ESCALATION_EVENT_HUB_H_
