#include "server/ingest/ingest_metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vigil {

std::string_view SeriesLimitName(SeriesLimit limit) {
  switch (limit) {
    case SeriesLimit::kStream: return "stream";
    case SeriesLimit::kNode: return "node";
    case SeriesLimit::kJob: return "job";
    case SeriesLimit::kStore: return "store";
    case SeriesLimit::kCount: break;
  }
  return "unknown";
}

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
    case RejectReason::kUnauthenticated: return "unauthenticated";
    case RejectReason::kTokenWrongNode: return "token_wrong_node";
    case RejectReason::kCertWrongNode: return "cert_wrong_node";
    case RejectReason::kNoFirstBatch: return "no_first_batch";
    case RejectReason::kTooManyStreams: return "too_many_streams";
    case RejectReason::kDetectionBacklog: return "detection_backlog";
    case RejectReason::kNotOwner: return "not_owner";
    case RejectReason::kCount: break;
  }
  return "unknown";
}

namespace {

// `value` escaped for a Prometheus label value.
std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

void IngestMetrics::SetAgentDrops(const std::string& node, uint64_t dropped,
                                  uint64_t earlier) {
  std::lock_guard<std::mutex> l(agent_mu_);
  auto it = agent_drops_.find(node);
  if (it == agent_drops_.end()) {
    if (dropped == 0 && earlier == 0) return;
    it = agent_drops_.emplace(node, AgentDrops{}).first;
  }
  it->second = AgentDrops{dropped, earlier};
}

std::string IngestMetrics::AgentDropsText() const {
  std::string out =
      "# HELP vigil_ingest_agent_dropped_batches_total Batches agents reported "
      "dropping before the server had them, by node and cause: queue_full "
      "(the agent's queue of unacknowledged batches overflowed; counts since "
      "the agent started), previous_process (left unacknowledged by an "
      "earlier agent process). Reported in each stream's Hello.\n"
      "# TYPE vigil_ingest_agent_dropped_batches_total counter\n";
  std::lock_guard<std::mutex> l(agent_mu_);
  for (const auto& [node, drops] : agent_drops_) {
    const std::string label = EscapeLabelValue(node);
    absl::StrAppend(&out, "vigil_ingest_agent_dropped_batches_total{node=\"", label,
                    "\",cause=\"queue_full\"} ", drops.dropped, "\n",
                    "vigil_ingest_agent_dropped_batches_total{node=\"", label,
                    "\",cause=\"previous_process\"} ", drops.earlier, "\n");
  }
  return out;
}

void LatencyHistogram::Observe(double seconds) {
  if (!(seconds > 0)) seconds = 0;
  size_t b = 0;
  while (b < kBounds.size() && seconds > kBounds[b]) ++b;
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::min(seconds, 1e9) * 1e9),
                    std::memory_order_relaxed);
}

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (const std::atomic<uint64_t>& b : buckets_) n += b.load(std::memory_order_relaxed);
  return n;
}

void LatencyHistogram::AppendText(std::string* out, std::string_view name_view,
                                  std::string_view help) const {
  // (Debian's Abseil has its own string_view.)
  const absl::string_view name(name_view.data(), name_view.size());
  absl::StrAppend(out, "# HELP ", name, " ", absl::string_view(help.data(), help.size()),
                  "\n# TYPE ", name, " histogram\n");
  uint64_t cumulative = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    cumulative += buckets_[b].load(std::memory_order_relaxed);
    const std::string le = b < kBounds.size() ? absl::StrCat(kBounds[b]) : "+Inf";
    absl::StrAppend(out, name, "_bucket{le=\"", le, "\"} ", cumulative, "\n");
  }
  absl::StrAppend(out, name, "_sum ",
                  absl::StrFormat("%.9g", sum_ns_.load(std::memory_order_relaxed) / 1e9), "\n",
                  name, "_count ", cumulative, "\n");
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
