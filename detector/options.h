// Every tunable of the detectors, with its default and the reason for it.
// Defaults target synchronous data-parallel LLM training with frames every
// 1-10 s; a job that differs overrides fields, never code.
#ifndef VIGIL_DETECTOR_OPTIONS_H_
#define VIGIL_DETECTOR_OPTIONS_H_

#include <cstdint>
#include <string>

namespace vigil {

// N-of-M confirmation with hysteresis: a condition is raised once `need` of
// the last `window` observations were beyond the raise threshold, and
// cleared after `clear` consecutive observations inside the clear band.
// window is at most 64.
struct SustainOptions {
  int need = 3;
  int window = 5;
  int clear = 10;
};

// Dynamic baseline per (job, series); the series key carries the job.
struct BaselineOptions {
  // Steps over which a series is learned, counted from the first step the
  // detector saw for it (samples, when its node's frames carry no step).
  // 1000: the requirement.
  int64_t learn_steps = 1000;
  // Learning also ends after this many seconds of data since the series'
  // first learned sample: 1000 steps of a 45-s/step job are 12.5 h.
  double learn_max_s = 3600;
  // A baseline is usable before learning ends, once it has this many
  // samples spanning at least early_min_s, with its band widened for how
  // little it has seen (a Student-t prediction interval over the
  // effective sample count: samples early_decorrelation_s apart count
  // as independent; see docs/DETECTION.md). The band tightens as the
  // sample grows and is the requirement's k_sigma once learning ends.
  int early_min_samples = 20;
  double early_min_s = 300;
  double early_decorrelation_s = 30;
  // A band never widens beyond this multiple of k_sigma.
  double early_max_widening = 4;
  // Learning goes on past learn_steps until this many samples were kept:
  // a median/MAD from fewer is not trustworthy.
  int min_learn_samples = 30;
  // Samples kept while learning; when full, every other one is dropped and
  // only every 2nd (4th...) new one is kept, so memory is bounded.
  int learn_buffer = 512;
  // Steps (absolute; frames of the node without steps) at the start of a
  // job treated as LR warm-up: out of learning and alerting. 200: loss,
  // grad norm and memory move fast in the first hundred steps.
  int64_t warmup_steps = 200;
  // ... but never longer than this many seconds from the job's first
  // frame on the node (200 steps of a 45-s/step job are 2.5 h).
  double warmup_max_s = 600;
  // Raise beyond k_sigma robust sigmas (the requirement's 3), clear inside
  // k_clear: the gap is the hysteresis.
  double k_sigma = 3.0;
  double k_clear = 2.0;
  // 3 of 5: one-sided 3-sigma noise then fires ~1e-8 per sample instead of
  // 1.3e-3, while a real shift is confirmed within 3-5 samples.
  SustainOptions sustain = {3, 5, 10};
  // train_dataloader_wait_seconds is the wait of the last step: a pipeline
  // that starves every few steps shows as repeated spikes, not as 3 of 5
  // samples (and with frames 10 s apart a short stall is no power dip
  // either). 3 of 10, clear after 20 calm: a checkpoint or an eval every
  // 100+ steps is one spike.
  SustainOptions dataloader_sustain = {3, 10, 20};
  // Sigma is at least this fraction of |level|, so near-constant series
  // (temperature, clocks) do not alert on tiny noise. Metrics may set
  // their own (MetricTraits::sigma_floor_rel: step time and throughput
  // 0.5 %, so a steady job's 0.1 % jitter is not hidden).
  double sigma_floor_rel = 0.02;
  // A series whose metric re-learns level shifts (unknown metrics,
  // temperatures, traffic: MetricTraits::relearn) and whose condition
  // has been raised for this long takes the new level as normal: the
  // condition clears and the series learns again.
  double relearn_after_s = 1800;
  // After learning, the level follows accepted samples (residuals clipped
  // at k_sigma) with this EWMA weight: ~500 samples, slow enough that a
  // fault is not learned away, fast enough for diurnal drift.
  double level_alpha = 0.002;
  // The same for trending series (train_loss): the level is a ~20-step
  // EWMA so a loss that keeps falling is compared with its recent level,
  // not with the step-0..1000 mean.
  double trend_level_alpha = 0.05;
  // EWMA weight of the sigma update (clipped absolute residuals).
  double sigma_alpha = 0.002;
};

// Benign phases, kept out of learning and alerting (not out of red lines).
struct PhaseOptions {
  // A node is in a dip when the median power of its GPUs in a frame is
  // below this fraction of its busy level: checkpoint saves and evals make
  // every GPU wait together. (train_phase 1/2, when reported, is used
  // directly.)
  double dip_fraction = 0.5;
  // A dip ends above this fraction (hysteresis: a ramp through 50 % is one
  // dip, not several).
  double dip_exit_fraction = 0.7;
  // EWMA weight of the node's busy power level, and frames needed before a
  // dip can be inferred.
  double busy_alpha = 0.05;
  int min_busy_frames = 10;
  // A dip longer than this is no longer presumed benign (a checkpoint takes
  // seconds to a couple of minutes; a hang or a power-capped node stays).
  double max_benign_dip_s = 180;
  // Frames after a benign phase that are still treated as benign: the step
  // that contained the checkpoint reports a long step time.
  int grace_frames = 3;
  // A frame whose node median power moved by more than this fraction of
  // its busy level since the node's previous frame is a ramp (a stall's or
  // a checkpoint's edge): its GPUs are not compared with their peers, who
  // sample the job-wide ramp at other moments. One GPU's fault moves the
  // median of eight by nothing.
  double transient_fraction = 0.15;
};

// Red lines: no baseline, fire during learning too.
struct RedLineOptions {
  // fp16 jobs (those reporting train_loss_scale) see Inf grad norms while
  // GradScaler searches its scale; only this many consecutive non-finite
  // grad norms after warm-up are a red line. bf16/fp32 jobs fire on the
  // first.
  int grad_nonfinite_fp16_steps = 8;
  // Error-counter red lines clear after this many frames without increase.
  int clear_frames = 30;
  // A GPU is missing after this many of its node's GPU-bearing frames
  // without any sample labelled with it (one lost sample is not a drop).
  int gpu_missing_frames = 3;
};

// Peer comparison among all GPUs of a job (across nodes).
struct PeerOptions {
  // Power this far below the peer median is a cooling/power fault (the
  // requirement's 50 W); it clears above median - power_clear_watts.
  double power_below_watts = 50;
  double power_clear_watts = 30;
  // Below this peer median the job is idle and power says nothing.
  double min_median_watts = 150;
  // SM clock below this fraction of the peer median (SW power capping moves
  // clocks by a few %), clear above clock_clear_fraction.
  double clock_low_fraction = 0.85;
  double clock_clear_fraction = 0.92;
  // NVLink traffic below this fraction of the peer median (pipeline stages
  // differ by ~2x, a broken link falls to ~0, a link trained down to fewer
  // lanes to 20-30 %); clear above the second.
  double nvlink_low_fraction = 0.35;
  double nvlink_clear_fraction = 0.55;
  // Medians under this rate (bytes/s, tx+rx) mean no NVLink workload.
  double nvlink_min_median = 1e8;
  // Fewest fresh GPUs in a job for a median to mean anything.
  int min_peers = 3;
  // 4 of 5 frames: sustained for a few steps.
  SustainOptions sustain = {4, 5, 10};
  // Noisy jobs. The margin of each comparison is how far a healthy GPU
  // may sit from the median (power offsets of +-25 W, SW power capping a
  // few % of clock, pipeline stages 2x apart in traffic) short of the
  // threshold. While the job's sample-to-sample noise (sd of a GPU's
  // residual) is at most margin / noise_switch_z, GPUs are judged sample by
  // sample (4 of 5); in a noisier job each GPU's residual is averaged
  // (EWMA) over n = (noise_z * noise / margin)^2 samples (at most
  // max_average_samples), enough for the average to stand noise_z
  // standard errors inside the margin, and it clears only after as long a
  // calm. A job whose power swings 50-100 W a second averages over a
  // hundred samples: persistence in proportion to the noise.
  double noise_switch_z = 1.5;
  double noise_z = 6;
  double power_margin_watts = 20;
  double clock_margin = 0.10;
  double nvlink_margin = 0.15;
  int max_average_samples = 300;
  // The noise estimate (an EWMA of weight 0.01) judges nothing before it
  // has seen this many changes (two time constants, summed over the job's
  // GPUs): a new, resumed or restored job's first frames would otherwise
  // make a noisy job look quiet and judge its swings sample by sample.
  int noise_min_updates = 200;
  // NVML clock-event reasons that are faults: 0x08 HW slowdown, 0x20 SW
  // thermal, 0x40 HW thermal, 0x80 HW power brake (0x04 SW power cap is the
  // normal state of a busy card).
  uint32_t throttle_mask = 0xE8;
  SustainOptions throttle_sustain = {3, 5, 10};
};

// Job lifecycle: ends, resumes, re-warm (docs/DETECTION.md, "Job
// lifecycle").
struct LifecycleOptions {
  // After a node (re)starts a job - a new job, a resume from a checkpoint,
  // the node's first frames for the job - its readings are benign (out of
  // learning and alerting, not out of red lines) until both this many
  // seconds and this many steps have passed: GPU memory climbs back to
  // its working set and throughput ramps up.
  double rewarm_s = 90;
  int64_t rewarm_steps = 5;
  // Nodes of a job that stop reporting within this many of their frame
  // intervals of each other, at steps at most end_step_tolerance apart,
  // while no node of the job reports on, stopped the job (its end), not
  // died. Before the first of them is judged, the detector waits this many
  // intervals (at least group_wait_min_s) for the others to cross the
  // silence limit too, so a job's end or a rack's loss is judged once.
  double group_wait_intervals = 2;
  double group_wait_min_s = 5;
  // Plus the steps the job makes in group_wait_intervals frame intervals:
  // at 10-s frames and 1.4-s steps, nodes' last frames of one moment are
  // up to 7 steps apart.
  int64_t end_step_tolerance = 1;
  // A job whose step stopped for stall_end_s while every GPU of every node
  // freed its memory (used below this fraction of total) has ended: its
  // processes exited (an agent that keeps reporting a finished job).
  double released_memory_fraction = 0.1;
  double stall_end_s = 30;
  // A node whose job ended is forgotten (its series' state freed, their
  // learned baselines kept in the job's profile) after this long.
  double forget_ended_s = 7200;
  // A job's (and a family's) learned baselines, kept for its next run, are
  // dropped once no run of it has been running for this long (runs learn
  // into them and start from them only while running): a site that names every job anew would
  // otherwise keep (and snapshot) one profile per job ever seen. A run
  // resumed later learns anew.
  double forget_profile_s = 30 * 86400.0;
  // When > 0, an inferred end (no marker) waits up to this long for the
  // scheduler's word (SetJobState) before it is taken: the live server
  // asks the scheduler; replay has none.
  double await_scheduler_s = 0;
  // Names of runs of one job family: the first capture group of this
  // ECMAScript regex is the family ("gpt13b-r2" -> "gpt13b"). A run whose
  // own baselines are still learning starts from its family's, or its own
  // job's previous run's, when the node counts are comparable.
  std::string family_pattern =
      R"(^(.*[^-_.])[-_.](?:r|run|attempt|retry|restart)\d+$)";
  // "Comparable": node counts within this fraction of each other.
  double family_node_tolerance = 0.25;
};

// Node silence and job hang.
struct LivenessOptions {
  // Silent after max(silent_intervals x the node's frame interval,
  // min_silence_s) without a frame: a GC pause or a slow scrape is not a
  // dead node.
  double silent_intervals = 6;
  double min_silence_s = 15;
  // EWMA weight of the frame interval estimate.
  double interval_alpha = 0.1;
  // Hang: no node of a job changed its step for max(hang_timeout_s,
  // hang_stall_factor x the longest stall that ended by itself) while the
  // job's frames still arrive. 180 s: well before NCCL's 10-30 min timeout,
  // longer than a checkpoint save.
  double hang_timeout_s = 180;
  double hang_stall_factor = 1.5;
  // "Frames still arrive": the job's last frame is at most this old.
  double hang_recent_frame_s = 60;
  // While a node reports train_phase checkpoint/eval, a stall is allowed
  // this long.
  double hang_benign_phase_max_s = 1800;
  // Before a run's step first moves, a stall is allowed this long: the
  // first step of a large job (compiling, loading shards, NCCL setup) can
  // take minutes. NCCL's own timeout (10-30 min) still ends a hung start.
  double hang_first_step_s = 600;
  // AdvanceTime scans nodes and jobs at most once per this many seconds of
  // data time, so calling it per frame stays O(1) amortised.
  double check_interval_s = 1;
};

// Trends and patterns.
struct TrendOptions {
  // OOM: warn when memory (gpu_memory_used_bytes, else
  // torch_reserved_bytes, over gpu_memory_total_bytes) is at oom_fraction
  // (also during warm-up: the first batches may already reach it), or a
  // line fitted over ~oom_tau_s projects it there within oom_horizon_s
  // while growing at least oom_min_growth of the card per horizon (a flat
  // 97.5 % job must not alert on jitter). The fit starts after warm-up (the
  // allocator's initial ramp is no leak) and must span oom_tau_s / 2.
  double oom_fraction = 0.98;
  double oom_horizon_s = 600;
  double oom_tau_s = 120;
  double oom_min_growth = 0.01;
  int oom_min_points = 10;
  SustainOptions oom_sustain = {3, 5, 10};
  // Fragmentation 1 - allocated/reserved above 20 % (the requirement),
  // clear below 15 %, ignored while reserved is below the minimum.
  double frag_threshold = 0.20;
  double frag_clear = 0.15;
  double frag_min_reserved_bytes = 1 << 30;
  SustainOptions frag_sustain = {8, 10, 10};
  // Periodic stall: stall_min_dips consecutive node power dips (see
  // PhaseOptions::dip_fraction) whose spacing is at most stall_max_period
  // steps and stall_max_period_s seconds and regular (coefficient of
  // variation of the spacing at most stall_max_cv). Dips a node reports
  // as checkpoint or eval phases are not counted. Checkpoints every 100-
  // 1000 steps, or every 30 steps of 45 s, are not "every few seconds".
  int stall_min_dips = 4;
  double stall_max_period_steps = 50;
  double stall_max_period_s = 120;
  double stall_max_cv = 0.35;
  // A periodic stall is raised once per job. In synchronous data
  // parallelism every node dips (the others wait at the collective for the
  // starved one), so it is put on the node whose dataloader wait, a
  // time-weighted EWMA over stall_dl_tau_s, is at least stall_dl_factor x
  // the median of the other nodes' and stall_dl_min_excess_s above it; when
  // no node stands out it is raised job-wide (empty node).
  double stall_dl_tau_s = 60;
  double stall_dl_factor = 3;
  double stall_dl_min_excess_s = 0.05;
  // Throughput (train_tokens_per_second) below its learned level by more
  // than warn (tier 1, the requirement's 15 %) or severe (tier 2, 30 %),
  // and at least throughput_min_z sigmas, for 8 of 10 samples; clears
  // inside throughput_clear.
  double throughput_warn = 0.15;
  double throughput_severe = 0.30;
  double throughput_clear = 0.10;
  double throughput_min_z = 2.0;
  SustainOptions throughput_sustain = {8, 10, 10};
  // Grad norm at least grad_explosion_factor x its learned level (clear
  // below grad_explosion_clear x), or at most grad_vanish_fraction x (clear
  // above grad_vanish_clear x). Single-step spikes are common; 3 of 5 are
  // not.
  double grad_explosion_factor = 4;
  double grad_explosion_clear = 2;
  double grad_vanish_fraction = 0.05;
  double grad_vanish_clear = 0.2;
  SustainOptions grad_sustain = {3, 5, 10};
  // Loss oscillation: the median |step-to-step loss change| over the last
  // 16 steps is loss_osc_factor x its learned value, with at least
  // loss_osc_min_flips of the changes flipping sign (a diverging loss
  // rises without flips and is baseline_high instead). A median ignores
  // one bad batch.
  double loss_osc_factor = 4;
  double loss_osc_min_flips = 0.4;
  SustainOptions loss_osc_sustain = {3, 5, 10};
  // Loss scale: at least loss_scale_halvings halvings within
  // loss_scale_window_steps. GradScaler halves about once per growth
  // interval (2000 steps) in a healthy fp16 run.
  int loss_scale_halvings = 4;
  int64_t loss_scale_window_steps = 200;
  // ECC single-bit rate extrapolated per day over an exponential window of
  // ecc_sbe_tau_s; fires above ecc_sbe_per_day once ecc_sbe_min_count
  // errors are in the window (one error is not a storm).
  double ecc_sbe_per_day = 1000;
  double ecc_sbe_min_count = 10;
  double ecc_sbe_tau_s = 3600;
  // MFU below mfu_threshold (the requirement's 40 %) for 54 of 60 samples.
  double mfu_threshold = 0.40;
  double mfu_clear = 0.45;
  SustainOptions mfu_sustain = {54, 60, 20};
};

// All detector options.
struct DetectorOptions {
  BaselineOptions baseline;
  PhaseOptions phase;
  LifecycleOptions lifecycle;
  RedLineOptions red_line;
  PeerOptions peer;
  LivenessOptions liveness;
  TrendOptions trend;
};

}  // namespace vigil

#endif  // VIGIL_DETECTOR_OPTIONS_H_
