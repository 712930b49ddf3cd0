#include "server/ingest/remote_write_receiver.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "prometheus/remote_write.pb.h"
#include "snappy.h"

namespace vigil {
namespace {

// Prometheus marks a series that vanished with this NaN (model/value's
// StaleNaN): it ends the series, it is not a reading.
constexpr uint64_t kStaleNaNBits = 0x7ff0000000000002ull;

bool IsStaleMarker(double v) { return std::bit_cast<uint64_t>(v) == kStaleNaNBits; }

constexpr const char* kOutcomeNames[] = {
    "stored",   "unmapped",  "no_node", "bad_series", "agent_streams_node",
    "not_owner", "rejected", "dropped", "stale"};
static_assert(std::size(kOutcomeNames) ==
              static_cast<size_t>(RemoteWriteReceiver::Outcome::kCount));

// Problems quoted in one error answer at most.
constexpr size_t kMaxProblemsQuoted = 3;

// One sample of a request, for one node.
struct PendingSample {
  int64_t ts_ms;
  uint32_t key;    // index into NodePart::keys
  uint32_t job;    // index into NodePart::jobs; 0: none named
  double value;
};

// A request's samples of one node.
struct NodePart {
  std::vector<SeriesKey> keys;
  absl::flat_hash_map<std::string, uint32_t> key_index;  // encoded key -> index
  // Per key: the index of its changes counter's key, or UINT32_MAX.
  std::vector<uint32_t> counter_of;
  std::vector<std::string> jobs = {""};
  std::vector<PendingSample> samples;

  uint32_t KeyIndex(const SeriesKey& key) {
    auto [it, added] = key_index.try_emplace(EncodeSeriesKey(key), static_cast<uint32_t>(keys.size()));
    if (added) {
      keys.push_back(key);
      counter_of.push_back(UINT32_MAX);
    }
    return it->second;
  }
  uint32_t JobIndex(const std::string& job) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i] == job) return static_cast<uint32_t>(i);
    }
    jobs.push_back(job);
    return static_cast<uint32_t>(jobs.size() - 1);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteWriteReceiver>> RemoteWriteReceiver::Create(
    const RemoteWriteReceiverOptions& options, IngestService* ingest, Clock* clock) {
  absl::StatusOr<std::unique_ptr<promcompat::MetricMapper>> mapper =
      promcompat::MetricMapper::Create(options.mapping);
  if (!mapper.ok()) return mapper.status();
  if (absl::Status s = ValidateLabelValue("job", options.idle_job); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("idle_job: ", s.message()));
  if (!(options.frame_grace_seconds >= 0))
    return absl::InvalidArgumentError("frame_grace_seconds must be >= 0");
  return std::unique_ptr<RemoteWriteReceiver>(
      new RemoteWriteReceiver(options, *std::move(mapper), ingest, clock));
}

RemoteWriteReceiver::RemoteWriteReceiver(const RemoteWriteReceiverOptions& options,
                                         std::unique_ptr<promcompat::MetricMapper> mapper,
                                         IngestService* ingest, Clock* clock)
    : options_(options),
      mapper_(std::move(mapper)),
      ingest_(ingest),
      clock_(clock),
      assembler_(options.frame_grace_seconds, options.max_open_frames) {}

RemoteWriteReceiver::~RemoteWriteReceiver() { Stop(); }

void RemoteWriteReceiver::Start() {
  if (flusher_ != nullptr) return;
  flusher_ = std::make_unique<PeriodicThread>(
      clock_, 0.5, [this] { Flush(/*all=*/false); },
      [](const std::string& what) {
        std::fprintf(stderr, "vigil-server: remote-write receiver: %s\n", what.c_str());
      });
  flusher_->Start();
}

void RemoteWriteReceiver::Stop() {
  if (flusher_ != nullptr) flusher_->Stop();
  Flush(/*all=*/true);
}

void RemoteWriteReceiver::Flush(bool all) {
  std::lock_guard<std::mutex> serial(flush_mu_);
  std::vector<AssembledFrame> due;
  {
    std::lock_guard<std::mutex> l(assembler_mu_);
    if (all) {
      assembler_.TakeAll(&due);
    } else {
      assembler_.TakeDue(clock_->Now(), &due);
    }
  }
  if (due.empty()) return;
  // By node, each in time order (as the assembler gave them).
  absl::flat_hash_map<std::string, std::vector<AssembledFrame>> by_node;
  for (AssembledFrame& f : due) {
    std::string node = f.node;
    by_node[node].push_back(std::move(f));
  }
  for (auto& [node, frames] : by_node) {
    frames_delivered_.fetch_add(frames.size(), std::memory_order_relaxed);
    ingest_->DeliverLocal(node, std::move(frames), /*claimed_node=*/true);
  }
}

