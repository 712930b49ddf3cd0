#include "agent/stream_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace vigil::agent {
namespace {

using BatchStream = grpc::ClientReaderWriter<v1::FrameBatch, v1::Ack>;

void Log(const std::string& line) {
  std::fprintf(stderr, "vigil-agent: %s\n", line.c_str());
}

// Bytes a frame adds to a batch: the frame plus its tag and length prefix.
size_t FrameBytes(const v1::Frame& f) { return f.ByteSizeLong() + 6; }

// Splits a frame bigger than `max_bytes` into frames of the same job, step
// and time, each with a slice of its samples.
std::vector<v1::Frame> SplitFrame(v1::Frame frame, size_t max_bytes) {
  std::vector<v1::Frame> out;
  if (FrameBytes(frame) <= max_bytes) {
    out.push_back(std::move(frame));
    return out;
  }
  // A sample costs at most 5 bytes of varint id and 8 of value.
  size_t header = frame.job().size() + frame.verified_job_id().size() + 64;
  size_t per_frame =
      std::max<size_t>(1, (max_bytes > header ? max_bytes - header : 0) / 13);
  int n = frame.series_ids_size();
  for (int begin = 0; begin < n; begin += static_cast<int>(per_frame)) {
    int end = std::min(n, begin + static_cast<int>(per_frame));
    v1::Frame part;
    part.set_job(frame.job());
    part.set_verified_job_id(frame.verified_job_id());
    if (frame.has_step()) part.set_step(frame.step());
    part.set_ts(frame.ts());
    part.mutable_series_ids()->Add(frame.series_ids().begin() + begin,
                                   frame.series_ids().begin() + end);
    part.mutable_values()->Add(frame.values().begin() + begin,
                               frame.values().begin() + end);
    out.push_back(std::move(part));
  }
  return out;
}

}  // namespace

void SetIngestChannelArguments(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args->SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
}

// One open Ingest.Stream and what owns it.
struct StreamClient::Stream {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Ingest::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<BatchStream> rw;
  bool acked = false;  // guarded by the client's mu_
};

absl::StatusOr<std::unique_ptr<StreamClient>> StreamClient::Create(
    StreamClientOptions options, std::unique_ptr<BatchQueue> queue) {
  if ((options.server.empty() && options.on_owners == nullptr) || options.node.empty()) {
    return absl::InvalidArgumentError("server and node are required");
  }
  if (options.security == nullptr) {
    return absl::InvalidArgumentError(
        "security is required: TransportSecurity::Create, with insecure set "
        "for plaintext");
  }
  if (options.max_pending_bytes == 0 || options.max_batch_bytes == 0 ||
      options.max_dictionary_bytes == 0 || options.clock == nullptr ||
      !(options.initial_backoff_seconds > 0) ||
      !(options.max_backoff_seconds >= options.initial_backoff_seconds) ||
      !(options.ack_timeout_seconds > 0)) {
    return absl::InvalidArgumentError(
        "bounds, backoffs and ack timeout must be positive, max backoff >= "
        "initial backoff, and a clock given");
  }
  if (queue == nullptr) {
    queue = std::make_unique<MemoryBatchQueue>(options.max_pending_bytes);
  }
  return std::unique_ptr<StreamClient>(
      new StreamClient(std::move(options), std::move(queue)));
}

StreamClient::StreamClient(StreamClientOptions options,
                           std::unique_ptr<BatchQueue> queue)
    : options_(std::move(options)),
      queue_(std::move(queue)),
      server_(options_.server),
      backoff_(options_.initial_backoff_seconds) {
  dropped_before_start_ = queue_->dropped();
  // Batches an earlier process left in a spool keep their meaning: take
  // over their dictionary (same ids) and continue after their seqs.
  for (v1::SeriesDef& def : queue_->LeftSeries()) {
    SeriesKey key{def.metric(), {}};
    for (const v1::Label& l : def.labels()) {
      key.labels.emplace_back(l.name(), l.value());
    }
    dictionary_bytes_ += def.ByteSizeLong() + 6;
    series_ids_.emplace(std::move(key), def.id());
    dictionary_.push_back(std::move(def));
  }
  next_seq_ = queue_->newest_seq() + 1;
  uint64_t seed = options_.seed;
  if (seed == 0) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  rng_.seed(seed);
  instance_ = absl::StrFormat("%016x", rng_());
}

StreamClient::~StreamClient() { Stop(); }

