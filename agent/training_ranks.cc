#include "agent/training_ranks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <variant>
#include <vector>

namespace vigil::agent {
namespace {

// Folds the values of several ranks into one, propagating NaN.
class Fold {
 public:
  enum Kind { kMean, kSum, kMax, kMin };
  explicit Fold(Kind kind) : kind_(kind) {}
  void Add(const std::optional<double>& v) {
    if (!v) return;
    const double x = *v;
    if (n_++ == 0) {
      acc_ = x;
    } else if (kind_ == kMean || kind_ == kSum) {
      acc_ += x;
    } else if (std::isnan(x) || std::isnan(acc_)) {
      acc_ = std::numeric_limits<double>::quiet_NaN();
    } else {
      acc_ = kind_ == kMax ? std::max(acc_, x) : std::min(acc_, x);
    }
  }
  // Appends the result as `metric` to `tick` if any rank had a value.
  void Emit(Tick* tick, const char* metric, std::vector<Label> labels = {}) {
    if (n_ == 0) return;
    tick->Add(metric, std::move(labels), kind_ == kMean ? acc_ / n_ : acc_);
  }

 private:
  Kind kind_;
  int n_ = 0;
  double acc_ = 0;
};

}  // namespace

TrainingRanks::TrainingRanks(TrainingRanksOptions options)
    : options_(std::move(options)) {}

TrainingRanks::Rank* TrainingRanks::Touch(const HelloMessage& hello,
                                          double now) {
  RankKey key{hello.job, hello.rank};
  auto it = ranks_.find(key);
  if (it == ranks_.end()) {
    if (ranks_.size() >= options_.max_ranks) DropStale(now);
    if (ranks_.size() >= options_.max_ranks) return nullptr;
    it = ranks_.emplace(std::move(key), Rank{}).first;
  }
  Rank& rank = it->second;
  if (rank.verified_job_id != hello.verified_job_id) {
    // Another process's rank under the same name: start it afresh.
    const int connections = rank.connections;
    rank = Rank{};
    rank.connections = connections;
    rank.verified_job_id = hello.verified_job_id;
  }
  rank.gpu = std::to_string(hello.gpu          ? *hello.gpu
                            : hello.local_rank ? *hello.local_rank
                                               : hello.rank);
  rank.last_heard = now;
  return &rank;
}

absl::Status TrainingRanks::Apply(const TrainingMessage& message, double now,
                                  std::optional<HelloMessage>* hello,
                                  std::optional<Tick>* event) {
  if (const auto* h = std::get_if<HelloMessage>(&message)) {
    HelloMessage named = *h;
    if (named.job.empty()) named.job = options_.default_job;
    if (named.verified_job_id.empty()) {
      if (HasVerifiedRank(named.job))
        return absl::PermissionDeniedError(
            "job '" + named.job +
            "' runs on this node as a scheduler job this process is not "
            "part of");
    } else {
      // Claims made before the job was verified, or by someone outside it,
      // no longer speak for it.
      std::erase_if(ranks_, [&](const auto& entry) {
        return entry.first.first == named.job &&
               entry.second.verified_job_id.empty() &&
               entry.first.second != named.rank;
      });
    }
    Rank* rank = Touch(named, now);
    if (rank == nullptr)
      return absl::ResourceExhaustedError("too many ranks on this node");
    // The connection now stands for this rank (and no longer for the one
    // an earlier hello named).
    ++rank->connections;
    if (hello->has_value()) Disconnected(**hello, now);
    *hello = std::move(named);
    return absl::OkStatus();
  }
  if (!hello->has_value())
    return absl::FailedPreconditionError(
        R"(no hello on this connection yet: send {"type":"hello",...} first)");
  const HelloMessage& who = **hello;
  if (who.verified_job_id.empty() && HasVerifiedRank(who.job))
    return absl::PermissionDeniedError(
        "job '" + who.job +
        "' runs on this node as a scheduler job this process is not part of");
  Rank* rank = Touch(who, now);
  if (rank == nullptr)
    return absl::ResourceExhaustedError("too many ranks on this node");
  if (const auto* step = std::get_if<StepMessage>(&message)) {
    rank->step = *step;
    std::pair<std::string, int64_t> job_step{who.job, step->step};
    if (step->loss && !std::isfinite(*step->loss) &&
        last_nan_event_ != job_step) {
      last_nan_event_ = std::move(job_step);
      Tick tick;
      tick.ts = now;
      tick.job = who.job;
      tick.verified_job_id = rank->verified_job_id;
      tick.step = step->step;
      tick.Add("train_loss", {}, *step->loss);
      *event = std::move(tick);
    }
    return absl::OkStatus();
  }
  const PhaseMarker marker = std::get<PhaseMessage>(message).marker;
  rank->phase_seen = true;
  switch (marker) {
    case PhaseMarker::kCheckpointStart:
    case PhaseMarker::kCheckpointEnd:
      rank->checkpoint = marker == PhaseMarker::kCheckpointStart;
      break;
    case PhaseMarker::kEvalStart:
    case PhaseMarker::kEvalEnd:
      rank->eval = marker == PhaseMarker::kEvalStart;
      break;
  }
  return absl::OkStatus();
}

void TrainingRanks::Disconnected(const HelloMessage& hello, double now) {
  auto it = ranks_.find(RankKey{hello.job, hello.rank});
  if (it == ranks_.end() || it->second.connections <= 0) return;
  if (--it->second.connections == 0) it->second.disconnected_at = now;
}

bool TrainingRanks::HasVerifiedRank(const std::string& job) const {
  for (auto it = ranks_.lower_bound(RankKey{job, std::numeric_limits<int64_t>::min()});
       it != ranks_.end() && it->first.first == job; ++it) {
    if (!it->second.verified_job_id.empty()) return true;
  }
  return false;
}

void TrainingRanks::DropStale(double now) {
  std::erase_if(ranks_, [&](const auto& entry) {
    const Rank& r = entry.second;
    const bool exited =
        r.connections == 0 && r.disconnected_at > 0 &&
        now - r.disconnected_at > options_.disconnect_grace_seconds;
    const bool stale = now - r.last_heard > options_.staleness_seconds;
    if (exited || stale) {
      last_drop_reason_ = exited ? "ranks_exited" : "ranks_stale";
    }
    return exited || stale;
  });
}

void TrainingRanks::Collect(double now, Tick* tick) {
  DropStale(now);
  const std::string* job = nullptr;
  double newest = -std::numeric_limits<double>::infinity();
  for (const auto& [key, rank] : ranks_) {
    if (rank.last_heard > newest) {
      newest = rank.last_heard;
      job = &key.first;
    }
  }
  const auto end_reported = [&](const std::string* now_job) {
    // The job reported last time has no live rank any more: it ended here.
    const bool gone =
        !reported_job_.empty() &&
        (now_job == nullptr || *now_job != reported_job_) &&
        std::none_of(ranks_.begin(), ranks_.end(), [&](const auto& e) {
          return e.first.first == reported_job_;
        });
    if (gone) {
      tick->job_end = Tick::JobEnd{reported_job_, reported_step_,
                                   last_drop_reason_.empty()
                                       ? std::string("ranks_exited")
                                       : last_drop_reason_};
    }
    reported_job_ = now_job != nullptr ? *now_job : std::string();
    reported_step_.reset();
  };
  if (job == nullptr) {
    end_reported(nullptr);
    if (!options_.default_job.empty()) tick->job = options_.default_job;
    return;
  }
  end_reported(job);
  if (!job->empty()) tick->job = *job;

  Fold loss(Fold::kMean), grad_norm(Fold::kMean), mfu(Fold::kMean),
      tokens(Fold::kSum), step_time(Fold::kMax), data_wait(Fold::kMax),
      loss_scale(Fold::kMin);
  struct Torch {
    Fold reserved{Fold::kSum}, allocated{Fold::kSum}, retries{Fold::kSum};
  };
  std::map<std::string, Torch> torch;  // by gpu label
  bool phase_seen = false, checkpoint = false, eval = false;
  std::optional<std::string> verified;  // common id of the job's ranks
  for (const auto& [key, rank] : ranks_) {
    if (key.first != *job) continue;
    if (!verified) {
      verified = rank.verified_job_id;
    } else if (*verified != rank.verified_job_id) {
      verified = std::string();
    }
    phase_seen |= rank.phase_seen;
    checkpoint |= rank.checkpoint;
    eval |= rank.eval;
    if (!rank.step) continue;
    const StepMessage& s = *rank.step;
    if (!tick->step || s.step > *tick->step) tick->step = s.step;
    loss.Add(s.loss);
    grad_norm.Add(s.grad_norm);
    mfu.Add(s.mfu_ratio);
    tokens.Add(s.tokens_per_second);
    step_time.Add(s.step_time_seconds);
    data_wait.Add(s.dataloader_wait_seconds);
    loss_scale.Add(s.loss_scale);
    Torch& t = torch[rank.gpu];
    t.reserved.Add(s.torch_reserved_bytes);
    t.allocated.Add(s.torch_allocated_bytes);
    t.retries.Add(s.torch_alloc_retries_total);
  }
  reported_step_ = tick->step;
  if (verified) tick->verified_job_id = *verified;
  loss.Emit(tick, "train_loss");
  grad_norm.Emit(tick, "train_grad_norm");
  tokens.Emit(tick, "train_tokens_per_second");
  step_time.Emit(tick, "train_step_time_seconds");
  data_wait.Emit(tick, "train_dataloader_wait_seconds");
  mfu.Emit(tick, "train_mfu_ratio");
  loss_scale.Emit(tick, "train_loss_scale");
  if (phase_seen) tick->Add("train_phase", {}, checkpoint ? 1 : eval ? 2 : 0);
  for (auto& [gpu, t] : torch) {
    t.reserved.Emit(tick, "torch_reserved_bytes", {{"gpu", gpu}});
    t.allocated.Emit(tick, "torch_allocated_bytes", {{"gpu", gpu}});
    t.retries.Emit(tick, "torch_alloc_retries_total", {{"gpu", gpu}});
  }
}

}  // namespace vigil::agent
