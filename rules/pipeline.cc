#include "rules/pipeline.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace vigil {

DetectionPipeline::DetectionPipeline(const DetectorOptions& detector_options,
                                     RuleSet rules)
    : detector_(detector_options), engine_(std::move(rules)) {
  engine_.set_context_source(this);
}

namespace {
// A snapshot: "VGP2", u64 n, the engine's history (n bytes), the
// detector's snapshot (the rest). Snapshots of the first format ("VGPS",
// u64 n, the detector's snapshot (n bytes), the history) still restore.
constexpr char kPipelineMagic[] = "VGP2";
constexpr char kPipelineMagicV1[] = "VGPS";
}  // namespace

absl::Status DetectionPipeline::SaveState(std::string* out) const {
  out->clear();
  PipelineSnapshotCursor cursor;
  while (!cursor.done()) SaveStatePart(&cursor, size_t{1} << 40, out);
  return absl::OkStatus();
}

void DetectionPipeline::SaveStatePart(PipelineSnapshotCursor* cursor,
                                      size_t max_bytes, std::string* out) const {
  if (!cursor->started) {
    const std::string history = engine_.SaveHistory();
    out->append(kPipelineMagic, 4);
    const uint64_t n = history.size();
    out->append(reinterpret_cast<const char*>(&n), sizeof(n));
    out->append(history);
    cursor->started = true;
  }
  detector_.SaveStatePart(&cursor->detector, max_bytes, out);
}

absl::Status DetectionPipeline::RestoreState(std::string_view data) {
  uint64_t n = 0;
  const std::string_view magic = data.substr(0, 4);
  if (data.size() < 4 + sizeof(n) ||
      (magic != std::string_view(kPipelineMagic, 4) &&
       magic != std::string_view(kPipelineMagicV1, 4))) {
    return absl::DataLossError("not a detection snapshot (bad magic)");
  }
  std::memcpy(&n, data.data() + 4, sizeof(n));
  data.remove_prefix(4 + sizeof(n));
  if (n > data.size()) return absl::DataLossError("truncated detection snapshot");
  const bool history_first = magic == std::string_view(kPipelineMagic, 4);
  const std::string_view history = history_first ? data.substr(0, n) : data.substr(n);
  const std::string_view detector = history_first ? data.substr(n) : data.substr(0, n);
  // The history first: it is the cheaper one to refuse.
  IncidentEngine probe;
  if (absl::Status s = probe.RestoreHistory(history); !s.ok()) {
    return absl::DataLossError(s.message());
  }
  if (absl::Status s = detector_.RestoreState(detector); !s.ok()) {
    return s;
  }
  return engine_.RestoreHistory(history);
}

void DetectionPipeline::SetJobState(std::string_view job, JobRunState state,
                                    double ts,
                                    std::vector<IncidentUpdate>* out) {
  detector_.SetJobState(job, state, ts, &anomalies_);
  Drain(ts, out);
}

absl::Status DetectionPipeline::RegisterSeries(uint32_t id,
                                               const SeriesKey& key) {
  return detector_.RegisterSeries(id, key);
}

bool DetectionPipeline::HasSeries(uint32_t id) const {
  return detector_.HasSeries(id);
}

void DetectionPipeline::ProcessFrame(const FrameView& frame,
                                     std::vector<IncidentUpdate>* out,
                                     std::optional<double> now) {
  const double t = now.value_or(frame.ts);
  detector_.AdvanceTime(t, &anomalies_);
  detector_.ProcessFrame(frame, &anomalies_);
  Drain(std::max(t, frame.ts), out);
}

void DetectionPipeline::NodeMovedAway(const FrameView& frame,
                                      std::vector<IncidentUpdate>* out, bool handed_over) {
  detector_.NodeMovedAway(frame, &anomalies_, handed_over);
  Drain(frame.ts, out);
}

void DetectionPipeline::AdvanceTime(double ts,
                                    std::vector<IncidentUpdate>* out) {
  detector_.AdvanceTime(ts, &anomalies_);
  Drain(ts, out);
}

void DetectionPipeline::AdvanceIncidents(double ts,
                                         std::vector<IncidentUpdate>* out) {
  for (auto& u : engine_.Advance(ts)) out->push_back(std::move(u));
}

void DetectionPipeline::Drain(double ts, std::vector<IncidentUpdate>* out) {
  if (!anomalies_.empty()) {
    std::vector<IncidentUpdate> updates = engine_.Process(anomalies_);
    anomalies_.clear();
    for (auto& u : updates) out->push_back(std::move(u));
  }
  // Auto-resolution only needs a look once per second of data time.
  if (ts >= last_engine_advance_ + 1.0) {
    last_engine_advance_ = ts;
    for (auto& u : engine_.Advance(ts)) out->push_back(std::move(u));
  }
}

}  // namespace vigil
