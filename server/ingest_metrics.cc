#include "server/ingest_metrics.h"

#include <cmath>

namespace vigil {

std::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kMissingHello: return "missing_hello";
    case RejectReason::kBadHello: return "bad_hello";
    case RejectReason::kNodeTaken: return "node_taken";
    case RejectReason::kBadSeriesDef: return "bad_series_def";
    case RejectReason::kUnknownSeries: return "unknown_series";
    case RejectReason::kLengthMismatch: return "length_mismatch";
    case RejectReason::kBadTimestamp: return "bad_timestamp";
    case RejectReason::kTooOld: return "too_old";
    case RejectReason::kFutureTimestamp: return "future_timestamp";
    case RejectReason::kBadJob: return "bad_job";
    case RejectReason::kSeqNotIncreasing: return "seq_not_increasing";
    case RejectReason::kStorage: return "storage";
    case RejectReason::kCount: break;
  }
  return "unknown";
}

void RateWindow::Add(double now, uint64_t n) {
  int64_t second = static_cast<int64_t>(std::floor(now));
  std::lock_guard<std::mutex> l(mu_);
  Bucket& b = buckets_[static_cast<size_t>(second % kBuckets)];
  if (b.second != second) b = Bucket{second, 0};
  b.count += n;
}

double RateWindow::Rate(double now) const {
  int64_t current = static_cast<int64_t>(std::floor(now));
  uint64_t total = 0;
  std::lock_guard<std::mutex> l(mu_);
  for (const Bucket& b : buckets_) {
    if (b.second >= current - kSeconds && b.second < current) total += b.count;
  }
  return static_cast<double>(total) / kSeconds;
}

}  // namespace vigil
