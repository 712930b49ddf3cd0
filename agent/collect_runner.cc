#include "agent/collect_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace vigil::agent {
namespace {

// Id cached for a key the client refused, so it is not retried every tick.
constexpr uint32_t kRefused = std::numeric_limits<uint32_t>::max();

}  // namespace

CollectRunner::CollectRunner(CollectRunnerOptions options,
                             std::vector<Collector*> collectors,
                             FrameSink* client, Clock* clock)
    : options_(std::move(options)),
      collectors_(std::move(collectors)),
      client_(client),
      clock_(clock) {
  started_.assign(collectors_.size(), false);
  tried_.assign(collectors_.size(), false);
  for (Collector* c : collectors_) {
    CollectorStats s;
    s.name = std::string(c->name());
    stats_.collectors.push_back(std::move(s));
  }
}

CollectRunner::~CollectRunner() { StopCollectors(); }

void CollectRunner::StartCollectors() {
  for (size_t i = 0; i < collectors_.size(); ++i) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (tried_[i]) continue;
      tried_[i] = true;
    }
    absl::Status s = collectors_[i]->Start(this);
    std::lock_guard<std::mutex> l(mu_);
    CollectorStats& cs = stats_.collectors[i];
    started_[i] = s.ok();
    cs.running = s.ok();
    cs.start_error = s.ok() ? "" : std::string(s.message());
    if (!s.ok()) {
      std::fprintf(stderr, "vigil-agent: collector %s is off: %s\n",
                   cs.name.c_str(), cs.start_error.c_str());
    }
  }
}

void CollectRunner::StopCollectors() {
  for (size_t i = 0; i < collectors_.size(); ++i) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!started_[i]) continue;
      started_[i] = false;
      stats_.collectors[i].running = false;
    }
    collectors_[i]->Stop();
  }
}

Tick CollectRunner::Collect(double ts) {
  Tick tick;
  tick.ts = ts;
  for (size_t i = 0; i < collectors_.size(); ++i) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!started_[i]) continue;
    }
    size_t before = tick.samples.size();
    absl::Status s;
    double begin = clock_->Now();
    s = collectors_[i]->Collect(&tick);
    double seconds = clock_->Now() - begin;
    std::lock_guard<std::mutex> l(mu_);
    CollectorStats& cs = stats_.collectors[i];
    ++cs.ticks;
    cs.samples += tick.samples.size() - before;
    cs.last_duration_seconds = seconds;
    std::string message = s.ok() ? "" : std::string(s.message());
    if (!s.ok()) ++cs.errors;
    // Log changes only: a lost GPU would otherwise print every second.
    if (message != cs.last_error) {
      std::fprintf(stderr, "vigil-agent: collector %s: %s\n", cs.name.c_str(),
                   s.ok() ? "reading again" : message.c_str());
    }
    cs.last_error = std::move(message);
  }
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.ticks;
  if (tick.job.empty()) tick.job = options_.idle_job;
  // The node's job changed without a collector saying why: the previous
  // one ended here as far as this node is concerned.
  if (!tick.job_end && !last_job_.empty() && last_job_ != options_.idle_job &&
      tick.job != last_job_) {
    tick.job_end = Tick::JobEnd{last_job_, last_step_, "job_changed"};
  }
  last_job_ = tick.job;
  last_verified_job_id_ = tick.verified_job_id;
  last_step_ = tick.step;
  return tick;
}

