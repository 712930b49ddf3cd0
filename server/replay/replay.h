// Offline replay: recorded frames (JSONL, one node tick per line, sorted by
// ts) through the same DetectionPipeline the live server runs, with time
// taken from the frames, to incident lines (JSONL). The format is a
// contract (docs/DETECTION.md, "Offline replay"):
//
// Input line:
//   {"ts": 1764000000.25, "node": "n003", "job": "llama-70b", "step": 1234,
//    "samples": [{"m": "gpu_power_watts", "gpu": 3, "v": 612.5},
//                {"m": "net_drops_total", "dev": "mlx5_0", "v": 0},
//                {"m": "train_loss", "v": "nan"}]}
// "ts" (finite number), "node", "job" (non-empty strings) and "samples"
// (array) are required; "step" (integer) is optional. Each sample needs "m"
// (a metric name) and "v" (a number or "nan", "inf", "-inf"); "gpu" (a
// non-negative integer) and "dev" (a string) are optional labels. Optional
// "job_end": {"job": "<the job that ended on this node>", "step": <its
// last step>, "reason": "completed"} marks the first frame after a job's
// end on the node (the frame's own job is then the node's next job or its
// idle job); "job" is required in it, "step" and "reason" optional.
// Unknown keys and null optional fields are ignored.
//
// Output lines (IncidentToJson, keys sorted):
//  - when an incident opens: exactly {"evidence", "gpu", "hint", "id",
//    "job", "kind", "node", "severity", "step", "summary", "ts"}, ts and
//    step those of first detection, plus "nodes" (sorted; "node" null)
//    when it spans several nodes;
//  - when an open incident's severity rises: the same object with the new
//    severity, "ts"/"step" of the frame during which it rose, and extra
//    "event": "severity_raised", "first_ts", "first_step";
//  - when a resolved incident comes back (same id): likewise with
//    "event": "reopened" and the severity it reopened at.
//
// A bad line (invalid JSON, a missing or mistyped field, a non-finite ts,
// a ts more than ReplayOptions::max_ts_regression_s before an earlier
// frame's or not after its node's previous frame, a bad metric or label,
// a sample given twice) is reported with its number and reason and skipped
// as a whole; it never stops the replay.
#ifndef VIGIL_SERVER_REPLAY_REPLAY_H_
#define VIGIL_SERVER_REPLAY_REPLAY_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "detector/options.h"
#include "rules/rule.h"

namespace vigil {

// How a replay runs.
struct ReplayOptions {
  // Detector tunables. Default: the live server's defaults.
  DetectorOptions detector;
  // Rules. Default: the built-in catalogue (LoadRuleSet for a file).
  RuleSet rules = DefaultRuleSet();
  // A frame may be this many seconds older than the newest frame before
  // it (several nodes' recordings merged with a little skew) and is
  // rejected beyond; 1 s is well under any liveness timeout.
  double max_ts_regression_s = 1.0;
  // Longer lines are bad lines (a line is one node tick: ~13 KB for 8 GPUs).
  size_t max_line_bytes = 16 << 20;
};

// What a replay consumed and produced.
struct ReplayStats {
  int64_t lines = 0;      // input lines, bad ones included
  int64_t frames = 0;     // lines accepted as frames
  int64_t samples = 0;    // samples of accepted frames
  int64_t bad_lines = 0;  // lines reported and skipped
  int64_t series = 0;     // distinct (job, node, metric, gpu, dev)
  int64_t incidents = 0;  // incidents opened
  int64_t severity_rises = 0;
  int64_t reopens = 0;
};

// Where a Replayer's results go.
struct ReplaySink {
  // Receives each output line, '\n' included.
  std::function<void(std::string_view line)> write;
  // Receives the number (from 1) and the reason of each skipped line.
  std::function<void(int64_t line, std::string_view reason)> bad_line;
};

// Streams JSONL input through a DetectionPipeline. Deterministic: the same
// input bytes give the same output bytes, however they are chunked.
// Not thread-safe: one thread drives an instance.
class Replayer {
 public:
  Replayer(ReplayOptions options, ReplaySink sink);
  ~Replayer();
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // Consumes the next `chunk` of input; a line may span chunks.
  void Feed(std::string_view chunk);
  // Consumes a last line that has no final newline. Call once, at the end.
  void Finish();

  // What has been consumed and produced so far.
  ReplayStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Replays `in` to its end into `out`, writing "line N: reason\n" for each
// bad line to `errors`. kDataLoss if reading `in` or writing `out` fails.
absl::StatusOr<ReplayStats> ReplayStream(std::FILE* in, std::FILE* out,
                                         std::FILE* errors,
                                         const ReplayOptions& options);

}  // namespace vigil

#endif  // VIGIL_SERVER_REPLAY_REPLAY_H_
