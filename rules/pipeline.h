// The detector and the incident engine joined: frames in, incident updates
// out. The live server (under one lock) and vigil-replay drive the same
// class, so a recorded trace yields the incidents the server raised.
#ifndef VIGIL_RULES_PIPELINE_H_
#define VIGIL_RULES_PIPELINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/series_key.h"
#include "detector/detector.h"
#include "detector/frame.h"
#include "rules/engine.h"
#include "rules/incident.h"
#include "rules/rule.h"

namespace vigil {

// Not thread-safe: one thread (or one lock) drives an instance.
// Where a snapshot written in parts (DetectionPipeline::SaveStatePart) has
// got to. Start from a default one; done() once the last part is written.
struct PipelineSnapshotCursor {
  bool started = false;
  SnapshotCursor detector;
  bool done() const { return detector.done(); }
};

class DetectionPipeline : private JobContextSource {
 public:
  DetectionPipeline(const DetectorOptions& detector_options, RuleSet rules);
  DetectionPipeline(const DetectionPipeline&) = delete;
  DetectionPipeline& operator=(const DetectionPipeline&) = delete;

  // Declares series `id`; see Detector::RegisterSeries for errors.
  absl::Status RegisterSeries(uint32_t id, const SeriesKey& key);
  // True if `id` was registered.
  bool HasSeries(uint32_t id) const;
  // Gives counter series `id` its value before this process (Detector::
  // PrimeCounter).
  void PrimeCounter(uint32_t id, double ts, double value) {
    detector_.PrimeCounter(id, ts, value);
  }
  // Moves detection time to `now` (liveness checks; the frame counts as a
  // sign of life at `now`), consumes the frame, and appends the incident
  // updates it caused to `out`. `now` is when the frame arrived: the live
  // server's clock, so that an agent resending an hour of backlog neither
  // moves time ahead for everyone else nor looks silent itself. Without
  // `now` (replay), detection time is the frame's ts.
  void ProcessFrame(const FrameView& frame, std::vector<IncidentUpdate>* out,
                    std::optional<double> now = std::nullopt);

  // The repeat-offender implications to share with pipelines that watch
  // the fleet's other jobs (IncidentEngine::TakeImplications and
  // AddImplication); recorded only once set_record_implications(true).
  void set_record_implications(bool record) {
    engine_.set_record_implications(record);
  }
  void TakeImplications(std::vector<IncidentEngine::NodeImplication>* out) {
    engine_.TakeImplications(out);
  }
  void AddImplication(const IncidentEngine::NodeImplication& implication) {
    engine_.AddImplication(implication);
  }
  // Uses `rules` from now on (IncidentEngine::SetRules).
  void SetRules(RuleSet rules) { engine_.SetRules(std::move(rules)); }

  // Whether this pipeline opens fleet-wide fault incidents
  // (IncidentEngine::set_raises_fleet_incidents).
  void set_raises_fleet_incidents(bool raises) {
    engine_.set_raises_fleet_incidents(raises);
  }

  // The node of `frame` now reports a job another pipeline watches, or,
  // `handed_over`, its job moved to another server (Detector::
  // NodeMovedAway); appends what follows to `out`.
  void NodeMovedAway(const FrameView& frame, std::vector<IncidentUpdate>* out,
                     bool handed_over = false);

  // Moves time to `ts` without a frame (the live server's clock tick) and
  // appends silences, hangs and auto-resolutions that fell due to `out`.
  void AdvanceTime(double ts, std::vector<IncidentUpdate>* out);
  // Moves only the incident engine's time to `ts`: resolutions and what
  // other pipelines' implications raise (fleet-wide faults), no liveness
  // (for a pipeline that has seen no frame yet).
  void AdvanceIncidents(double ts, std::vector<IncidentUpdate>* out);

  // The scheduler's word on `job` at data time `ts` (Detector::
  // SetJobState); appends what follows to `out`.
  void SetJobState(std::string_view job, JobRunState state, double ts,
                   std::vector<IncidentUpdate>* out);
  // Jobs waiting for the scheduler's word; jobs with a running node.
  std::vector<std::string> JobsAwaitingScheduler() const {
    return detector_.JobsAwaitingScheduler();
  }
  std::vector<std::string> RunningJobs() const {
    return detector_.RunningJobs();
  }

  // Detector::ExportProfiles / ImportProfiles.
  std::string ExportProfiles(std::string_view job) const { return detector_.ExportProfiles(job); }
  absl::Status ImportProfiles(std::string_view data) { return detector_.ImportProfiles(data); }

  // What the pipeline has learned (the detector's baselines and runs, the
  // engine's repeat-offender history) as one binary snapshot written in
  // parts of about `max_bytes`, appended to `out`; the parts in order are
  // the snapshot. The pipeline may change between two parts
  // (Detector::SaveStatePart), so a caller can release its lock and write
  // each part away: a snapshot of millions of series is never in memory
  // whole. Never fails.
  void SaveStatePart(PipelineSnapshotCursor* cursor, size_t max_bytes,
                     std::string* out) const;
  // The whole snapshot at once, in `out` (what the parts make together).
  // Never fails today.
  absl::Status SaveState(std::string* out) const;
  // Takes back such a snapshot. kDataLoss / kFailedPrecondition /
  // kInvalidArgument for a snapshot it cannot read (nothing changes then).
  absl::Status RestoreState(std::string_view data);

  // Every incident so far, open and resolved.
  std::vector<Incident> Incidents() const { return engine_.Incidents(); }
  DetectorStats detector_stats() const { return detector_.stats(); }
  // The current baseline of series `id` (Detector::Baseline).
  std::optional<SeriesBaseline> Baseline(uint32_t id) const {
    return detector_.Baseline(id);
  }

 private:
  // Feeds pending anomalies to the engine and resolves what fell due.
  void Drain(double ts, std::vector<IncidentUpdate>* out);
  std::optional<JobContext> Context(std::string_view job) const override {
    return detector_.Context(job);
  }

  Detector detector_;
  IncidentEngine engine_;
  std::vector<Anomaly> anomalies_;  // reused between calls
  double last_engine_advance_ = 0;
};

}  // namespace vigil

#endif  // VIGIL_RULES_PIPELINE_H_
