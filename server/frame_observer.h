// The detection hook: what the ingest path calls for every accepted frame.
#ifndef VIGIL_SERVER_FRAME_OBSERVER_H_
#define VIGIL_SERVER_FRAME_OBSERVER_H_

#include "detector/frame.h"

namespace vigil {

// Receives every frame the server accepted, after it is durable in the
// store, in stream order per node. OnFrame is called from the stream's
// thread, concurrently for different nodes: implementations must be
// thread-safe and should return quickly (ingest waits for them).
class FrameObserver {
 public:
  virtual ~FrameObserver() = default;
  // `frame` is valid only during the call.
  virtual void OnFrame(const FrameView& frame) = 0;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_FRAME_OBSERVER_H_