absl::StatusOr<uint32_t> StreamClient::RegisterSeries(SeriesKey key) {
  absl::Status s = NormalizeSeriesKey(&key);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> l(mu_);
  auto it = series_ids_.find(key);
  if (it != series_ids_.end()) return it->second;
  v1::SeriesDef def;
  def.set_id(static_cast<uint32_t>(dictionary_.size()));
  def.set_metric(key.metric);
  for (const Label& label : key.labels) {
    v1::Label* l = def.add_labels();
    l->set_name(label.first);
    l->set_value(label.second);
  }
  size_t bytes = def.ByteSizeLong() + 6;
  if (dictionary_bytes_ + bytes > options_.max_dictionary_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("series dictionary full (", dictionary_.size(),
                     " series); cannot add ", key.ToString()));
  }
  if (absl::Status kept = queue_->KeepSeries(def); !kept.ok()) return kept;
  dictionary_bytes_ += bytes;
  series_ids_.emplace(std::move(key), def.id());
  dictionary_.push_back(std::move(def));
  return dictionary_.back().id();
}

absl::StatusOr<uint64_t> StreamClient::Enqueue(std::vector<v1::Frame> frames) {
  if (frames.empty()) return absl::InvalidArgumentError("no frames");
  size_t known;
  {
    std::lock_guard<std::mutex> l(mu_);
    known = dictionary_.size();  // append-only: a later size only grows
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    const v1::Frame& f = frames[i];
    if (f.series_ids_size() != f.values_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("frame ", i, ": ", f.series_ids_size(),
                       " series ids but ", f.values_size(), " values"));
    }
    for (uint32_t id : f.series_ids()) {
      if (id >= known) {
        return absl::InvalidArgumentError(
            absl::StrCat("frame ", i, ": unregistered series id ", id));
      }
    }
  }
  // Cut into batches of at most max_batch_bytes of frames.
  std::vector<v1::FrameBatch> batches(1);
  size_t bytes = 0;
  for (v1::Frame& frame : frames) {
    for (v1::Frame& part :
         SplitFrame(std::move(frame), options_.max_batch_bytes)) {
      size_t n = FrameBytes(part);
      if (bytes > 0 && bytes + n > options_.max_batch_bytes) {
        batches.emplace_back();
        bytes = 0;
      }
      bytes += n;
      *batches.back().add_frames() = std::move(part);
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  for (v1::FrameBatch& batch : batches) {
    batch.set_seq(next_seq_++);
    absl::Status s =
        queue_->Push(std::make_shared<const v1::FrameBatch>(std::move(batch)));
    if (!s.ok()) return s;
    ++stats_.batches_enqueued;
  }
  cv_.notify_all();
  return next_seq_ - 1;
}

void StreamClient::Start() {
  thread_ = std::thread([this] { Run(); });
}

bool StreamClient::WaitForAcked(uint64_t seq, double deadline) {
  std::unique_lock<std::mutex> l(mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::shared_ptr<const v1::FrameBatch> head = queue_->NextAfter(0);
    return head == nullptr || head->seq() > seq;
  };
  while (!done()) {
    if (options_.clock->Now() >= deadline) return false;
    options_.clock->WaitUntil(l, cv_, deadline);
  }
  return true;
}

void StreamClient::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void StreamClient::Retarget(const std::string& server, bool drop_pending) {
  std::lock_guard<std::mutex> l(mu_);
  if (drop_pending) stats_.batches_handed_over += queue_->RemoveUpTo(next_seq_ - 1);
  if (server == server_) return;
  server_ = server;
  retargeted_ = true;
  owners_seen_.clear();
  if (context_ != nullptr) context_->TryCancel();
  cv_.notify_all();
}

std::string StreamClient::server() const {
  std::lock_guard<std::mutex> l(mu_);
  return server_;
}

StreamClientStats StreamClient::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  StreamClientStats s = stats_;
  s.last_seq = next_seq_ - 1;
  s.pending_batches = queue_->size();
  s.pending_bytes = queue_->bytes();
  s.batches_dropped = queue_->dropped() - dropped_before_start_;
  return s;
}

void StreamClient::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (server_.empty()) {  // idle until Retarget
      cv_.wait(l, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !server_.empty();
      });
      continue;
    }
    if (stats_.streams_opened++ > 0) ++stats_.reconnects;
    retargeted_ = false;
    l.unlock();
    int code;
    std::string message;
    bool acked;
    std::vector<std::string> owners;
    RunStream(&code, &message, &acked, &owners);
    l.lock();
    stats_.streaming = false;
    if (stop_) break;
    double deadline = options_.clock->Now() + AfterStream(code, message, acked, owners);
    if (!owners.empty()) {
      if (options_.on_owners != nullptr) {
        l.unlock();
        options_.on_owners(owners);
        l.lock();
      } else if (owners.front() != server_) {
        server_ = owners.front();
      }
    }
    while (!stop_ && !retargeted_ && options_.clock->Now() < deadline) {
      options_.clock->WaitUntil(l, cv_, deadline);
    }
  }
}

