#include "server/ingest/frame_assembler.h"

#include <algorithm>
#include <utility>

namespace vigil {

FrameAssembler::FrameAssembler(double grace_seconds, size_t max_open_frames)
    : grace_seconds_(std::max(0.0, grace_seconds)),
      max_open_frames_(std::max<size_t>(1, max_open_frames)) {}

FrameAssembler::Added FrameAssembler::Add(AssembledFrame piece, double now) {
  Node& node = nodes_[piece.node];
  if (piece.ts <= node.last_taken_ts) return Added::kLate;
  auto [it, fresh] = node.frames.try_emplace(piece.ts);
  Open& open = it->second;
  open.last_piece = now;
  if (fresh) {
    ++open_;
    open.frame = std::move(piece);
    open.index.reserve(open.frame.ids.size());
    // Within a piece too, the last sample of a series wins.
    size_t kept = 0;
    for (size_t i = 0; i < open.frame.ids.size(); ++i) {
      auto [at, added] = open.index.try_emplace(open.frame.ids[i], static_cast<uint32_t>(kept));
      if (!added) {
        open.frame.values[at->second] = open.frame.values[i];
        continue;
      }
      open.frame.ids[kept] = open.frame.ids[i];
      open.frame.values[kept] = open.frame.values[i];
      ++kept;
    }
    open.frame.ids.resize(kept);
    open.frame.values.resize(kept);
    return Added::kAdded;
  }
  AssembledFrame& frame = open.frame;
  if (frame.job != piece.job) return Added::kOtherJob;
  if (frame.ended_job.empty() && !piece.ended_job.empty()) {
    frame.ended_job = std::move(piece.ended_job);
    frame.end_reason = std::move(piece.end_reason);
  }
  for (size_t i = 0; i < piece.ids.size(); ++i) {
    auto [at, added] = open.index.try_emplace(piece.ids[i], static_cast<uint32_t>(frame.ids.size()));
    if (!added) {
      frame.values[at->second] = piece.values[i];
      continue;
    }
    frame.ids.push_back(piece.ids[i]);
    frame.values.push_back(piece.values[i]);
  }
  return Added::kAdded;
}

void FrameAssembler::TakeUpTo(Node& node, double upto, std::vector<AssembledFrame>* out) {
  while (!node.frames.empty() && node.frames.begin()->first <= upto) {
    auto first = node.frames.begin();
    node.last_taken_ts = first->first;
    out->push_back(std::move(first->second.frame));
    node.frames.erase(first);
    --open_;
  }
}

void FrameAssembler::TakeDue(double now, std::vector<AssembledFrame>* out) {
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node& node = it->second;
    // The latest due frame: it and every older one leave.
    double upto = -1;
    for (const auto& [ts, open] : node.frames) {
      if (now - open.last_piece >= grace_seconds_) upto = ts;
    }
    if (upto >= 0) TakeUpTo(node, upto, out);
    // A node with nothing open is forgotten once its last frame is older
    // than any piece could still be (its timestamp guards lateness only
    // while a piece may still come; later pieces of it are then new frames
    // of an old time, which the store and the detectors order by ts).
    if (node.frames.empty() && now - node.last_taken_ts > 3600) {
      nodes_.erase(it++);
    } else {
      ++it;
    }
  }
  if (open_ <= max_open_frames_) return;
  // Over the bound: the frames whose last piece is oldest go first.
  std::vector<std::pair<double, std::pair<std::string, double>>> waiting;
  waiting.reserve(open_);
  for (const auto& [name, node] : nodes_) {
    for (const auto& [ts, open] : node.frames) waiting.push_back({open.last_piece, {name, ts}});
  }
  const size_t excess = open_ - max_open_frames_;
  std::partial_sort(waiting.begin(), waiting.begin() + excess, waiting.end());
  for (size_t i = 0; i < excess && open_ > max_open_frames_; ++i) {
    auto node = nodes_.find(waiting[i].second.first);
    if (node != nodes_.end()) TakeUpTo(node->second, waiting[i].second.second, out);
  }
}

void FrameAssembler::TakeAll(std::vector<AssembledFrame>* out) {
  for (auto& [name, node] : nodes_) {
    if (!node.frames.empty()) TakeUpTo(node, node.frames.rbegin()->first, out);
  }
}

}  // namespace vigil
