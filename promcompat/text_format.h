// The Prometheus text exposition format (version 0.0.4), as exporters such
// as dcgm-exporter and node_exporter serve it on /metrics. Pure: parses a
// page already read.
#ifndef VIGIL_PROMCOMPAT_TEXT_FORMAT_H_
#define VIGIL_PROMCOMPAT_TEXT_FORMAT_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::promcompat {

// One sample line: `name{label="value",...} value [timestamp_ms]`.
struct TextSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in page order
  double value = 0;  // NaN, +Inf and -Inf as written
};

// Every sample of `page`; # comments (HELP, TYPE) and blank lines are
// skipped, and so is a sample's timestamp. kInvalidArgument naming the line
// ("line 12: ...") at the first malformed one: a half-read page is not
// trusted.
absl::StatusOr<std::vector<TextSample>> ParseTextFormat(std::string_view page);

}  // namespace vigil::promcompat

#endif  // VIGIL_PROMCOMPAT_TEXT_FORMAT_H_
