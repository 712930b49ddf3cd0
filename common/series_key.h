// Identity of a time series: a metric name plus sorted labels. The job and
// node a sample belongs to are ordinary labels ("job", "node"), as in
// Prometheus, so one key names one series of one job on one node.
#ifndef VIGIL_COMMON_SERIES_KEY_H_
#define VIGIL_COMMON_SERIES_KEY_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vigil {

using Label = std::pair<std::string, std::string>;

// A metric name and its labels, kept sorted by label name with unique names.
struct SeriesKey {
  std::string metric;
  std::vector<Label> labels;

  // The value of label `name`, or "" when absent.
  std::string_view LabelValue(std::string_view name) const;
  // Prometheus text form: metric{a="1",b="x"} (labels escaped).
  std::string ToString() const;

  friend bool operator==(const SeriesKey&, const SeriesKey&) = default;
  friend bool operator<(const SeriesKey& a, const SeriesKey& b) {
    return a.metric != b.metric ? a.metric < b.metric : a.labels < b.labels;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SeriesKey& k) {
    return H::combine(std::move(h), k.metric, k.labels);
  }
};

// Limits on names and values, applied by ValidateSeriesKey.
inline constexpr size_t kMaxMetricNameLength = 200;
inline constexpr size_t kMaxLabelValueLength = 256;
inline constexpr size_t kMaxLabels = 16;

// OK if `metric` matches [a-zA-Z_:][a-zA-Z0-9_:]* and is not too long,
// otherwise kInvalidArgument naming the problem.
absl::Status ValidateMetricName(std::string_view metric);
// OK if `name` matches [a-zA-Z_][a-zA-Z0-9_]* and does not start with "__".
absl::Status ValidateLabelName(std::string_view name);

// OK if `value` may be the value of label `name` (non-empty, valid UTF-8,
// short); kInvalidArgument with the reason otherwise.
absl::Status ValidateLabelValue(std::string_view name, std::string_view value);

// Sorts `labels` by name and checks the key: metric and label names valid,
// label values valid UTF-8, non-empty and short, names unique, at most
// kMaxLabels labels. kInvalidArgument with the reason otherwise.
absl::Status NormalizeSeriesKey(SeriesKey* key);

// Compact, order-preserving binary form used as a storage key, and back.
std::string EncodeSeriesKey(const SeriesKey& key);
absl::StatusOr<SeriesKey> DecodeSeriesKey(std::string_view bytes);

}  // namespace vigil

#endif  // VIGIL_COMMON_SERIES_KEY_H_