double StreamClient::AfterStream(int code, const std::string& message,
                                 bool acked, const std::vector<std::string>& owners) {
  if (retargeted_) {
    Log(absl::StrCat("moving the stream to ", server_.empty() ? "nowhere (idle)" : server_));
    backoff_ = options_.initial_backoff_seconds;
    return 0;
  }
  if (code == grpc::StatusCode::FAILED_PRECONDITION && !owners.empty()) {
    ++stats_.redirects;
    Log(absl::StrCat("server ", server_, " does not own this node's job (", message,
                     "); its owners: ", absl::StrJoin(owners, ", ")));
    // Not at once: while a map change spreads, two servers may send the
    // agent to each other for a poll or so.
    backoff_ = options_.initial_backoff_seconds;
    return backoff_;
  }
  if (acked) backoff_ = options_.initial_backoff_seconds;
  double wait =
      backoff_ * (0.8 + 0.4 * std::uniform_real_distribution<>()(rng_));
  backoff_ = std::min(options_.max_backoff_seconds, backoff_ * 2);
  stats_.backoff_seconds = wait;
  std::string retry = absl::StrFormat("; reconnecting in %.1fs", wait);
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED: {
      // The server rejects the first bad batch after acking those before
      // it, so the oldest unacknowledged batch that was sent is the bad one.
      std::shared_ptr<const v1::FrameBatch> head = queue_->NextAfter(0);
      if (head != nullptr && head->seq() <= sent_through_) {
        queue_->PopFront();
        ++stats_.batches_rejected;
        Log(absl::StrCat("server rejected batch seq=", head->seq(), " (",
                         head->frames_size(), " frames): ", message,
                         "; batch dropped", retry));
      } else {
        Log(absl::StrCat("server rejected the stream: ", message, retry));
      }
      break;
    }
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      ++stats_.unauthorized;
      Log(absl::StrCat("server ", server_, " refused node '",
                       options_.node, "': ", message,
                       " (check the node token and client certificate)",
                       retry));
      break;
    case grpc::StatusCode::ALREADY_EXISTS:
      ++stats_.already_exists;
      Log(absl::StrCat("another agent instance holds node '", options_.node,
                       "' on ", server_, " (", message, ")", retry));
      break;
    default:
      // A transport that does not match the server's (plaintext against
      // TLS, an untrusted CA) shows only as UNAVAILABLE: say which was used.
      Log(absl::StrCat("stream to ", server_, " ended (code ", code,
                       ": ", message, ")",
                       code == grpc::StatusCode::UNAVAILABLE
                           ? absl::StrCat("; transport ",
                                          options_.security->Describe())
                           : "",
                       retry));
  }
  return wait;
}

void StreamClient::RunStream(int* code, std::string* message, bool* acked,
                             std::vector<std::string>* owners) {
  *acked = false;
  std::string target;
  {
    std::lock_guard<std::mutex> l(mu_);
    target = server_;
  }
  absl::StatusOr<ConnectionSecurity> security = options_.security->Connect();
  if (!security.ok()) {
    *code = grpc::StatusCode::FAILED_PRECONDITION;
    *message = absl::StrCat("cannot set up the connection: ",
                            security.status().message());
    return;
  }
  Stream stream;
  grpc::ChannelArguments args;
  SetIngestChannelArguments(&args);
  if (!security->server_name_override.empty())
    args.SetSslTargetNameOverride(security->server_name_override);
  stream.channel = grpc::CreateCustomChannel(target,
                                             security->credentials, args);
  stream.stub = v1::Ingest::NewStub(stream.channel);
  if (!security->authorization.empty())
    stream.context.AddMetadata("authorization", security->authorization);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_ || target != server_) stream.context.TryCancel();
    context_ = &stream.context;  // lets Stop() cancel a hanging connect
    reader_done_ = false;
    sent_through_ = 0;
    last_progress_ = options_.clock->Now();
  }
  stream.rw = stream.stub->Stream(&stream.context);
  std::thread reader([&] { ReadLoop(&stream); });
  std::thread writer([&] { WriteLoop(&stream); });
  {
    std::unique_lock<std::mutex> l(mu_);
    bool cancelled = false;
    while (!reader_done_) {
      double now = options_.clock->Now();
      std::shared_ptr<const v1::FrameBatch> head = queue_->NextAfter(0);
      bool in_flight = head != nullptr && head->seq() <= sent_through_;
      if (!cancelled && in_flight &&
          now - last_progress_ >= options_.ack_timeout_seconds) {
        Log(absl::StrFormat("no ack for %.0fs; abandoning the stream",
                            now - last_progress_));
        stream.context.TryCancel();
        cancelled = true;
      }
      double deadline = in_flight && !cancelled
                            ? last_progress_ + options_.ack_timeout_seconds
                            : now + 3600;
      options_.clock->WaitUntil(l, cv_, deadline);
    }
  }
  reader.join();
  writer.join();
  grpc::Status status = stream.rw->Finish();
  if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    const auto& trailers = stream.context.GetServerTrailingMetadata();
    if (auto it = trailers.find("vigil-owners"); it != trailers.end()) {
      for (absl::string_view owner :
           absl::StrSplit(absl::string_view(it->second.data(), it->second.size()), ',',
                          absl::SkipEmpty())) {
        owners->emplace_back(owner);
      }
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  context_ = nullptr;
  *code = status.error_code();
  *message = status.error_message();
  *acked = stream.acked;
}

