#include "agent/pair_streamer.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace vigil::agent {

absl::StatusOr<std::unique_ptr<PairStreamer>> PairStreamer::Create(
    StreamClientOptions options, std::unique_ptr<BatchQueue> queue, double rehome_seconds) {
  std::unique_ptr<PairStreamer> pair(new PairStreamer());
  PairStreamer* self = pair.get();
  pair->seeds_ = absl::StrSplit(options.server, ',', absl::SkipEmpty());
  if (pair->seeds_.empty()) return absl::InvalidArgumentError("server and node are required");
  options.server = pair->seeds_.front();
  pair->rehome_seconds_ = rehome_seconds;
  options.on_owners = [self](const std::vector<std::string>& owners) { self->OnOwners(owners); };
  pair->clock_ = options.clock;
  absl::StatusOr<std::unique_ptr<StreamClient>> first =
      StreamClient::Create(options, std::move(queue));
  if (!first.ok()) return first.status();
  StreamClientOptions second_options = options;
  second_options.server.clear();  // idle until a server names the pair
  if (second_options.seed != 0) second_options.seed += 1;
  absl::StatusOr<std::unique_ptr<StreamClient>> second =
      StreamClient::Create(std::move(second_options));
  if (!second.ok()) return second.status();
  pair->streams_[0] = std::move(*first);
  pair->streams_[1] = std::move(*second);
  return pair;
}

PairStreamer::~PairStreamer() { Stop(); }

void PairStreamer::Start() {
  for (auto& stream : streams_) stream->Start();
  last_progress_ = clock_->Now();
  rehome_ = std::make_unique<PeriodicThread>(
      clock_, 1.0, [this] { CheckProgress(); },
      [](const std::string& what) {
        std::fprintf(stderr, "vigil-agent: re-homing check failed: %s\n", what.c_str());
      });
  rehome_->Start();
}

void PairStreamer::CheckProgress() {
  const double now = clock_->Now();
  last_progress_ = std::max(last_progress_, stats().last_ack_time);
  if (now - last_progress_ < rehome_seconds_) return;
  if (seeds_.size() == 1 && streams_[0]->server() == seeds_[0]) return;  // nowhere else
  const std::string seed = seeds_[next_seed_++ % seeds_.size()];
  std::fprintf(stderr,
               "vigil-agent: no server acknowledged for %.0f s; asking %s who owns this "
               "node's job\n",
               now - last_progress_, seed.c_str());
  {
    std::lock_guard<std::mutex> moving(move_mu_);
    streams_[0]->Retarget(seed);
  }
  last_progress_ = now;  // give it a full period
}

void PairStreamer::Stop() {
  if (rehome_ != nullptr) rehome_->Stop();
  for (auto& stream : streams_) {
    if (stream != nullptr) stream->Stop();
  }
}

absl::StatusOr<uint32_t> PairStreamer::RegisterSeries(SeriesKey key) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<uint32_t> id = streams_[0]->RegisterSeries(key);
  if (!id.ok()) return id;
  keys_.try_emplace(*id, std::move(key));
  return id;
}

absl::StatusOr<uint64_t> PairStreamer::Enqueue(std::vector<v1::Frame> frames) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool to_first = !streams_[0]->server().empty();
  const bool to_second = !streams_[1]->server().empty();
  absl::StatusOr<uint64_t> seq = absl::FailedPreconditionError("no stream has a server");
  if (to_second) {
    // Same frames in the second stream's ids; every id was checked by
    // RegisterSeries, so an unknown one is the first stream's error to give.
    std::vector<v1::Frame> copy = frames;
    bool complete = true;
    for (v1::Frame& frame : copy) {
      for (int i = 0; i < frame.series_ids_size() && complete; ++i) {
        const uint32_t first_id = frame.series_ids(i);
        auto known = second_ids_.find(first_id);
        if (known == second_ids_.end()) {
          auto key = keys_.find(first_id);
          if (key == keys_.end()) {
            complete = false;
            break;
          }
          absl::StatusOr<uint32_t> id = streams_[1]->RegisterSeries(key->second);
          if (!id.ok()) {
            complete = false;
            break;
          }
          known = second_ids_.emplace(first_id, *id).first;
        }
        frame.set_series_ids(i, known->second);
      }
    }
    if (complete) seq = streams_[1]->Enqueue(std::move(copy));
  }
  if (to_first || !to_second) seq = streams_[0]->Enqueue(std::move(frames));
  return seq;
}

StreamClientStats PairStreamer::stats() const {
  StreamClientStats out = streams_[0]->stats();
  const StreamClientStats second = streams_[1]->stats();
  out.last_ack_time = std::max(out.last_ack_time, second.last_ack_time);
  out.streaming = out.streaming || second.streaming;
  out.redirects += second.redirects;
  out.batches_handed_over += second.batches_handed_over;
  return out;
}

bool PairStreamer::Flush(double deadline) {
  bool flushed = true;
  for (auto& stream : streams_) {
    if (stream->server().empty()) continue;
    flushed = stream->WaitForAcked(stream->stats().last_seq, deadline) && flushed;
  }
  return flushed;
}

std::array<std::string, 2> PairStreamer::targets() const {
  return {streams_[0]->server(), streams_[1]->server()};
}

void PairStreamer::OnOwners(const std::vector<std::string>& owners) {
  if (owners.empty()) return;
  std::lock_guard<std::mutex> moving(move_mu_);
  const std::array<std::string, 2> now = targets();
  std::array<bool, 2> keep{};
  std::vector<std::string> free;
  for (const std::string& owner : owners) {
    if (owner == now[0] && !keep[0]) {
      keep[0] = true;
    } else if (owner == now[1] && !keep[1]) {
      keep[1] = true;
    } else if (std::find(free.begin(), free.end(), owner) == free.end()) {
      free.push_back(owner);
    }
  }
  const bool moved_whole = !keep[0] && !keep[1];
  std::array<std::string, 2> next = now;
  for (int i = 0; i < 2; ++i) {
    if (keep[i]) continue;
    if (!free.empty()) {
      next[i] = free.front();
      free.erase(free.begin());
      // Batches not yet acknowledged go to the new server.
      streams_[i]->Retarget(next[i]);
    } else {
      next[i].clear();
      // The other stream is on the only owner left and carries them.
      streams_[i]->Retarget("", /*drop_pending=*/!moved_whole);
    }
  }
  if (next != now) {
    std::fprintf(stderr, "vigil-agent: streaming to %s (owners of this node's job: %s)\n",
                 absl::StrJoin(next, " and ").c_str(), absl::StrJoin(owners, ", ").c_str());
  }
}

}  // namespace vigil::agent
