// How many new series one node and one job may create: the bound that keeps
// a lying or broken agent (a new job name every frame, a label with a
// counter in it) from filling the series index of the whole server.
// Counts the series created within a sliding window (by default the raw
// retention: older series stop costing memory once their data expires).
#ifndef VIGIL_SERVER_INGEST_SERIES_BUDGET_H_
#define VIGIL_SERVER_INGEST_SERIES_BUDGET_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace vigil {

struct SeriesBudgetOptions {
  // New series one node may create per window; 0: no limit.
  uint64_t per_node = 100'000;
  // New series one job may create per window (over all its nodes); 0: no
  // limit.
  uint64_t per_job = 5'000'000;
  // The window, in seconds.
  double window_seconds = 7 * 86400.0;
};

// Thread-safe; time comes with each call.
class SeriesBudget {
 public:
  explicit SeriesBudget(SeriesBudgetOptions options);

  // Charges one new series of `node` and `job` at `now`. kResourceExhausted
  // naming the node or job and the limit when either would go over it
  // (`*by_node`, when not null, says which); nothing is charged then.
  absl::Status Charge(const std::string& node, const std::string& job,
                      double now, bool* by_node = nullptr);

 private:
  // Series created per window slice (window / kSlices), oldest first.
  struct Counter {
    std::deque<std::pair<int64_t, uint64_t>> slices;  // slice index, count
    uint64_t total = 0;
  };
  // Drops slices of `c` that left the window ending at slice `now_slice`.
  void Expire(Counter& c, int64_t now_slice) const;
  // Forgets counters whose slices all expired, at most once a slice.
  void Prune(int64_t now_slice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SeriesBudgetOptions options_;
  const double slice_seconds_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, Counter> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Counter> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t pruned_slice_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_SERIES_BUDGET_H_
