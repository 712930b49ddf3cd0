// The unit every detector consumes: one node tick, with the server's series
// ids resolved. Plain data: no I/O, no clock; time is `ts`.
#ifndef VIGIL_DETECTOR_FRAME_H_
#define VIGIL_DETECTOR_FRAME_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace vigil {

// A view of one accepted frame; valid for the duration of the call it is
// passed to. ids[i] is the store's series id of values[i].
struct FrameView {
  std::string_view node;
  std::string_view job;
  std::optional<int64_t> step;
  double ts = 0;
  std::span<const uint32_t> ids;
  std::span<const double> values;
};

}  // namespace vigil

#endif  // VIGIL_DETECTOR_FRAME_H_
