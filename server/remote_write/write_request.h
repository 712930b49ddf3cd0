// Encoding of remote-write requests: the exported names of Vigil's series,
// and the snappy-compressed protobuf body (proto/prometheus/
// remote_write.proto). Pure: no I/O.
#ifndef VIGIL_SERVER_REMOTE_WRITE_WRITE_REQUEST_H_
#define VIGIL_SERVER_REMOTE_WRITE_WRITE_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/series_key.h"

namespace vigil {

// What an exported sample is: a raw sample, or one field of a minute rollup.
enum class ExportKind : uint8_t { kRaw, kMin, kMax, kAvg, kCount };

// The exported metric name: `metric` itself for kRaw, else the
// recording-rule style "<metric>:min_1m", ":max_1m", ":avg_1m", ":count_1m".
std::string ExportName(std::string_view metric, ExportKind kind);

// One exported series of a request and its samples (Unix ms, value), in
// time order. `key` is not owned and must outlive the call.
struct ExportSeries {
  const SeriesKey* key = nullptr;
  ExportKind kind = ExportKind::kRaw;
  std::vector<std::pair<int64_t, double>> samples;
};

// The body of one remote-write request: a WriteRequest with one TimeSeries
// per entry of `series` (labels: "__name__" = ExportName, then the key's
// labels, sorted by name), serialized and snappy-compressed. Never fails.
std::string EncodeWriteRequest(const std::vector<ExportSeries>& series);

}  // namespace vigil

#endif  // VIGIL_SERVER_REMOTE_WRITE_WRITE_REQUEST_H_
