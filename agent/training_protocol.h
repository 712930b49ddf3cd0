// The line protocol between a training job's ranks and the agent's training
// endpoint (agent/training_endpoint.h): parsing and validation of one line,
// no I/O. python/README.md documents the same protocol for client authors.
//
// Each line is one JSON object; blank lines are ignored. Numbers may be the
// tokens NaN, Infinity and -Infinity that Python's json.dumps writes for
// non-finite floats; a NaN loss is the most important reading there is. Every
// message may carry "v": 1 (the protocol version; any other value is refused).
// Unknown fields are ignored, so newer clients work with older agents; a null
// value counts as absent.
//
//   {"v":1,"type":"hello","job":"llama-70b","rank":3,"local_rank":3,
//    "world_size":64,"gpu":3}
//     Names the rank behind the connection; required before any other
//     message on a connection, and may be repeated (a new identity). All
//     fields optional: job (1..256 bytes; absent = the agent's default),
//     rank (default 0), local_rank, world_size, gpu (integers >= 0).
//   {"type":"step","step":1200,"loss":2.31,"grad_norm":0.9,
//    "tokens_per_second":5120,"step_time_seconds":1.7,
//    "dataloader_wait_seconds":0.01,"loss_scale":65536,"mfu_ratio":0.41,
//    "torch_reserved_bytes":6.1e10,"torch_allocated_bytes":5.2e10,
//    "torch_alloc_retries_total":0}
//     The readings of completed step `step` (an integer >= 0, required);
//     every other field is an optional number. tokens_per_second is this
//     rank's own throughput; torch_alloc_retries_total is cumulative.
//   {"type":"phase","phase":"checkpoint_start"}
//     One of checkpoint_start, checkpoint_end, eval_start, eval_end.
#ifndef VIGIL_AGENT_TRAINING_PROTOCOL_H_
#define VIGIL_AGENT_TRAINING_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"

namespace vigil::agent {

// Who is behind a connection.
struct HelloMessage {
  std::string job;  // empty: not said
  int64_t rank = 0;
  std::optional<int64_t> local_rank;
  std::optional<int64_t> world_size;
  std::optional<int64_t> gpu;
  // Set by the training endpoint, never read from the line: the
  // scheduler's id of `job` when the connecting process was checked to run
  // in it (agent/job_identity.h); empty when the claim is unchecked.
  std::string verified_job_id;
};

// The readings of one completed step; absent fields were not sent.
struct StepMessage {
  int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> grad_norm;
  std::optional<double> tokens_per_second;
  std::optional<double> step_time_seconds;
  std::optional<double> dataloader_wait_seconds;
  std::optional<double> loss_scale;
  std::optional<double> mfu_ratio;
  std::optional<double> torch_reserved_bytes;
  std::optional<double> torch_allocated_bytes;
  std::optional<double> torch_alloc_retries_total;
};

// A phase marker.
enum class PhaseMarker {
  kCheckpointStart,
  kCheckpointEnd,
  kEvalStart,
  kEvalEnd
};

struct PhaseMessage {
  PhaseMarker marker = PhaseMarker::kCheckpointStart;
};

using TrainingMessage = std::variant<HelloMessage, StepMessage, PhaseMessage>;

// Parses one line (without its newline). kInvalidArgument with a short
// reason for anything but a well-formed message: bad JSON, not an object,
// unknown or missing "type", an unsupported "v", a field of the wrong type
// or out of range.
absl::StatusOr<TrainingMessage> ParseTrainingMessage(std::string_view line);

// `text` with the bare tokens NaN, Infinity and -Infinity outside strings
// replaced by strings that ParseTrainingMessage reads back as those numbers,
// so that a strict JSON parser accepts it. Exposed for tests.
std::string QuoteNonFiniteTokens(std::string_view text);

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_TRAINING_PROTOCOL_H_
