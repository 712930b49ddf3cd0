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
constexpr char kPipelineMagic[] = "VGPS";
}  // namespace

absl::Status DetectionPipeline::SaveState(std::string* out) const {
  std::string detector;
  if (absl::Status s = detector_.SaveState(&detector); !s.ok()) return s;
  const std::string history = engine_.SaveHistory();
  out->assign(kPipelineMagic, 4);
  const uint64_t n = detector.size();
  out->append(reinterpret_cast<const char*>(&n), sizeof(n));
  out->append(detector);
  out->append(history);
  return absl::OkStatus();
}

absl::Status DetectionPipeline::RestoreState(std::string_view data) {
  uint64_t n = 0;
  if (data.size() < 4 + sizeof(n) ||
      data.substr(0, 4) != std::string_view(kPipelineMagic, 4)) {
    return absl::DataLossError("not a detection snapshot (bad magic)");
  }
  std::memcpy(&n, data.data() + 4, sizeof(n));
  data.remove_prefix(4 + sizeof(n));
  if (n > data.size()) return absl::DataLossError("truncated detection snapshot");
  // The history first: it is the cheaper one to refuse.
  IncidentEngine probe;
  if (absl::Status s = probe.RestoreHistory(data.substr(n)); !s.ok()) {
    return absl::DataLossError(s.message());
  }
  if (absl::Status s = detector_.RestoreState(data.substr(0, n)); !s.ok()) {
    return s;
  }
  return engine_.RestoreHistory(data.substr(n));
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