void StreamClient::ReadLoop(Stream* stream) {
  v1::Ack ack;
  while (stream->rw->Read(&ack)) {
    std::unique_lock<std::mutex> l(mu_);
    double now = options_.clock->Now();
    if (ack.owners_size() > 0 && options_.on_owners != nullptr) {
      std::vector<std::string> owners(ack.owners().begin(), ack.owners().end());
      if (owners != owners_seen_) {
        owners_seen_ = owners;
        l.unlock();
        options_.on_owners(owners);
        l.lock();
      }
    }
    if (ack.acked_seq() > stats_.acked_seq) {
      stats_.batches_acked += queue_->RemoveUpTo(ack.acked_seq());
      stats_.acked_seq = ack.acked_seq();
    }
    stats_.samples_dropped_by_server += ack.dropped_samples();
    stats_.samples_refused_by_server += ack.refused_samples();
    if (!ack.refused_reason().empty() &&
        ack.refused_reason() != last_refused_reason_) {
      // Logged when it changes: a refused series stays refused.
      last_refused_reason_ = ack.refused_reason();
      std::fprintf(stderr, "vigil-agent: the server refused samples: %s\n",
                   last_refused_reason_.c_str());
    }
    stats_.last_ack_time = now;
    stats_.streaming = true;
    stream->acked = true;
    last_progress_ = now;
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> l(mu_);
  reader_done_ = true;
  cv_.notify_all();
}

void StreamClient::WriteLoop(Stream* stream) {
  bool first = true;
  size_t dictionary_sent = 0;
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    std::shared_ptr<const v1::FrameBatch> next;
    cv_.wait(l, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (stop_ || reader_done_) return true;
      next = queue_->NextAfter(std::max(sent_through_, stats_.acked_seq));
      return next != nullptr;
    });
    if (stop_ || reader_done_) break;
    // The first batch of a stream carries Hello and the whole dictionary;
    // later ones carry the series registered since.
    v1::FrameBatch with_header;
    const v1::FrameBatch* out = next.get();
    if (first || dictionary_sent < dictionary_.size()) {
      with_header = *next;
      if (first) {
        v1::Hello* hello = with_header.mutable_hello();
        hello->set_node(options_.node);
        hello->set_agent_instance(instance_);
        hello->set_agent_version(kAgentVersion);
        hello->set_interval_seconds(options_.interval_seconds);
        hello->set_batches_dropped(queue_->dropped() - dropped_before_start_);
        hello->set_batches_dropped_earlier(dropped_before_start_);
      }
      for (; dictionary_sent < dictionary_.size(); ++dictionary_sent) {
        *with_header.add_series() = dictionary_[dictionary_sent];
      }
      out = &with_header;
    }
    l.unlock();
    bool ok = stream->rw->Write(*out);
    l.lock();
    if (!ok) break;  // the call is over; ReadLoop sees it too
    first = false;
    uint64_t seq = next->seq();
    std::shared_ptr<const v1::FrameBatch> head = queue_->NextAfter(0);
    if (head == nullptr || head->seq() > sent_through_) {
      last_progress_ = options_.clock->Now();  // nothing was in flight
    }
    sent_through_ = seq;
    ++stats_.batches_sent;
    if (seq <= max_sent_seq_) {
      ++stats_.batches_resent;
    } else {
      max_sent_seq_ = seq;
    }
  }
}

}  // namespace vigil::agent