absl::Status RemoteWriteReceiver::Write(std::string_view content_encoding,
                                        std::string_view body) {
  auto fail = [this](absl::Status s) {
    requests_failed_.fetch_add(1, std::memory_order_relaxed);
    return s;
  };
  if (content_encoding != "snappy")
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "Content-Encoding must be \"snappy\" (Prometheus remote write 1.0), got \"",
        std::string(content_encoding), "\"")));
  size_t decoded_size = 0;
  if (!snappy::GetUncompressedLength(body.data(), body.size(), &decoded_size))
    return fail(absl::InvalidArgumentError("body is not snappy-compressed"));
  if (decoded_size > options_.max_decoded_bytes)
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("body decompresses to ", decoded_size, " bytes, more than the ",
                     options_.max_decoded_bytes, " allowed (max_decoded_bytes)")));
  std::string decoded;
  if (!snappy::Uncompress(body.data(), body.size(), &decoded))
    return fail(absl::InvalidArgumentError("body is not valid snappy data"));
  prometheus::WriteRequest request;
  if (!request.ParseFromString(decoded))
    return fail(absl::InvalidArgumentError(
        "body is not a remote-write WriteRequest (protobuf does not parse; label names and "
        "values must be UTF-8)"));

  std::vector<std::string> problems;
  absl::flat_hash_map<std::string, NodePart> parts;
  std::vector<std::pair<std::string_view, std::string_view>> labels;
  promcompat::MappedSeries mapped;
  std::string why;
  for (const prometheus::TimeSeries& series : request.timeseries()) {
    labels.clear();
    std::string_view name;
    for (const prometheus::Label& label : series.labels()) {
      if (label.name() == "__name__") name = label.value();
      labels.emplace_back(label.name(), label.value());
    }
    const uint64_t n = series.samples_size();
    switch (mapper_->Map(name, labels, &mapped, &why)) {
      case promcompat::MetricMapper::Outcome::kMapped:
        break;
      case promcompat::MetricMapper::Outcome::kUnmapped:
        Count(Outcome::kUnmapped, n);
        continue;
      case promcompat::MetricMapper::Outcome::kNoNode:
        Count(Outcome::kNoNode, n);
        continue;
      case promcompat::MetricMapper::Outcome::kBadSeries:
        Count(Outcome::kBadSeries, n);
        problems.push_back(absl::StrCat("series ", std::string(name), ": ", why));
        continue;
    }
    NodePart& part = parts[mapped.node];
    const uint32_t key = part.KeyIndex(mapped.key);
    if (!mapped.changes_counter.empty() && part.counter_of[key] == UINT32_MAX) {
      SeriesKey counter{std::string(mapped.changes_counter), mapped.key.labels};
      const uint32_t index = part.KeyIndex(counter);
      part.counter_of[key] = index;
    }
    const uint32_t job = mapped.job.empty() ? 0 : part.JobIndex(mapped.job);
    for (const prometheus::Sample& s : series.samples()) {
      if (IsStaleMarker(s.value())) {
        Count(Outcome::kStale, 1);
        continue;
      }
      part.samples.push_back(PendingSample{s.timestamp(), key, job, s.value() * mapped.scale});
    }
  }

  const double now = clock_->Now();
  for (auto& [node, part] : parts) {
    std::stable_sort(part.samples.begin(), part.samples.end(),
                     [](const PendingSample& a, const PendingSample& b) { return a.ts_ms < b.ts_ms; });
    std::vector<IngestService::LocalFrame> frames;
    uint64_t samples = 0;
    {
      std::lock_guard<std::mutex> l(nodes_mu_);
      NodeState& state = nodes_[node];
      for (size_t begin = 0; begin < part.samples.size();) {
        size_t end = begin;
        uint32_t named = 0;
        while (end < part.samples.size() && part.samples[end].ts_ms == part.samples[begin].ts_ms) {
          if (named == 0) named = part.samples[end].job;
          ++end;
        }
        const double ts = part.samples[begin].ts_ms / 1000.0;
        IngestService::LocalFrame frame;
        frame.ts = ts;
        if (named != 0) {
          frame.job = part.jobs[named];
          if (ts >= state.job_ts) {
            state.job = frame.job;
            state.job_ts = ts;
          }
        } else if (!state.job.empty() && ts - state.job_ts <= options_.job_memory_seconds) {
          frame.job = state.job;
        } else {
          frame.job = options_.idle_job;
        }
        // A piece older than the node's latest frame changes nothing.
        if (ts >= state.last_ts) {
          if (!state.last_job.empty() && state.last_job != frame.job &&
              state.last_job != options_.idle_job) {
            frame.ended_job = state.last_job;
            frame.end_reason = "job_changed";
          }
          state.last_job = frame.job;
          state.last_ts = ts;
        }
        for (size_t i = begin; i < end; ++i) {
          const PendingSample& s = part.samples[i];
          if (s.job != 0 && s.job != named) {
            Count(Outcome::kDropped, 1);  // a second job on one node at once
            continue;
          }
          frame.slots.push_back(s.key);
          frame.values.push_back(s.value);
          if (const uint32_t counter = part.counter_of[s.key]; counter != UINT32_MAX) {
            frame.slots.push_back(counter);
            frame.values.push_back(
                state.changes.Observe(EncodeSeriesKey(part.keys[s.key]), s.value));
          }
        }
        samples += frame.slots.size();
        frames.push_back(std::move(frame));
        begin = end;
      }
    }
    IngestService::LocalResult result;
    const absl::Status s =
        ingest_->ApplyLocal(kSource, node, part.keys, frames, &result);
    if (absl::IsAlreadyExists(s)) {
      Count(Outcome::kAgentStreamsNode, samples);
      continue;
    }
    if (absl::IsFailedPrecondition(s)) {
      Count(Outcome::kNotOwner, samples);
      continue;
    }
    if (absl::IsInvalidArgument(s)) {
      Count(Outcome::kRejected, samples);
      problems.push_back(absl::StrCat("node ", node, ": ", s.message()));
      continue;
    }
    if (!s.ok()) return fail(s);
    Count(Outcome::kDropped, result.dropped_samples);
    Count(Outcome::kStored, samples - std::min<uint64_t>(samples, result.dropped_samples));
    std::lock_guard<std::mutex> l(assembler_mu_);
    for (size_t i = 0; i < frames.size(); ++i) {
      AssembledFrame piece;
      piece.node = node;
      piece.job = std::move(frames[i].job);
      piece.ts = frames[i].ts;
      piece.ids = std::move(result.ids[i]);
      piece.values = std::move(result.values[i]);
      piece.ended_job = std::move(frames[i].ended_job);
      piece.end_reason = std::move(frames[i].end_reason);
      if (assembler_.Add(std::move(piece), now) != FrameAssembler::Added::kAdded)
        pieces_late_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (problems.empty()) {
    requests_ok_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  const size_t n = problems.size();
  if (n > kMaxProblemsQuoted) problems.resize(kMaxProblemsQuoted);
  return fail(absl::InvalidArgumentError(
      absl::StrCat(n, " problem", n == 1 ? "" : "s", " (the rest of the request was stored): ",
                   absl::StrJoin(problems, "; "), n > kMaxProblemsQuoted ? "; ..." : "")));
}

std::string RemoteWriteReceiver::MetricsText() const {
  std::string out;
  absl::StrAppend(&out,
                  "# HELP vigil_remote_write_receiver_requests_total Remote-write requests "
                  "received, by result.\n"
                  "# TYPE vigil_remote_write_receiver_requests_total counter\n",
                  "vigil_remote_write_receiver_requests_total{result=\"ok\"} ",
                  requests_ok_.load(), "\n",
                  "vigil_remote_write_receiver_requests_total{result=\"error\"} ",
                  requests_failed_.load(), "\n");
  absl::StrAppend(&out,
                  "# HELP vigil_remote_write_receiver_samples_total Remote-written samples, by "
                  "what became of them.\n"
                  "# TYPE vigil_remote_write_receiver_samples_total counter\n");
  for (size_t i = 0; i < counts_.size(); ++i) {
    absl::StrAppend(&out, "vigil_remote_write_receiver_samples_total{outcome=\"",
                    kOutcomeNames[i], "\"} ", counts_[i].load(), "\n");
  }
  size_t open = 0;
  {
    std::lock_guard<std::mutex> l(assembler_mu_);
    open = assembler_.open_frames();
  }
  absl::StrAppend(
      &out,
      "# HELP vigil_remote_write_receiver_frames_total Whole frames handed to detection.\n"
      "# TYPE vigil_remote_write_receiver_frames_total counter\n"
      "vigil_remote_write_receiver_frames_total ",
      frames_delivered_.load(), "\n",
      "# HELP vigil_remote_write_receiver_late_pieces_total Pieces of frames that came after "
      "their frame went to detection (stored, not detected on).\n"
      "# TYPE vigil_remote_write_receiver_late_pieces_total counter\n"
      "vigil_remote_write_receiver_late_pieces_total ",
      pieces_late_.load(), "\n",
      "# HELP vigil_remote_write_receiver_open_frames Frames waiting for their pieces.\n"
      "# TYPE vigil_remote_write_receiver_open_frames gauge\n"
      "vigil_remote_write_receiver_open_frames ",
      open, "\n");
  return out;
}

}  // namespace vigil
