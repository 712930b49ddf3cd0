// The detection hook: what the ingest path calls for every accepted frame.
#ifndef VIGIL_SERVER_FRAME_OBSERVER_H_
#define VIGIL_SERVER_FRAME_OBSERVER_H_

#include <string_view>

#include "detector/frame.h"

namespace vigil {

// Receives every frame the server accepted, after it is durable in the
// store, in stream order per node. OnFrame may be called concurrently for
// different nodes: implementations must be thread-safe and should return
// quickly.
class FrameObserver {
 public:
  virtual ~FrameObserver() = default;
  // `frame` is valid only during the call.
  virtual void OnFrame(const FrameView& frame) = 0;
};

// What the ingest path hands accepted frames to, split in shards by job:
// the frames of one shard are delivered by one worker thread at a time, in
// stream order per node, and those of different shards concurrently.
// Everything but ShardOf runs on the worker of `shard`.
class ShardedFrameObserver {
 public:
  virtual ~ShardedFrameObserver() = default;
  // How many shards; at least 1. Fixed for the observer's life.
  virtual int shards() const = 0;
  // The shard of `job`'s frames, in [0, shards()); the same for every call
  // with that job. Thread-safe; called from ingest threads.
  virtual int ShardOf(std::string_view job) const = 0;
  // A frame of a job of `shard`; valid only during the call.
  virtual void OnFrame(int shard, const FrameView& frame) = 0;
  // The frame's node now reports a job of another shard; `shard` watched
  // its previous job (and sees no more of its frames until it comes back).
  virtual void NodeMovedAway(int shard, const FrameView& frame) = 0;
  // Cluster mode: the frame's node streams to another server now (its job
  // moved to another shard); `shard` watched its job here. By default as
  // NodeMovedAway.
  virtual void NodeHandedOver(int shard, const FrameView& frame) { NodeMovedAway(shard, frame); }
};

// One shard that hands every frame to a plain FrameObserver.
class UnshardedObserver final : public ShardedFrameObserver {
 public:
  // `observer` is not owned and must outlive this.
  explicit UnshardedObserver(FrameObserver* observer) : observer_(observer) {}
  int shards() const override { return 1; }
  int ShardOf(std::string_view) const override { return 0; }
  void OnFrame(int, const FrameView& frame) override { observer_->OnFrame(frame); }
  void NodeMovedAway(int, const FrameView&) override {}

 private:
  FrameObserver* const observer_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_FRAME_OBSERVER_H_
