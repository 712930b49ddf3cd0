#include "server/ingest/series_budget.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace vigil {
namespace {

// The window is counted in this many slices.
constexpr int kSlices = 24;

}  // namespace

SeriesBudget::SeriesBudget(SeriesBudgetOptions options)
    : options_(options),
      slice_seconds_(std::max(options.window_seconds, 1.0) / kSlices) {}

void SeriesBudget::Expire(Counter& c, int64_t now_slice) const {
  while (!c.slices.empty() && c.slices.front().first <= now_slice - kSlices) {
    c.total -= c.slices.front().second;
    c.slices.pop_front();
  }
}

void SeriesBudget::Prune(int64_t now_slice) {
  if (now_slice == pruned_slice_) return;
  pruned_slice_ = now_slice;
  for (auto* map : {&nodes_, &jobs_}) {
    for (auto it = map->begin(); it != map->end();) {
      Expire(it->second, now_slice);
      if (it->second.total == 0) {
        map->erase(it++);
      } else {
        ++it;
      }
    }
  }
}

absl::Status SeriesBudget::Charge(const std::string& node,
                                  const std::string& job, double now,
                                  bool* by_node) {
  if (by_node != nullptr) *by_node = false;
  if (options_.per_node == 0 && options_.per_job == 0) return absl::OkStatus();
  const int64_t slice = static_cast<int64_t>(std::floor(now / slice_seconds_));
  std::lock_guard<std::mutex> lock(mu_);
  Prune(slice);
  Counter& n = nodes_[node];
  Counter& j = jobs_[job];
  Expire(n, slice);
  Expire(j, slice);
  const double hours = options_.window_seconds / 3600;
  if (by_node != nullptr) *by_node = options_.per_node > 0 && n.total >= options_.per_node;
  if (options_.per_node > 0 && n.total >= options_.per_node)
    return absl::ResourceExhaustedError(absl::StrCat(
        "node ", node, " created ", n.total, " new series in the last ", hours,
        " h (limit ", options_.per_node, "); new series are refused"));
  if (options_.per_job > 0 && j.total >= options_.per_job)
    return absl::ResourceExhaustedError(absl::StrCat(
        "job ", job, " created ", j.total, " new series in the last ", hours,
        " h (limit ", options_.per_job, "); new series are refused"));
  for (Counter* c : {&n, &j}) {
    if (c->slices.empty() || c->slices.back().first != slice)
      c->slices.emplace_back(slice, 0);
    ++c->slices.back().second;
    ++c->total;
  }
  return absl::OkStatus();
}

}  // namespace vigil
