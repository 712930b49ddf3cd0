// The unit every detector consumes: one node tick, with the server's series
// ids resolved. Plain data: no I/O, no clock; time is `ts`.
#ifndef VIGIL_DETECTOR_FRAME_H_
#define VIGIL_DETECTOR_FRAME_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace vigil {

// A job's end on one node, as the node's agent reports it with the first
// frame after the end (docs/DETECTION.md, "Job lifecycle").
struct JobEndView {
  // The job that ended on the frame's node (not the frame's own job, which
  // is the node's next job or its idle job). Empty: no marker.
  std::string_view job;
  // Its last step on the node, when known.
  std::optional<int64_t> step;
  // Why, as the agent knows it ("completed", "cancelled", "failed",
  // "preempted", "ranks_disconnected", ...); may be empty.
  std::string_view reason;
};

// A view of one accepted frame; valid for the duration of the call it is
// passed to. ids[i] is the store's series id of values[i].
struct FrameView {
  std::string_view node;
  std::string_view job;
  std::optional<int64_t> step;
  double ts = 0;
  std::span<const uint32_t> ids;
  std::span<const double> values;
  // Set when the node reports that a job ended on it.
  JobEndView job_end;
  // The scheduler's id of `job` when the node's agent verified it
  // (proto Frame.verified_job_id); empty: `job` is only claimed.
  std::string_view verified_job_id;
  // The node is only what a scraping source's labels claim (Prometheus
  // remote write), not a node an agent streams for: nothing about the node
  // is acted on without a human's approval (docs/SECURITY.md).
  bool claimed_node = false;
};

}  // namespace vigil

#endif  // VIGIL_DETECTOR_FRAME_H_
