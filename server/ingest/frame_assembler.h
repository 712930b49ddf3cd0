// Puts frames back together for detection when a node's samples of one
// timestamp arrive in pieces: Prometheus remote write splits what it
// scraped from a node across requests (and across its parallel shards), so
// one node's scrape reaches Vigil as several partial frames. The pieces are
// stored as they come (server/ingest/remote_write_receiver.h); detection
// gets one frame per node and timestamp, in time order, once no piece of
// it arrived for `grace_seconds`. Pure: no I/O, no clock (`now` comes with
// each call); not thread-safe.
#ifndef VIGIL_SERVER_INGEST_FRAME_ASSEMBLER_H_
#define VIGIL_SERVER_INGEST_FRAME_ASSEMBLER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace vigil {

// A frame, or a piece of one: samples of one node at one timestamp, with
// the store's series ids.
struct AssembledFrame {
  std::string node;
  std::string job;
  double ts = 0;
  std::vector<uint32_t> ids;
  std::vector<double> values;
  // A job that ended on the node before this frame (detector/frame.h
  // JobEndView); empty: none.
  std::string ended_job;
  std::string end_reason;
};

// Merges pieces into frames and hands them out when due.
class FrameAssembler {
 public:
  // What Add did with a piece.
  enum class Added {
    kAdded,
    // The node's frame at this timestamp (or a later one) went to detection
    // already: the piece is dropped (it is stored all the same).
    kLate,
    // The frame at this timestamp has another job: the piece is dropped.
    kOtherJob,
  };

  // `grace_seconds` >= 0: how long after its latest piece a frame is due.
  // `max_open_frames` >= 1: past it, the frames that waited longest are
  // handed out early.
  FrameAssembler(double grace_seconds, size_t max_open_frames);

  // Adds `piece`, arriving at `now`. A sample of a series the frame holds
  // already replaces it (a resent request).
  Added Add(AssembledFrame piece, double now);

  // Appends to `*out` the frames due at `now`, and before each the node's
  // older open frames (a node's frames leave in time order), and frames
  // over max_open_frames. Frames of one node are appended in time order.
  void TakeDue(double now, std::vector<AssembledFrame>* out);
  // Appends every open frame (shutdown).
  void TakeAll(std::vector<AssembledFrame>* out);

  // Frames open now.
  size_t open_frames() const { return open_; }

 private:
  struct Open {
    AssembledFrame frame;
    double last_piece = 0;  // `now` of the latest piece
    // Where each series id sits in frame.ids.
    absl::flat_hash_map<uint32_t, uint32_t> index;
  };
  struct Node {
    std::map<double, Open> frames;  // open, by ts
    double last_taken_ts = -1;      // ts of the latest frame handed out
  };

  // Hands out `node`'s frames up to and including `upto` (by ts).
  void TakeUpTo(Node& node, double upto, std::vector<AssembledFrame>* out);

  const double grace_seconds_;
  const size_t max_open_frames_;
  absl::flat_hash_map<std::string, Node> nodes_;
  size_t open_ = 0;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_FRAME_ASSEMBLER_H_
