#include "agent/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace vigil::agent {

NodeRunner::NodeRunner(NodeRunnerOptions options, Simulator* sim,
                       StreamClient* client, Clock* clock)
    : options_(std::move(options)), sim_(sim), client_(client), clock_(clock) {}

absl::Status NodeRunner::Run() {
  ids_.clear();
  for (const SeriesKey& key : sim_->series()) {
    absl::StatusOr<uint32_t> id = client_->RegisterSeries(key);
    if (!id.ok()) return id.status();
    ids_.push_back(*id);
  }
  const double interval = options_.interval_seconds;
  double start = clock_->Now();
  double end = options_.duration_seconds > 0 ? start + options_.duration_seconds
                                             : INFINITY;
  double next = std::ceil(start / interval) * interval;
  double next_status = start + options_.status_every_seconds;
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    double now = clock_->Now();
    if (now >= end) break;
    if (options_.status_every_seconds > 0 && now >= next_status) {
      StreamClientStats s = client_->stats();
      std::fprintf(stderr,
                   "vigil-agent: step %lld sent %llu acked %llu pending %zu "
                   "dropped %llu rejected %llu reconnects %llu%s\n",
                   static_cast<long long>(last_step_),
                   static_cast<unsigned long long>(s.batches_sent),
                   static_cast<unsigned long long>(s.batches_acked),
                   s.pending_batches,
                   static_cast<unsigned long long>(s.batches_dropped),
                   static_cast<unsigned long long>(s.batches_rejected),
                   static_cast<unsigned long long>(s.reconnects),
                   s.streaming ? "" : " (not connected)");
      next_status = now + options_.status_every_seconds;
    }
    if (now < next) {
      clock_->WaitUntil(l, cv_, std::min({next, end, next_status}));
      continue;
    }
    l.unlock();
    absl::Status s = TickOnce(next);
    l.lock();
    if (!s.ok()) return s;
    next += interval;
    // After a stall (suspended process, clock jump) resume on the grid
    // instead of replaying every missed tick at once.
    if (clock_->Now() >= next + interval) {
      next = std::ceil(clock_->Now() / interval) * interval;
    }
  }
  return absl::OkStatus();
}

absl::Status NodeRunner::TickOnce(double ts) {
  std::optional<SimFrame> frame = sim_->Tick(ts);
  if (!frame.has_value()) return absl::OkStatus();  // node down
  v1::Frame out;
  out.set_job(sim_->options().job);
  out.set_step(frame->step);
  out.set_ts(frame->ts);
  out.mutable_series_ids()->Reserve(frame->samples.size());
  out.mutable_values()->Reserve(frame->samples.size());
  for (const SimSample& s : frame->samples) {
    out.add_series_ids(ids_[s.series]);
    out.add_values(s.value);
  }
  std::vector<v1::Frame> frames;
  frames.push_back(std::move(out));
  absl::StatusOr<uint64_t> seq = client_->Enqueue(std::move(frames));
  if (!seq.ok()) return seq.status();
  std::lock_guard<std::mutex> l(mu_);
  last_seq_ = *seq;
  last_step_ = frame->step;
  return absl::OkStatus();
}

void NodeRunner::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  stop_ = true;
  cv_.notify_all();
}

uint64_t NodeRunner::last_seq() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_seq_;
}

}  // namespace vigil::agent
