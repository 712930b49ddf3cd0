// Liveness and job lifecycle: frame intervals, step progress, node silence
// (one condition for nodes of a job that fall silent together), job ends
// (a marker, the scheduler, nodes stopping together at one step, processes
// that exited), job hang, and forgetting what ended long ago.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "detector/detector_impl.h"

namespace vigil {

using detector_internal::ClampTo;
using detector_internal::GpuState;
using detector_internal::JobState;
using detector_internal::kNaN;
using detector_internal::kNone;
using detector_internal::kNoStep;
using detector_internal::NodeState;
using detector_internal::PeerTrack;
using detector_internal::Profile;
using detector_internal::SchedulerView;
using detector_internal::SeriesAux;
using detector_internal::SeriesState;

namespace {

// Silence limit of a pair with a known interval.
double SilenceLimit(const NodeState& n, const LivenessOptions& lo) {
  return std::max(lo.silent_intervals * n.interval, lo.min_silence_s);
}

bool Running(const NodeState& n) { return !n.retired && !n.ended && !n.free; }

}  // namespace

void Detector::Impl::OnFrameTime(NodeState& n, JobState& j, uint32_t node,
                                 const FrameView& frame) {
  const LivenessOptions& lo = opt.liveness;
  if (std::isfinite(n.last_ts)) {
    const double dt = ts - n.last_ts;
    if (dt > 0) {
      // A gap must not inflate the interval it is judged against.
      n.interval =
          std::isnan(n.interval)
              ? dt
              : n.interval + lo.interval_alpha *
                                 (std::min(dt, 3 * n.interval) - n.interval);
    }
  }
  n.last_ts = ts;
  seen = std::max(ts, clock);
  n.last_seen = seen;
  if (n.silent) {
    n.silent = false;
    Emit(n.silent_idle ? AnomalyKind::kIdleNodeSilent
                       : AnomalyKind::kNodeSilent,
         true, node, kNone, kNone, 0);
  }
  n.step_moved = false;
  if (n.ended) return;
  j.last_frame_ts =
      std::isnan(j.last_frame_ts) ? seen : std::max(j.last_frame_ts, seen);
  if (j.unreachable_raised) {
    j.unreachable_raised = false;
    Anomaly& a = Emit(AnomalyKind::kJobUnreachable, true, kNone, kNone, kNone,
                      0);
    a.job = j.name;
  }
  j.awaiting_since = kNaN;
  if (!frame.step) return;
  const int64_t step_now = *frame.step;
  if (!j.has_steps) {
    j.has_steps = true;
    j.last_progress_ts = seen;
  }
  // Any change counts as progress: a restart from a checkpoint goes back.
  if (n.step != kNoStep && step_now != n.step) {
    n.step_moved = true;
    if (step_now < n.step - 1 && !n.rewarm) {
      // Restarted in place from a checkpoint: the process warms up again.
      BeginRewarm(n, ts, step_now);
    }
    if (j.hang_raised) {
      j.hang_raised = false;
      Anomaly& a = Emit(AnomalyKind::kJobHang, true, kNone, kNone, kNone,
                        seen - j.last_progress_ts);
      a.job = j.name;
      a.step = step_now;
    } else if (j.progressed) {
      // (A slow first step is no measure of the job's stalls.)
      j.longest_stall_s =
          std::max(j.longest_stall_s, seen - j.last_progress_ts);
    }
    j.progressed = true;
    j.last_progress_ts = seen;
  } else if (n.step == kNoStep) {
    n.step_moved = true;
  }
  n.step = step_now;
}

void Detector::Impl::Scan(double now) {
  for (uint32_t jj = 0; jj < jobs.size(); ++jj) {
    if (jobs[jj].free) continue;
    ScanJob(jj, now);
    ScanHang(jobs[jj], now);
  }
}

void Detector::Impl::ScanJob(uint32_t jj, double now) {
  const LivenessOptions& lo = opt.liveness;
  const LifecycleOptions& lc = opt.lifecycle;
  JobState& j = jobs[jj];
  std::vector<uint32_t>& quiet = scratch_nodes;
  quiet.clear();
  int live = 0, pending = 0, running = 0, silent = 0;
  double overdue = 0, first_interval = 0, stop_ts = -detector_internal::kInf;
  for (uint32_t p : j.nodes) {
    NodeState& n = nodes[p];
    if (!Running(n)) continue;
    if (n.silent) {
      ++silent;
      continue;
    }
    ++running;
    if (!std::isfinite(n.interval)) {
      ++live;
      continue;
    }
    const double limit = SilenceLimit(n, lo);
    const double q = now - n.last_seen;
    if (q > limit) {
      quiet.push_back(p);
      if (q - limit > overdue) {
        overdue = q - limit;
        first_interval = n.interval;
      }
      stop_ts = std::max(stop_ts, n.last_seen);
    } else {
      ++live;
      if (q > std::max(2.5 * n.interval, 3.0)) ++pending;
    }
  }
  if (running == 0) {
    // Every node left the job (moved on to other jobs, or ended): its run
    // is over even without a marker. Nodes that fell silent keep it open.
    if (silent == 0 && !j.ended && std::isfinite(j.run_start_ts)) {
      bool handed_over = true;
      for (uint32_t p : j.nodes) handed_over &= nodes[p].free || nodes[p].handed_over;
      EndJob(jj, now,
             handed_over ? "another server watches it now" : "its nodes moved on to other jobs",
             /*quiet=*/handed_over);
    }
    return;
  }
  if (quiet.empty()) return;
  // Nodes that stop together cross the limit within an interval of each
  // other: wait briefly for the rest, so the stop is judged once.
  const double wait =
      std::max(lc.group_wait_intervals * first_interval, lc.group_wait_min_s);
  if (pending > 0 && overdue < wait) return;
  if (live == 0 && j.has_steps) {
    // No node of the job reports on. Did they stop at one step?
    // Their last frames are up to group_wait_intervals apart: so are
    // their steps.
    int64_t lo_step = std::numeric_limits<int64_t>::max(), hi_step = kNoStep;
    double steps_per_interval = 0;
    for (uint32_t p : quiet) {
      const NodeState& n = nodes[p];
      if (n.step == kNoStep) continue;
      lo_step = std::min(lo_step, n.step);
      hi_step = std::max(hi_step, n.step);
      const double ran = n.last_seen - n.run_start_ts;
      if (n.run_start_step != kNoStep && n.step > n.run_start_step &&
          ran > 0 && std::isfinite(n.interval)) {
        steps_per_interval =
            std::max(steps_per_interval,
                     (n.step - n.run_start_step) * n.interval / ran);
      }
    }
    const bool together =
        hi_step == kNoStep ||
        hi_step - lo_step <=
            lc.end_step_tolerance +
                ClampTo<int64_t>(std::ceil(lc.group_wait_intervals *
                                               steps_per_interval));
    if (together) {
      if (j.scheduler == SchedulerView::kRunning &&
          j.scheduler_ts >= stop_ts) {
        // The scheduler still runs it, yet none of its nodes reports.
        for (uint32_t p : quiet) {
          nodes[p].silent = true;
          nodes[p].silent_idle = false;
        }
        if (!j.unreachable_raised) {
          j.unreachable_raised = true;
          Anomaly& a = Emit(AnomalyKind::kJobUnreachable, false, kNone, kNone,
                            kNone, now - stop_ts);
          a.job = j.name;
          for (uint32_t p : quiet) a.nodes.push_back(nodes[p].name);
          std::sort(a.nodes.begin(), a.nodes.end());
          if (hi_step != kNoStep) a.step = hi_step;
          a.score = a.value;
          a.detail = absl::StrCat(
              "the scheduler runs it, but none of its ", quiet.size(),
              " nodes has reported for ", ClampTo<int64_t>(now - stop_ts),
              " s");
        }
        return;
      }
      if (lc.await_scheduler_s > 0 && j.scheduler_ts < stop_ts) {
        if (std::isnan(j.awaiting_since)) j.awaiting_since = now;
        if (now - j.awaiting_since < lc.await_scheduler_s) return;
      }
      EndJob(jj, now,
             absl::StrCat("all ", quiet.size(), " nodes stopped reporting at ",
                          hi_step == kNoStep ? std::string("one time")
                                             : absl::StrCat("step ", hi_step)));
      return;
    }
  }
  // Nodes died inside a running job (its peers go on), or nodes of a job
  // without training steps went away: one condition for all of them.
  const AnomalyKind kind =
      j.has_steps ? AnomalyKind::kNodeSilent : AnomalyKind::kIdleNodeSilent;
  double longest = 0, interval = 0;
  for (uint32_t p : quiet) {
    NodeState& n = nodes[p];
    n.silent = true;
    n.silent_idle = kind == AnomalyKind::kIdleNodeSilent;
    if (now - n.last_seen > longest) {
      longest = now - n.last_seen;
      interval = n.interval;
    }
  }
  Anomaly& a = Emit(kind, false, quiet.size() == 1 ? quiet[0] : kNone, kNone,
                    kNone, longest);
  a.job = j.name;
  if (quiet.size() > 1) {
    for (uint32_t p : quiet) a.nodes.push_back(nodes[p].name);
    std::sort(a.nodes.begin(), a.nodes.end());
    int64_t step = kNoStep;
    for (uint32_t p : quiet) step = std::max(step, nodes[p].step);
    if (step != kNoStep) a.step = step;
  }
  a.baseline_mean = interval;
  a.score = longest / interval;
  a.detail = absl::StrCat("no frame for ", ClampTo<int64_t>(longest),
                          " s (interval ", interval, " s)");
}

void Detector::Impl::ScanHang(JobState& j, double now) {
  const LivenessOptions& lo = opt.liveness;
  if (!j.has_steps || j.hang_raised || j.ended ||
      !(now - j.last_frame_ts <= lo.hang_recent_frame_s)) {
    return;
  }
  const double stalled = now - j.last_progress_ts;
  if (stalled >= opt.lifecycle.stall_end_s) {
    // Frames arrive, the step stands still: a hang - or processes that
    // exited under an agent that still reports their job. Their GPUs say
    // which: a hung collective holds its memory, an exited process frees it.
    int with_memory = 0;
    bool released = true;
    for (uint32_t gi : j.gpus) {
      const GpuState& g = gpus[gi];
      const NodeState& n = nodes[g.node];
      if (!Running(n) || n.silent || !std::isfinite(g.mem_used) ||
          !(g.mem_total > 0)) {
        continue;
      }
      ++with_memory;
      released = released && g.mem_used < opt.lifecycle.released_memory_fraction *
                                              g.mem_total;
    }
    if (with_memory > 0 && released) {
      EndJob(static_cast<uint32_t>(&j - jobs.data()), now,
             "its processes exited (every GPU freed its memory)");
      return;
    }
  }
  double timeout =
      std::max(lo.hang_timeout_s, lo.hang_stall_factor * j.longest_stall_s);
  if (j.benign_phase_ts >= j.last_progress_ts) {
    timeout = std::max(timeout, lo.hang_benign_phase_max_s);
  }
  if (!j.progressed) timeout = std::max(timeout, lo.hang_first_step_s);
  if (stalled <= timeout) return;
  j.hang_raised = true;
  // Evidence: a hung collective leaves power near idle and NVLink quiet.
  double power = 0, nvlink = 0;
  int n_power = 0, n_nvlink = 0;
  int64_t step = kNoStep;
  for (uint32_t ni : j.nodes) {
    if (Running(nodes[ni])) step = std::max(step, nodes[ni].step);
  }
  for (uint32_t gi : j.gpus) {
    const GpuState& g = gpus[gi];
    if (!Running(nodes[g.node])) continue;
    if (std::isfinite(g.power)) power += g.power, ++n_power;
    if (std::isfinite(g.nvl_tx)) nvlink += g.nvl_tx, ++n_nvlink;
  }
  Anomaly& a =
      Emit(AnomalyKind::kJobHang, false, kNone, kNone, kNone, stalled);
  a.job = j.name;
  if (step != kNoStep) a.step = step;
  a.baseline_mean = timeout;
  a.score = stalled;
  a.detail =
      absl::StrCat("step stalled ", ClampTo<int64_t>(stalled), " s");
  if (n_power > 0) {
    absl::StrAppend(&a.detail, ", mean GPU power ",
                    ClampTo<int64_t>(power / n_power), " W");
  }
  if (n_nvlink > 0) {
    absl::StrAppend(&a.detail, ", mean NVLink tx ",
                    ClampTo<int64_t>(nvlink / n_nvlink / 1e6), " MB/s");
  }
}

void Detector::Impl::EndPair(uint32_t idx, double at, int64_t end_step) {
  NodeState& n = nodes[idx];
  if (n.ended) return;
  if (n.silent) {
    // It reported its job's end: it is alive.
    n.silent = false;
    Emit(n.silent_idle ? AnomalyKind::kIdleNodeSilent
                       : AnomalyKind::kNodeSilent,
         true, idx, kNone, kNone, 0);
  }
  n.ended = true;
  ++run_state_changes;
  n.end_ts = at;
  n.end_step = end_step != kNoStep ? end_step : n.step;
  n.rewarm = false;
  n.in_dip = false;
  // The job's conditions on this node end with it (rules/ clears them on
  // the node's kJobEnded); a resumed run starts its debouncers afresh.
  for (uint32_t dense : n.series) {
    SeriesState& s = series[dense];
    s.sustain = Sustain();
    s.sustain2 = Sustain();
    s.raised_dir = 0;
    s.raised_ts = kNaN;
    s.red_raised = false;
    s.red_calm = 0;
    s.nonfinite_run = 0;
    s.prev_raw = kNaN;
    s.prev_ts = kNaN;
    s.cur = kNaN;
    if (s.aux != kNone) {
      SeriesAux& ax = aux[s.aux];
      ax.osc = Sustain();
      ax.prev = kNaN;
      ax.diff_count = 0;
      ax.thrash_raised = false;
      ax.halving_count = 0;
      ax.sbe_raised = false;
      ax.slow1 = Sustain();
      ax.slow2 = Sustain();
      ax.slow_tier = 0;
    }
  }
  for (uint32_t gi : n.gpus) {
    GpuState& g = gpus[gi];
    g.power_peer = PeerTrack();
    g.clock_peer = PeerTrack();
    g.nvlink_peer = PeerTrack();
    g.throttle_sustain = Sustain();
    g.oom = Sustain();
    g.frag = Sustain();
    g.missing = false;
    g.xids.clear();
    g.mem_fit = EwLineFit();
    g.mem_fit_start = kNaN;
  }
  Anomaly& a = Emit(AnomalyKind::kJobEnded, false, idx, kNone, kNone, 0);
  if (n.end_step != kNoStep) a.step = n.end_step;
}

void Detector::Impl::EndJob(uint32_t jj, double at, std::string_view how, bool quiet) {
  for (uint32_t p : jobs[jj].nodes) {
    NodeState& n = nodes[p];
    if (Running(n) && !n.silent) EndPair(p, at, n.step);
  }
  MaybeJobEnded(jj, at, how, quiet);
}

void Detector::Impl::MaybeJobEnded(uint32_t jj, double at, std::string_view how,
                                   bool quiet) {
  JobState& j = jobs[jj];
  if (j.ended) return;
  int ended = 0, silent = 0;
  int64_t last = kNoStep;
  for (uint32_t p : j.nodes) {
    const NodeState& n = nodes[p];
    if (n.free) continue;
    if (Running(n) && !n.silent) return;  // still running somewhere
    if (n.ended && n.end_ts >= j.run_start_ts) {
      ++ended;
      last = std::max(last, n.end_step);
    }
    if (n.silent && !n.retired) ++silent;
  }
  j.ended = true;
  j.end_ts = at;
  j.awaiting_since = kNaN;
  if (j.hang_raised) {
    j.hang_raised = false;
    Anomaly& a = Emit(AnomalyKind::kJobHang, true, kNone, kNone, kNone, 0);
    a.job = j.name;
  }
  if (j.stall_raised) {
    j.stall_raised = false;
    Anomaly& a =
        Emit(AnomalyKind::kPeriodicStall, true, j.stall_node, kNone, kNone, 0);
    a.job = j.name;
  }
  if (j.unreachable_raised) {
    j.unreachable_raised = false;
    Anomaly& a =
        Emit(AnomalyKind::kJobUnreachable, true, kNone, kNone, kNone, 0);
    a.job = j.name;
  }
  if (quiet) return;
  for (bool cleared : {false, true}) {
    Anomaly& a =
        Emit(AnomalyKind::kJobEnded, cleared, kNone, kNone, kNone, ended);
    a.job = j.name;
    if (last != kNoStep) a.step = last;
    a.score = ended;
    a.detail = absl::StrCat(detector_internal::AbslView(how), "; ", ended,
                            ended == 1 ? " node" : " nodes");
    if (last != kNoStep) absl::StrAppend(&a.detail, ", last step ", last);
    if (silent > 0) {
      absl::StrAppend(&a.detail, "; ", silent, " silent before the end");
    }
  }
}

void Detector::Impl::Forget(double now) {
  const double keep = opt.lifecycle.forget_ended_s;
  if (pending_series.empty() && pending_runs.empty() && pending_jobs.empty()) {
    pending_since = kNaN;
  } else if (std::isnan(pending_since)) {
    pending_since = now;
  } else if (now - pending_since > keep) {
    pending_series.clear();
    pending_runs.clear();
    pending_jobs.clear();
    pending_since = kNaN;
  }
  for (uint32_t p = 0; p < nodes.size(); ++p) {
    const NodeState& n = nodes[p];
    if (n.free || n.silent || !(n.ended || n.retired)) continue;
    const double since = n.ended ? std::max(n.end_ts, n.last_seen)
                                 : n.last_seen;
    if (now - since > keep) FreePair(p);
  }
  // Profiles of running jobs are in use; the others age.
  for (const JobState& j : jobs) {
    if (j.free || j.ended) continue;
    for (const std::string* name : {&j.name, &j.family}) {
      if (auto it = profiles.find(*name); it != profiles.end()) it->second.used_ts = now;
    }
  }
  absl::erase_if(profiles, [&](auto& entry) {
    Profile& p = entry.second;
    if (std::isnan(p.used_ts)) p.used_ts = now;
    return now - p.used_ts > opt.lifecycle.forget_profile_s;
  });
}

void Detector::Impl::FreePair(uint32_t idx) {
  if (idx == carry_pair) {
    carry_pair = kNone;
    carry_values.clear();
  }
  NodeState& n = nodes[idx];
  const uint32_t jj = n.job;
  JobState& j = jobs[jj];
  for (uint32_t dense : n.series) {
    SeriesState& s = series[dense];
    if (s.id < dense_of_id.size()) dense_of_id[s.id] = kNone;
    if (s.aux != kNone) {
      aux[s.aux] = SeriesAux();
      free_aux.push_back(s.aux);
    }
    s = SeriesState();
    ClearKey(dense);
    primed_counters.erase(dense);
    carried_counters.erase(dense);
    free_series.push_back(dense);
  }
  for (uint32_t gi : n.gpus) {
    gpus[gi] = GpuState();
    free_gpus.push_back(gi);
    std::erase(j.gpus, gi);
  }
  std::erase(j.nodes, idx);
  j.nodes_by_name.erase(n.name);
  if (auto it = node_by_name.find(n.name);
      it != node_by_name.end() && it->second == idx) {
    node_by_name.erase(it);
  }
  n = NodeState();
  n.free = true;
  free_nodes.push_back(idx);
  if (j.nodes.empty()) {
    job_by_name.erase(j.name);
    j = JobState();
    j.free = true;
    free_jobs.push_back(jj);
  }
}

void Detector::SetJobState(std::string_view job, JobRunState state,
                           double ts, std::vector<Anomaly>* out) {
  Impl& m = *impl_;
  auto it = m.job_by_name.find(detector_internal::AbslView(job));
  if (it == m.job_by_name.end()) return;
  JobState& j = m.jobs[it->second];
  m.out = out;
  m.ts = ts;
  m.step.reset();
  if (state == JobRunState::kEnded) {
    j.scheduler = SchedulerView::kEnded;
    j.scheduler_ts = ts;
    if (!j.ended) m.EndJob(it->second, ts, "the scheduler reports it ended");
  } else {
    j.scheduler = SchedulerView::kRunning;
    j.scheduler_ts = ts;
  }
  m.out = nullptr;
}

std::vector<std::string> Detector::JobsAwaitingScheduler() const {
  std::vector<std::string> out;
  for (const JobState& j : impl_->jobs) {
    if (!j.free && !j.ended && std::isfinite(j.awaiting_since)) {
      out.push_back(j.name);
    }
  }
  return out;
}

std::vector<std::string> Detector::RunningJobs() const {
  std::vector<std::string> out;
  for (const JobState& j : impl_->jobs) {
    if (j.free || j.ended) continue;
    for (uint32_t p : j.nodes) {
      if (Running(impl_->nodes[p])) {
        out.push_back(j.name);
        break;
      }
    }
  }
  return out;
}

std::optional<JobContext> Detector::Context(std::string_view job) const {
  const Impl& m = *impl_;
  auto it = m.job_by_name.find(detector_internal::AbslView(job));
  if (it == m.job_by_name.end()) return std::nullopt;
  const JobState& j = m.jobs[it->second];
  JobContext c;
  for (uint32_t p : j.nodes) {
    const NodeState& n = m.nodes[p];
    if (!Running(n) || n.silent) continue;
    ++c.nodes;
    c.gpus += static_cast<int>(n.gpus.size());
  }
  c.run_start_ts = j.run_start_ts;
  c.last_checkpoint_ts = j.last_checkpoint_ts;
  c.ended = j.ended;
  return c;
}

}  // namespace vigil
