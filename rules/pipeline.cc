#include "rules/pipeline.h"

#include <utility>

namespace vigil {

DetectionPipeline::DetectionPipeline(const DetectorOptions& detector_options,
                                     RuleSet rules)
    : detector_(detector_options), engine_(std::move(rules)) {
  engine_.set_context_source(this);
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
                                     std::vector<IncidentUpdate>* out) {
  detector_.AdvanceTime(frame.ts, &anomalies_);
  detector_.ProcessFrame(frame, &anomalies_);
  Drain(frame.ts, out);
}

void DetectionPipeline::AdvanceTime(double ts,
                                    std::vector<IncidentUpdate>* out) {
  detector_.AdvanceTime(ts, &anomalies_);
  Drain(ts, out);
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