absl::Status CollectRunner::Send(Tick tick) {
  if (tick.samples.empty() && !tick.job_end) return absl::OkStatus();
  std::lock_guard<std::mutex> send_lock(send_mu_);
  v1::Frame frame;
  frame.set_job(std::move(tick.job));
  if (!tick.verified_job_id.empty())
    frame.set_verified_job_id(std::move(tick.verified_job_id));
  if (tick.step.has_value()) frame.set_step(*tick.step);
  frame.set_ts(tick.ts);
  if (tick.job_end) {
    v1::JobEnd* end = frame.mutable_job_end();
    end->set_job(tick.job_end->job);
    if (tick.job_end->step) end->set_step(*tick.job_end->step);
    end->set_reason(tick.job_end->reason);
  }
  frame.mutable_series_ids()->Reserve(tick.samples.size());
  frame.mutable_values()->Reserve(tick.samples.size());
  uint64_t refused = 0;
  for (Sample& s : tick.samples) {
    auto it = ids_.find(s.key);
    if (it == ids_.end()) {
      absl::StatusOr<uint32_t> id = client_->RegisterSeries(s.key);
      if (!id.ok()) {
        std::fprintf(stderr, "vigil-agent: series %s refused: %s\n",
                     s.key.ToString().c_str(),
                     std::string(id.status().message()).c_str());
      }
      it = ids_.emplace(std::move(s.key), id.ok() ? *id : kRefused).first;
    }
    if (it->second == kRefused) {
      ++refused;
      continue;
    }
    frame.add_series_ids(it->second);
    frame.add_values(s.value);
  }
  size_t series = ids_.size();
  if (frame.series_ids_size() == 0 && !frame.has_job_end()) {
    return absl::OkStatus();
  }
  std::vector<v1::Frame> frames;
  frames.push_back(std::move(frame));
  absl::StatusOr<uint64_t> seq = client_->Enqueue(std::move(frames));
  std::lock_guard<std::mutex> l(mu_);
  stats_.samples_refused += refused;
  stats_.series = series;
  if (!seq.ok()) return seq.status();
  last_seq_ = std::max(last_seq_, *seq);
  return absl::OkStatus();
}

void CollectRunner::Deliver(Tick event) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (event.job.empty()) {
      event.job = last_job_.empty() ? options_.idle_job : last_job_;
      event.verified_job_id = last_verified_job_id_;
    }
    if (!event.step.has_value()) event.step = last_step_;
    ++stats_.events;
  }
  if (client_ == nullptr) return;
  absl::Status s = Send(std::move(event));
  if (!s.ok()) {
    std::fprintf(stderr, "vigil-agent: event frame refused: %s\n",
                 std::string(s.message()).c_str());
  }
}

Tick CollectRunner::CollectNow(double ts) { return Collect(ts); }

absl::Status CollectRunner::Run() {
  StartCollectors();
  const double interval = options_.interval_seconds;
  double start = clock_->Now();
  double end = options_.duration_seconds > 0 ? start + options_.duration_seconds
                                             : INFINITY;
  double next = std::ceil(start / interval) * interval;
  double next_status = options_.status_every_seconds > 0
                           ? start + options_.status_every_seconds
                           : INFINITY;
  absl::Status result;
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    double now = clock_->Now();
    if (now >= end) break;
    if (now >= next_status) {
      StreamClientStats s = client_->stats();
      std::fprintf(stderr,
                   "vigil-agent: %zu series, sent %llu acked %llu pending %zu "
                   "dropped %llu reconnects %llu%s\n",
                   stats_.series,
                   static_cast<unsigned long long>(s.batches_sent),
                   static_cast<unsigned long long>(s.batches_acked),
                   s.pending_batches,
                   static_cast<unsigned long long>(s.batches_dropped),
                   static_cast<unsigned long long>(s.reconnects),
                   s.streaming ? "" : " (not connected)");
      next_status = now + options_.status_every_seconds;
    }
    if (now < next) {
      clock_->WaitUntil(l, cv_, std::min({next, end, next_status}));
      continue;
    }
    l.unlock();
    absl::Status s = Send(Collect(next));
    l.lock();
    if (!s.ok()) {
      result = s;
      break;
    }
    next += interval;
    // After a stall (suspended process, clock jump) resume on the grid
    // instead of replaying every missed tick at once.
    if (clock_->Now() >= next + interval) {
      next = std::ceil(clock_->Now() / interval) * interval;
    }
  }
  l.unlock();
  StopCollectors();
  return result;
}

void CollectRunner::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  stop_ = true;
  cv_.notify_all();
}

uint64_t CollectRunner::last_seq() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_seq_;
}

CollectRunnerStats CollectRunner::stats() const {
  CollectRunnerStats stats;
  {
    std::lock_guard<std::mutex> l(mu_);
    stats = stats_;
  }
  for (size_t i = 0; i < collectors_.size(); ++i) {
    stats.collectors[i].counters = collectors_[i]->HealthCounters();
  }
  return stats;
}

}  // namespace vigil::agent
