#include "server/ingest/ingest_service.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "grpc/support/time.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/monotonic_clock.h"

namespace vigil {
namespace {

// Local series ids below this are looked up in a dense array.
constexpr uint32_t kDenseIdLimit = 1 << 20;
constexpr uint32_t kNoSlot = UINT32_MAX;
constexpr SeriesId kUnresolved = UINT32_MAX;
// A (job, series) whose creation a series limit refused: its samples are
// dropped for the rest of the stream.
constexpr SeriesId kRefused = UINT32_MAX - 1;
// The slot of a sample whose series id the dictionary limit left out.
constexpr uint32_t kRefusedSlot = UINT32_MAX - 1;
// Jobs whose resolved ids a stream keeps; a node rarely changes job.
constexpr size_t kMaxJobsPerStream = 8;

// Why a batch is refused: the metric label and the stream's final status.
struct Refusal {
  RejectReason reason;
  grpc::Status status;
};

// What to log about the dropped-batch counts of `hello`: for a new agent
// instance its counts, for the same one the growth since its previous
// Hello, which reported `previous_dropped`; "" when nothing new was dropped.
std::string DropLogLine(const v1::Hello& hello, bool new_instance,
                        uint64_t previous_dropped) {
  std::string line;
  const std::string who = absl::StrCat("vigil-server: node ", hello.node(),
                                       " (agent instance ",
                                       hello.agent_instance(), ")");
  if (new_instance && hello.batches_dropped() > 0) {
    line = absl::StrCat(who, " dropped ", hello.batches_dropped(),
                        " batches because its queue of unacknowledged "
                        "batches was full");
  } else if (!new_instance && hello.batches_dropped() > previous_dropped) {
    line = absl::StrCat(who, " dropped ",
                        hello.batches_dropped() - previous_dropped,
                        " more batches since its previous stream because its "
                        "queue of unacknowledged batches was full (",
                        hello.batches_dropped(), " since it started)");
  }
  if (new_instance && hello.batches_dropped_earlier() > 0) {
    absl::StrAppend(&line, line.empty() ? who : ";", " discarded ",
                    hello.batches_dropped_earlier(),
                    " unacknowledged batches a previous agent process left "
                    "in its spool");
  }
  return line;
}

std::string FormatUnixTime(double t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                          absl::FromUnixMicros(static_cast<int64_t>(t * 1e6)),
                          absl::UTCTimeZone());
}

// The view of frame `f` of `node`, whose stored ids and values are
// `columns`.
FrameView ViewOf(const std::string& node, const v1::Frame& f,
                 const FrameColumns& columns) {
  FrameView view;
  view.node = node;
  view.job = f.job();
  view.verified_job_id = f.verified_job_id();
  if (f.has_step()) view.step = f.step();
  view.ts = f.ts();
  view.ids = columns.ids;
  view.values = columns.values;
  if (f.has_job_end()) {
    view.job_end.job = f.job_end().job();
    if (f.job_end().has_step()) view.job_end.step = f.job_end().step();
    view.job_end.reason = f.job_end().reason();
  }
  return view;
}

}  // namespace

// The registry entry of one node. `instance`, `since`, `live` and
// `batches_dropped` are guarded by IngestService::mu_; the rest by `mu`,
// which also serializes applying batches when a stream replaces another of
// the same instance.
struct IngestService::NodeSession {
  std::string instance;
  double since = 0;
  grpc::ServerContextBase* live = nullptr;
  // Hello.batches_dropped of the node's latest stream.
  uint64_t batches_dropped = 0;

  std::mutex mu;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  uint64_t last_applied_seq ABSL_GUARDED_BY(mu) = 0;
  // The observer shard of the node's latest applied frame; -1: none yet.
  int shard ABSL_GUARDED_BY(mu) = -1;
};

// What one stream knows: its dictionary and its resolved ids. Used only by
// the stream's thread.
struct IngestService::StreamState {
  // Resolved store ids of dictionary slots for one job.
  struct JobIds {
    std::string job;
    std::vector<SeriesId> ids;  // by slot; kUnresolved until first use
  };
  // What a frame worker is to do with one frame of the batch.
  struct Delivery {
    int frame;
    bool moved_away;  // NodeMovedAway rather than OnFrame
  };

  grpc::ServerContextBase* context = nullptr;
  std::string node;
  std::string instance;
  std::string drop_log;  // logged once the stream is registered; may be ""
  std::shared_ptr<NodeSession> session;
  uint64_t generation = 0;
  uint64_t prev_seq = 0;  // last seq seen on this stream
  // Ownership::version() when Ack.owners was last sent (cluster); ~0: never.
  uint64_t owners_version = ~uint64_t{0};

  // The dictionary: the normalized key (without the job label) of each
  // slot, encoded (EncodeSeriesKey), one after another in `def_keys`; slot
  // i is [def_ends[i - 1], def_ends[i]). About a fifth of what a SeriesKey
  // per slot took (a server holds every stream's dictionary).
  std::string def_keys;
  std::vector<uint32_t> def_ends;
  std::vector<uint32_t> dense_slots;              // local id -> slot
  absl::flat_hash_map<uint32_t, uint32_t> sparse_slots;  // ids >= limit
  std::vector<JobIds> jobs;

  // Reused per batch: slots, then store ids, of every sample, in order.
  std::vector<SeriesId> ids;
  std::vector<double> kept;  // values of frames that lost refused samples
  std::vector<FrameColumns> columns;
  // The dictionary reached max_series_per_stream: ids it left out are
  // dropped, not refused as unknown.
  bool dictionary_full = false;
  // Samples of the current batch dropped by a series limit, and why.
  uint64_t refused_samples = 0;
  std::string refused_reason;
  bool applied = false;  // the last batch was stored (not a resend)
  // Per observer shard, what its worker delivers of the applied batch.
  std::vector<std::vector<Delivery>> deliveries;
  // Recent jobs and their observer shards (a node rarely changes job).
  std::vector<std::pair<std::string, int>> shards_of_jobs;

  // The observer shard of `job` (cached).
  int ShardOf(const ShardedFrameObserver& observer, const std::string& job) {
    for (const auto& [name, shard] : shards_of_jobs) {
      if (name == job) return shard;
    }
    if (shards_of_jobs.size() >= kMaxJobsPerStream)
      shards_of_jobs.erase(shards_of_jobs.begin());
    shards_of_jobs.emplace_back(job, observer.ShardOf(job));
    return shards_of_jobs.back().second;
  }

  // Definitions in the dictionary.
  size_t DefCount() const { return def_ends.size(); }
  // The encoded key of dictionary slot `slot`.
  std::string_view DefKey(uint32_t slot) const {
    const uint32_t begin = slot == 0 ? 0 : def_ends[slot - 1];
    return std::string_view(def_keys).substr(begin, def_ends[slot] - begin);
  }
  // Adds the next slot's encoded key.
  void AddDef(std::string_view encoded) {
    def_keys.append(encoded);
    def_ends.push_back(static_cast<uint32_t>(def_keys.size()));
  }

  uint32_t SlotOf(uint32_t local_id) const {
    if (local_id < kDenseIdLimit) {
      return local_id < dense_slots.size() ? dense_slots[local_id] : kNoSlot;
    }
    auto it = sparse_slots.find(local_id);
    return it == sparse_slots.end() ? kNoSlot : it->second;
  }

  void AddSlot(uint32_t local_id, uint32_t slot) {
    if (local_id < kDenseIdLimit) {
      if (local_id >= dense_slots.size()) dense_slots.resize(local_id + 1, kNoSlot);
      dense_slots[local_id] = slot;
    } else {
      sparse_slots[local_id] = slot;
    }
  }

  // True if `job` is known to be a valid label value (cheap when cached).
  bool KnownJob(const std::string& job) const {
    for (const JobIds& j : jobs) {
      if (j.job == job) return true;
    }
    return false;
  }

  // The resolved-id table of `job`, created (evicting the oldest) if new.
  JobIds& Job(const std::string& job) {
    for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
      if (it->job == job) return *it;
    }
    if (jobs.size() >= kMaxJobsPerStream) jobs.erase(jobs.begin());
    jobs.push_back(JobIds{job, {}});
    return jobs.back();
  }
};

IngestService::IngestService(const IngestOptions& options)
    : options_(options),
      workers_(options.observer == nullptr
                   ? nullptr
                   : std::make_unique<FrameWorkers>(FrameWorkersOptions{
                         .workers = options.observer->shards(),
                         .queue_capacity = options.worker_queue_batches,
                         .linger = options.worker_linger})),
      budget_(options.series_budget),
      watchdog_(std::make_unique<FirstBatchWatchdog>(
          options.clock, options.first_batch_seconds,
          [](FirstBatchWatchdog::StreamHandle stream) {
            static_cast<grpc::ServerContextBase*>(stream)->TryCancel();
          })) {
  options_.metrics->frame_workers.store(workers_ == nullptr ? 0 : workers_->workers());
}

absl::StatusOr<SeriesId> IngestService::ResolveNew(StreamState& st,
                                                   SeriesKey key,
                                                   const std::string& job,
                                                   double now) {
  IngestMetrics& metrics = *options_.metrics;
  auto refused = [&](SeriesLimit limit, absl::string_view why) {
    metrics.RefuseSeries(limit);
    if (st.refused_reason.empty())
      st.refused_reason = absl::StrCat("series ", key.ToString(), " refused: ", why);
    return kRefused;
  };
  if (absl::Status s = NormalizeSeriesKey(&key); !s.ok())
    return absl::Status(s.code(), absl::StrCat("series ", key.ToString(), ": ", s.message()));
  absl::StatusOr<SeriesId> found = options_.store->Find(key);
  if (found.ok() || !absl::IsNotFound(found.status())) return found;
  bool by_node = false;
  if (absl::Status s = budget_.Charge(st.node, job, now, &by_node); !s.ok())
    return refused(by_node ? SeriesLimit::kNode : SeriesLimit::kJob, s.message());
  absl::StatusOr<SeriesId> created = options_.store->Resolve(key);
  if (absl::IsResourceExhausted(created.status()))
    return refused(SeriesLimit::kStore, created.status().message());
  if (!created.ok())
    return absl::Status(created.status().code(),
                        absl::StrCat("series ", key.ToString(), ": ",
                                     created.status().message()));
  return created;
}

IngestService::~IngestService() { Shutdown(); }

grpc::Status IngestService::Register(grpc::ServerContextBase* context,
                                     const v1::Hello& hello,
                                     StreamState* state) {
  std::lock_guard<std::mutex> l(mu_);
  std::shared_ptr<NodeSession>& session = nodes_[hello.node()];
  if (session == nullptr) session = std::make_shared<NodeSession>();
  if (session->live != nullptr && session->instance != hello.agent_instance()) {
    options_.metrics->Reject(RejectReason::kNodeTaken);
    return grpc::Status(
        grpc::StatusCode::ALREADY_EXISTS,
        absl::StrCat("node ", hello.node(),
                     " is already streamed by agent instance ",
                     session->instance, " since ",
                     FormatUnixTime(session->since)));
  }
  if (session->live != nullptr) session->live->TryCancel();
  bool new_instance = session->instance != hello.agent_instance();
  state->drop_log =
      DropLogLine(hello, new_instance, session->batches_dropped);
  session->batches_dropped = hello.batches_dropped();
  options_.metrics->SetAgentDrops(hello.node(), hello.batches_dropped(),
                                  hello.batches_dropped_earlier());
  session->instance = hello.agent_instance();
  session->since = options_.clock->Now();
  session->live = context;
  {
    std::lock_guard<std::mutex> sl(session->mu);
    state->generation = ++session->generation;
    if (new_instance) session->last_applied_seq = 0;
  }
  state->context = context;
  state->node = hello.node();
  state->instance = hello.agent_instance();
  state->session = session;
  return grpc::Status::OK;
}

void IngestService::Unregister(const StreamState& state) {
  std::lock_guard<std::mutex> l(mu_);
  if (state.session->live == state.context) state.session->live = nullptr;
}

grpc::Status IngestService::Open(grpc::ServerContextBase* context,
                                 const v1::FrameBatch& batch,
                                 StreamState* state) {
  IngestMetrics& metrics = *options_.metrics;
  auto refuse = [&](RejectReason reason, const std::string& what) {
    metrics.Reject(reason);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("batch ", batch.seq(), ": ", what));
  };
  if (!batch.has_hello())
    return refuse(RejectReason::kMissingHello,
                  "the first batch of a stream must carry hello");
  const v1::Hello& hello = batch.hello();
  if (absl::Status s = ValidateLabelValue("node", hello.node()); !s.ok())
    return refuse(RejectReason::kBadHello,
                  absl::StrCat("hello: bad node name: ", s.message()));
  // "@class" names fleet-wide fault classes where node names are keys
  // (rules/engine.h SaveHistory, etcd implications/: docs/SCALING.md).
  if (hello.node().starts_with('@'))
    return refuse(RejectReason::kBadHello,
                  "hello: bad node name: names starting with '@' are reserved");
  if (hello.agent_instance().empty())
    return refuse(RejectReason::kBadHello, "hello: empty agent_instance");
  if (options_.authenticator != nullptr) {
    if (std::optional<StreamRefusal> r =
            options_.authenticator->Check(*context, hello.node())) {
      metrics.Reject(r->reason);
      return r->status;
    }
  }
  if (grpc::Status s = Register(context, hello, state); !s.ok()) return s;
  if (!state->drop_log.empty())
    std::fprintf(stderr, "%s\n", state->drop_log.c_str());
  return grpc::Status::OK;
}

// One stream, from the call's arrival to its Finish. Its operations
// complete on the thread of its completion queue; the deliveries of a batch
// run on the frame workers. A stream has one operation or delivery in
// flight at a time (a batch is read only after the previous one was acked),
// so its members are touched by one party at a time. Deletes itself once
// its Finish completes, or when the server shuts down before a call came.
class IngestService::Stream {
 public:
  // What a completion-queue tag stands for.
  enum class Op { kStarted, kRead, kWritten, kFinished };
  struct Tag {
    Stream* stream;
    Op op;
  };

  // Asks gRPC for the next call on `cq`; counted in service->live_.
  Stream(IngestService* service, grpc::ServerCompletionQueue* cq)
      : service_(*service), cq_(cq), io_(&context_) {
    service_.async_.RequestStream(&context_, &io_, cq_, cq_, &started_);
  }

  // Runs the step that finished: `op` completed with `ok`.
  void Proceed(Op op, bool ok) {
    switch (op) {
      case Op::kStarted:
        if (!ok) {  // the server is shutting down
          delete this;
          return;
        }
        service_.RequestNextStream(cq_);
        Start();
        return;
      case Op::kRead:
        OnRead(ok);
        return;
      case Op::kWritten:
        OnWritten(ok);
        return;
      case Op::kFinished:
        delete this;
        return;
    }
  }

  ~Stream() {
    Release();
    service_.StreamGone();
  }

 private:
  // The call has arrived: checks its token and certificate, takes a slot
  // of max_streams and reads the first batch.
  void Start() {
    IngestMetrics& metrics = *service_.options_.metrics;
    if (service_.options_.authenticator != nullptr) {
      if (std::optional<StreamRefusal> r =
              service_.options_.authenticator->CheckBeforeHello(context_)) {
        metrics.Reject(r->reason);
        Close(r->status);
        return;
      }
    }
    counted_ = true;
    if (++service_.streams_ > service_.options_.max_streams) {
      metrics.Reject(RejectReason::kTooManyStreams);
      Close(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("the server serves at most ",
                                       service_.options_.max_streams,
                                       " streams at once; retry later")));
      return;
    }
    service_.watchdog_->Watch(&context_, cq_);
    watching_ = true;
    io_.Read(&batch_, &read_);
  }

  void OnRead(bool ok) {
    IngestMetrics& metrics = *service_.options_.metrics;
    if (!registered_) {
      watching_ = false;
      if (service_.watchdog_->Done(&context_)) {
        metrics.Reject(RejectReason::kNoFirstBatch);
        Close(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            absl::StrCat("no first batch within ",
                                         service_.options_.first_batch_seconds,
                                         " s")));
        return;
      }
      if (!ok) {
        Close(grpc::Status::OK);
        return;
      }
      if (grpc::Status s = service_.Open(&context_, batch_, &state_); !s.ok()) {
        Close(s);
        return;
      }
      registered_ = true;
      metrics.connected_agents.fetch_add(1);
    } else if (!ok) {
      Close(grpc::Status::OK);  // the agent closed the stream (or is gone)
      return;
    }
    if (batch_.has_hello() && (batch_.hello().node() != state_.node ||
                               batch_.hello().agent_instance() !=
                                   state_.instance)) {
      metrics.Reject(RejectReason::kBadHello);
      Close(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("batch ", batch_.seq(),
                       ": hello names another node or agent instance than "
                       "the first batch of the stream")));
      return;
    }
    read_at_ = MonotonicSeconds();
    if (grpc::Status s = service_.HandleBatch(state_, batch_, &ack_); !s.ok()) {
      Close(s);
      return;
    }
    metrics.batch_apply.Observe(SecondsSinceRead());
    if (!state_.applied || service_.workers_ == nullptr) {
      Ack();
      return;
    }
    Deliver();
  }

  double SecondsSinceRead() const {
    return MonotonicSeconds() - read_at_;
  }

  // Acks the batch read last (its time to the ack is counted).
  void Ack() {
    service_.options_.metrics->batch_ack.Observe(SecondsSinceRead());
    io_.Write(ack_, &written_);
  }

  void OnWritten(bool ok) {
    if (!ok) {
      Close(grpc::Status::OK);  // the agent is gone
      return;
    }
    // A cleared message keeps its repeated fields' elements for reuse: the
    // whole dictionary of the stream's first batch (~60 KB for 229 series)
    // would stay with every stream. Later batches rarely define series.
    if (batch_.series_size() > 0) v1::FrameBatch().Swap(&batch_);
    io_.Read(&batch_, &read_);
  }

  // Gives back the node, the stream slot and the watchdog entry, then ends
  // the stream with `status`: the agent that hears the status may connect
  // again at once and find its node free.
  void Close(const grpc::Status& status) {
    Release();
    io_.Finish(status, &finished_);
  }

  void Release() {
    if (watching_) service_.watchdog_->Done(&context_);
    watching_ = false;
    if (registered_) {
      service_.options_.metrics->connected_agents.fetch_sub(1);
      service_.Unregister(state_);
      registered_ = false;
    }
    if (counted_) --service_.streams_;
    counted_ = false;
  }

  // Hands the applied batch to the workers of its shards; the last to
  // finish acks it. Detection sees the batch before the agent hears it is
  // acked: a crash in between makes the agent resend it (and the new
  // process see it), where the other order would lose, say, the one frame
  // whose ECC counter jumped.
  void Deliver() {
    // The shards to deliver to, noted before the first part runs: the
    // last part acks, and the next batch may then rewrite state_.
    absl::InlinedVector<int, 4> parts;
    for (int k = 0; k < static_cast<int>(state_.deliveries.size()); ++k) {
      if (!state_.deliveries[k].empty()) parts.push_back(k);
    }
    if (parts.empty()) {  // a batch without frames (a hello, a dictionary)
      Ack();
      return;
    }
    pending_.store(static_cast<int>(parts.size()));
    for (int k : parts) {
      // HandleBatch checked for room; a queue filled since by other
      // streams still takes it (the bound is soft by the streams racing).
      Counter(k).fetch_add(1, std::memory_order_relaxed);
      const bool queued = service_.workers_->SubmitPastCapacity(k, [this, k] { Run(k); });
      if (!queued) Run(k);  // stopping: deliver here
    }
  }

  // Delivers shard `k`'s part of the batch; acks after the last part.
  void Run(int k) {
    ShardedFrameObserver& observer = *service_.options_.observer;
    const double started = MonotonicSeconds();
    for (const StreamState::Delivery& d : state_.deliveries[k]) {
      const FrameView view = ViewOf(state_.node, batch_.frames(d.frame),
                                    state_.columns[d.frame]);
      if (d.moved_away) {
        observer.NodeMovedAway(k, view);
      } else {
        observer.OnFrame(k, view);
      }
    }
    service_.options_.metrics->batch_detect.Observe(MonotonicSeconds() - started);
    Counter(k).fetch_sub(1, std::memory_order_relaxed);
    if (pending_.fetch_sub(1) == 1) Ack();
  }

  // The queued-batches gauge of worker `k` (a spare one past those
  // reported).
  std::atomic<int64_t>& Counter(int k) {
    static std::atomic<int64_t> unreported{0};
    IngestMetrics& m = *service_.options_.metrics;
    return k < IngestMetrics::kMaxReportedWorkers ? m.worker_queued[k] : unreported;
  }

  IngestService& service_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<v1::Ack, v1::FrameBatch> io_;
  Tag started_{this, Op::kStarted};
  Tag read_{this, Op::kRead};
  Tag written_{this, Op::kWritten};
  Tag finished_{this, Op::kFinished};
  StreamState state_;
  v1::FrameBatch batch_;
  v1::Ack ack_;
  std::atomic<int> pending_{0};
  double read_at_ = 0;  // MonotonicSeconds() of the batch in flight's read
  bool counted_ = false;     // holds a slot of max_streams
  bool watching_ = false;    // the first batch watchdog has it
  bool registered_ = false;  // Open succeeded
};

void IngestService::AddTo(grpc::ServerBuilder& builder) {
  builder.RegisterService(&async_);
  for (int i = 0; i < std::max(1, options_.threads); ++i)
    queues_.push_back(builder.AddCompletionQueue());
}

void IngestService::Start() {
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& cq : queues_) {
    RequestNextStream(cq.get());
    threads_.emplace_back([this, cq = cq.get()] {
      void* tag = nullptr;
      bool ok = false;
      for (;;) {
        // The first-batch watchdog learns when the queue has nothing to
        // do (server/ingest/first_batch_watchdog.h).
        const grpc::CompletionQueue::NextStatus status =
            cq->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
        if (status == grpc::CompletionQueue::SHUTDOWN) break;
        if (status == grpc::CompletionQueue::TIMEOUT) {
          watchdog_->QueueIdle(cq);
          if (!cq->Next(&tag, &ok)) break;
          watchdog_->QueueBusy(cq);
        }
        Stream::Tag* t = static_cast<Stream::Tag*>(tag);
        t->stream->Proceed(t->op, ok);
      }
    });
  }
}

void IngestService::RequestNextStream(grpc::ServerCompletionQueue* cq) {
  std::lock_guard<std::mutex> l(live_mu_);
  if (shutting_down_) return;
  ++live_;
  new Stream(this, cq);
}

void IngestService::StreamGone() {
  std::lock_guard<std::mutex> l(live_mu_);
  if (--live_ == 0) live_gone_.notify_all();
}

void IngestService::Shutdown() {
  {
    std::unique_lock<std::mutex> l(live_mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    // The server's shutdown cancelled every call: their pending operations
    // and deliveries complete failed, and each stream finishes. New
    // operations may not start on a queue that is shut down, so the queues
    // wait for the last stream.
    if (!threads_.empty()) live_gone_.wait(l, [this] { return live_ == 0; });
  }
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& cq : queues_) cq->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // Queues of a server that never started hold nothing but must be drained.
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& cq : queues_) {
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) {
    }
  }
}

std::vector<size_t> IngestService::WorkerQueues() const {
  std::vector<size_t> out;
  if (workers_ == nullptr) return out;
  for (int k = 0; k < workers_->workers(); ++k) out.push_back(workers_->queued(k));
  return out;
}

grpc::Status IngestService::CheckOwner(StreamState& st, NodeSession& session,
                                       const v1::FrameBatch& batch) {
  if (batch.frames_size() == 0) return grpc::Status::OK;
  const v1::Frame& first = batch.frames(0);
  const cluster::Ownership& ownership = *options_.ownership;
  const bool local = st.context == nullptr;  // ApplyLocal
  // The old owner takes the frame that ends its job; the next ones move.
  if (!first.job_end().job().empty() && ownership.Owner(first.job_end().job(), st.node).ours)
    return grpc::Status::OK;
  cluster::Ownership::Answer owner = ownership.Owner(first.job(), st.node);
  if (owner.ours) return grpc::Status::OK;
  options_.metrics->Reject(RejectReason::kNotOwner);
  const std::string owners = absl::StrJoin(owner.owners, ",");
  if (!local) st.context->AddTrailingMetadata("vigil-owners", owners);
  // The node leaves what this server watched: detection hands it over as a
  // node that moved away, so it is not read as silent here. No frame of it
  // is queued (a stream has one batch in flight, acked after its frames ran).
  if (session.shard >= 0 && workers_ != nullptr) {
    const int k = session.shard;
    auto task = [observer = options_.observer, k, node = st.node, job = first.job(),
                 ts = first.ts()] {
      FrameView view;
      view.node = node;
      view.job = job;
      view.ts = ts;
      observer->NodeHandedOver(k, view);
    };
    if (!workers_->SubmitPastCapacity(k, task)) task();
    session.shard = -1;
  }
  return grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat("batch ", batch.seq(), ": ",
                   first.job().empty() ? absl::StrCat("idle node ", st.node)
                                       : absl::StrCat("job '", first.job(), "'"),
                   " belongs to shard ", owner.shard, "; stream to ", owners));
}

grpc::Status IngestService::HandleBatch(StreamState& st,
                                        const v1::FrameBatch& batch,
                                        v1::Ack* ack) {
  IngestMetrics& metrics = *options_.metrics;
  const uint64_t seq = batch.seq();
  auto refuse = [&](RejectReason reason, const std::string& where,
                    const std::string& what) {
    metrics.Reject(reason);
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("batch ", seq, where, ": ", what));
  };
  if (seq == 0)
    return refuse(RejectReason::kSeqNotIncreasing, "", "seq must start at 1");
  if (seq <= st.prev_seq)
    return refuse(RejectReason::kSeqNotIncreasing, "",
                  absl::StrCat("seq is not greater than the previous seq ",
                               st.prev_seq, " of this stream"));
  st.prev_seq = seq;

  // The dictionary is per stream: a refused batch ends the stream, so its
  // entries need no rollback, and entries of resent batches count too.
  for (int i = 0; i < batch.series_size(); ++i) {
    const v1::SeriesDef& def = batch.series(i);
    std::string where = absl::StrCat(" series ", i, " (id ", def.id(), ")");
    SeriesKey key{def.metric(), {}};
    for (const v1::Label& label : def.labels()) {
      if (label.name() == "job" || label.name() == "node")
        return refuse(RejectReason::kBadSeriesDef, where,
                      absl::StrCat("label '", label.name(),
                                   "' is reserved: it comes from the ",
                                   label.name() == "job" ? "frame" : "hello"));
      key.labels.emplace_back(label.name(), label.value());
    }
    if (key.labels.size() + 2 > kMaxLabels)
      return refuse(RejectReason::kBadSeriesDef, where,
                    absl::StrCat("at most ", kMaxLabels - 2, " labels allowed"));
    key.labels.emplace_back("node", st.node);
    if (absl::Status s = NormalizeSeriesKey(&key); !s.ok())
      return refuse(RejectReason::kBadSeriesDef, where, std::string(s.message()));
    const std::string encoded = EncodeSeriesKey(key);
    uint32_t slot = st.SlotOf(def.id());
    if (slot != kNoSlot) {
      if (st.DefKey(slot) != encoded) {
        absl::StatusOr<SeriesKey> known = DecodeSeriesKey(st.DefKey(slot));
        return refuse(RejectReason::kBadSeriesDef, where,
                      absl::StrCat("id already defined as ",
                                   known.ok() ? known->ToString() : "?"));
      }
      continue;
    }
    if (options_.max_series_per_stream > 0 &&
        st.DefCount() >= options_.max_series_per_stream) {
      // Keep the stream and its known series; drop the new one's samples.
      metrics.RefuseSeries(SeriesLimit::kStream);
      st.dictionary_full = true;
      continue;
    }
    st.AddSlot(def.id(), static_cast<uint32_t>(st.DefCount()));
    st.AddDef(encoded);
  }
  if (batch.series_size() > 0) st.def_keys.shrink_to_fit();

  NodeSession& session = *st.session;
  std::lock_guard<std::mutex> l(session.mu);
  if (session.generation != st.generation)
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "stream replaced by a newer stream of the same agent "
                        "instance");
  ack->set_acked_seq(seq);
  ack->set_dropped_samples(0);
  ack->clear_refused_samples();
  ack->clear_refused_reason();
  ack->clear_owners();
  st.applied = false;
  if (seq <= session.last_applied_seq) {
    metrics.resent_batches.fetch_add(1, std::memory_order_relaxed);
    return grpc::Status::OK;
  }
  if (options_.ownership != nullptr) {
    if (grpc::Status moved = CheckOwner(st, session, batch); !moved.ok()) return moved;
    if (const uint64_t version = options_.ownership->version(); version != st.owners_version) {
      for (std::string& owner : options_.ownership->OwnMembers()) ack->add_owners(std::move(owner));
      st.owners_version = version;
    }
  }

  // Pass 1: validate every frame; record the dictionary slot of each sample.
  const double now = options_.clock->Now();
  size_t total = 0;
  for (const v1::Frame& f : batch.frames()) total += f.series_ids_size();
  st.ids.resize(total);
  size_t pos = 0;
  const std::string* last_job = nullptr;
  for (int i = 0; i < batch.frames_size(); ++i) {
    const v1::Frame& f = batch.frames(i);
    const std::string where = absl::StrCat(" frame ", i);  // short: no alloc
    if (f.series_ids_size() != f.values_size())
      return refuse(RejectReason::kLengthMismatch, where,
                    absl::StrCat(f.series_ids_size(), " series ids but ",
                                 f.values_size(), " values"));
    const double ts = f.ts();
    if (!std::isfinite(ts) || ts <= 0)
      return refuse(RejectReason::kBadTimestamp, where,
                    absl::StrFormat("timestamp %.3f is not a positive, "
                                    "finite Unix time", ts));
    if (ts > now + options_.max_future_skew_seconds)
      return refuse(RejectReason::kFutureTimestamp, where,
                    absl::StrFormat("timestamp %.3f is %.3f s ahead of the "
                                    "server clock (at most %g s)",
                                    ts, ts - now,
                                    options_.max_future_skew_seconds));
    if (ts < now - options_.raw_retention_seconds)
      return refuse(RejectReason::kTooOld, where,
                    absl::StrFormat("timestamp %.3f is older than the raw "
                                    "retention of %g s",
                                    ts, options_.raw_retention_seconds));
    if (last_job == nullptr || *last_job != f.job()) {
      if (!st.KnownJob(f.job())) {
        if (f.job().empty())
          return refuse(RejectReason::kBadJob, where, "empty job name");
        if (absl::Status s = ValidateLabelValue("job", f.job()); !s.ok())
          return refuse(RejectReason::kBadJob, where,
                        absl::StrCat("bad job name: ", s.message()));
      }
      last_job = &f.job();
    }
    if (!f.verified_job_id().empty()) {
      if (absl::Status s =
              ValidateLabelValue("verified_job_id", f.verified_job_id());
          !s.ok())
        return refuse(RejectReason::kBadJob, where,
                      absl::StrCat("bad verified_job_id: ", s.message()));
    }
    if (f.has_job_end()) {
      const v1::JobEnd& end = f.job_end();
      if (end.job().empty())
        return refuse(RejectReason::kBadJob, where, "job_end without a job");
      if (absl::Status s = ValidateLabelValue("job", end.job()); !s.ok())
        return refuse(RejectReason::kBadJob, where,
                      absl::StrCat("bad job_end job name: ", s.message()));
      if (!end.reason().empty()) {
        if (absl::Status s = ValidateLabelValue("reason", end.reason());
            !s.ok())
          return refuse(RejectReason::kBadJob, where,
                        absl::StrCat("bad job_end reason: ", s.message()));
      }
    }
    for (uint32_t local_id : f.series_ids()) {
      uint32_t slot = st.SlotOf(local_id);
      if (slot == kNoSlot && st.dictionary_full) slot = kRefusedSlot;
      if (slot == kNoSlot)
        return refuse(RejectReason::kUnknownSeries, where,
                      absl::StrCat("unknown series id ", local_id));
      st.ids[pos++] = slot;
    }
  }

  // Which worker delivers each frame: that of its job's shard, and, when
  // the node's frames move to another shard, that of the shard they leave
  // (after the node's last frame there). Refused before anything is
  // stored when a worker is too far behind.
  int node_shard = session.shard;
  if (options_.observer != nullptr) {
    st.deliveries.resize(options_.observer->shards());
    for (auto& d : st.deliveries) d.clear();
    for (int i = 0; i < batch.frames_size(); ++i) {
      const int k = st.ShardOf(*options_.observer, batch.frames(i).job());
      if (node_shard >= 0 && node_shard != k)
        st.deliveries[node_shard].push_back({i, /*moved_away=*/true});
      st.deliveries[k].push_back({i, /*moved_away=*/false});
      node_shard = k;
    }
    for (int k = 0; k < static_cast<int>(st.deliveries.size()); ++k) {
      if (st.deliveries[k].empty() || workers_->HasRoom(k)) continue;
      metrics.Reject(RejectReason::kDetectionBacklog);
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("batch ", seq, ": detection is behind (worker ", k,
                       " holds ", workers_->queued(k), " batches, at most ",
                       options_.worker_queue_batches,
                       "); nothing of it was stored; resend it later"));
    }
  }

  // Pass 2: translate slots to store ids, resolving new (job, series) pairs;
  // samples of series a limit refused are dropped, the rest kept.
  st.columns.clear();
  st.refused_samples = 0;
  st.refused_reason.clear();
  if (st.kept.size() < total) st.kept.resize(total);
  pos = 0;
  StreamState::JobIds* job = nullptr;
  for (int i = 0; i < batch.frames_size(); ++i) {
    const v1::Frame& f = batch.frames(i);
    if (job == nullptr || job->job != f.job()) {
      job = &st.Job(f.job());
      job->ids.resize(st.DefCount(), kUnresolved);
    }
    const size_t n = f.series_ids_size();
    SeriesId* ids = st.ids.data() + pos;
    const double* values = f.values().data();
    double* kept_values = nullptr;  // set once a sample of the frame is dropped
    size_t kept = 0;
    for (size_t k = 0; k < n; ++k) {
      SeriesId id = kRefused;
      if (const uint32_t slot = ids[k]; slot != kRefusedSlot) {
        SeriesId& cached = job->ids[slot];
        if (cached == kUnresolved) {
          absl::StatusOr<SeriesKey> key = DecodeSeriesKey(st.DefKey(slot));
          if (!key.ok()) return grpc::Status(grpc::StatusCode::INTERNAL,
                                             std::string(key.status().message()));
          key->labels.emplace_back("job", f.job());
          absl::StatusOr<SeriesId> resolved = ResolveNew(st, *std::move(key), f.job(), now);
          if (!resolved.ok()) {
            metrics.Reject(RejectReason::kStorage);
            return grpc::Status(
                static_cast<grpc::StatusCode>(resolved.status().code()),
                absl::StrCat("batch ", seq, " frame ", i, ": ",
                             resolved.status().message()));
          }
          cached = *resolved;
        }
        id = cached;
      }
      if (id == kRefused) {
        ++st.refused_samples;
        if (kept_values == nullptr) {
          kept_values = st.kept.data() + pos;
          std::copy(values, values + kept, kept_values);
        }
        continue;
      }
      ids[kept] = id;
      if (kept_values != nullptr) kept_values[kept] = values[k];
      ++kept;
    }
    st.columns.push_back(FrameColumns{
        f.ts(), std::span<const SeriesId>(ids, kept),
        std::span<const double>(kept_values != nullptr ? kept_values : values,
                                kept)});
    pos += n;
  }

  AppendResult appended;
  if (absl::Status s = options_.store->Append(st.columns, &appended); !s.ok()) {
    metrics.Reject(RejectReason::kStorage);
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                        absl::StrCat("batch ", seq, ": storage: ", s.message()));
  }
  session.last_applied_seq = seq;
  session.shard = node_shard;
  ack->set_dropped_samples(appended.duplicates + appended.out_of_order +
                           st.refused_samples);
  if (st.refused_samples > 0) {
    ack->set_refused_samples(st.refused_samples);
    ack->set_refused_reason(st.refused_reason);
    metrics.dropped_series_limit.fetch_add(st.refused_samples,
                                           std::memory_order_relaxed);
  }

  metrics.samples.fetch_add(total, std::memory_order_relaxed);
  metrics.frames.fetch_add(batch.frames_size(), std::memory_order_relaxed);
  metrics.batches.fetch_add(1, std::memory_order_relaxed);
  metrics.dropped_duplicate.fetch_add(appended.duplicates,
                                      std::memory_order_relaxed);
  metrics.dropped_out_of_order.fetch_add(appended.out_of_order,
                                         std::memory_order_relaxed);
  metrics.sample_rate.Add(now, total);

  st.applied = true;
  return grpc::Status::OK;
}

// A local source's stream of one node: a StreamState fed batches built
// from keys, and the dictionary ids given to those keys.
struct IngestService::LocalStream {
  std::mutex mu;
  StreamState state ABSL_GUARDED_BY(mu);
  // EncodeSeriesKey(key) -> the dictionary id given to it.
  absl::flat_hash_map<std::string, uint32_t> ids ABSL_GUARDED_BY(mu);
  uint64_t seq ABSL_GUARDED_BY(mu) = 0;
  v1::FrameBatch batch ABSL_GUARDED_BY(mu);
  // Serializes deliveries of the node; the shard its frames went to last.
  std::mutex deliver_mu;
  int delivered_shard ABSL_GUARDED_BY(deliver_mu) = -1;
};

absl::Status IngestService::ApplyLocal(std::string_view source, const std::string& node,
                                       const std::vector<SeriesKey>& keys,
                                       const std::vector<LocalFrame>& frames,
                                       LocalResult* result) {
  *result = LocalResult();
  if (frames.empty()) return absl::OkStatus();
  if (absl::Status s = ValidateLabelValue("node", node); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("bad node name: ", s.message()));
  if (node.starts_with('@'))
    return absl::InvalidArgumentError(
        absl::StrCat("bad node name \"", node, "\": names starting with '@' are reserved"));
  std::shared_ptr<LocalStream> local;
  std::shared_ptr<NodeSession> session;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::shared_ptr<NodeSession>& entry = nodes_[node];
    if (entry == nullptr) entry = std::make_shared<NodeSession>();
    if (entry->live != nullptr) {
      options_.metrics->Reject(RejectReason::kNodeTaken);
      return absl::AlreadyExistsError(
          absl::StrCat("node ", node, " is streamed by its agent (instance ", entry->instance,
                       "); its samples from ", std::string(source), " are left out"));
    }
    std::lock_guard<std::mutex> sl(entry->mu);
    if (entry->instance != source) {
      entry->instance = std::string(source);
      entry->since = options_.clock->Now();
      ++entry->generation;
      entry->last_applied_seq = 0;
    }
    generation = entry->generation;
    session = entry;
    std::shared_ptr<LocalStream>& stream = local_[node];
    if (stream == nullptr) stream = std::make_shared<LocalStream>();
    local = stream;
  }

  std::lock_guard<std::mutex> l(local->mu);
  StreamState& st = local->state;
  st.context = nullptr;
  st.node = node;
  st.instance = std::string(source);
  st.session = session;
  st.generation = generation;
  v1::FrameBatch& batch = local->batch;
  batch.Clear();
  batch.set_seq(++local->seq);
  // Dictionary ids of `keys`; new ones defined in the batch.
  std::vector<uint32_t> ids(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string encoded = EncodeSeriesKey(keys[i]);
    if (auto it = local->ids.find(encoded); it != local->ids.end()) {
      ids[i] = it->second;
      continue;
    }
    const uint32_t id = static_cast<uint32_t>(local->ids.size() + 1);
    local->ids.emplace(std::move(encoded), id);
    ids[i] = id;
    v1::SeriesDef* def = batch.add_series();
    def->set_id(id);
    def->set_metric(keys[i].metric);
    for (const auto& [name, value] : keys[i].labels) {
      v1::Label* label = def->add_labels();
      label->set_name(name);
      label->set_value(value);
    }
  }
  for (const LocalFrame& frame : frames) {
    v1::Frame* f = batch.add_frames();
    f->set_job(frame.job);
    f->set_ts(frame.ts);
    for (uint32_t slot : frame.slots) {
      if (slot >= ids.size())
        return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " of ", keys.size(), " keys"));
      f->add_series_ids(ids[slot]);
    }
    f->mutable_values()->Assign(frame.values.begin(), frame.values.end());
    if (!frame.ended_job.empty()) {
      f->mutable_job_end()->set_job(frame.ended_job);
      f->mutable_job_end()->set_reason(frame.end_reason);
    }
  }
  v1::Ack ack;
  const grpc::Status s = HandleBatch(st, batch, &ack);
  if (!s.ok() || !st.applied) {
    // Start the node's dictionary afresh: what the failed batch defined
    // may or may not be in it.
    local->ids.clear();
    local->state = StreamState();
    const std::string what(s.error_message());
    switch (s.error_code()) {
      case grpc::StatusCode::OK:
        return absl::InternalError("batch not applied");
      case grpc::StatusCode::CANCELLED:
        return absl::AlreadyExistsError(
            absl::StrCat("node ", node, " is streamed by its agent now"));
      default:
        return absl::Status(static_cast<absl::StatusCode>(s.error_code()), what);
    }
  }
  result->ids.reserve(st.columns.size());
  result->values.reserve(st.columns.size());
  for (const FrameColumns& c : st.columns) {
    result->ids.emplace_back(c.ids.begin(), c.ids.end());
    result->values.emplace_back(c.values.begin(), c.values.end());
  }
  result->dropped_samples = ack.dropped_samples();
  result->refused_samples = ack.refused_samples();
  result->refused_reason = ack.refused_reason();
  return absl::OkStatus();
}

void IngestService::DeliverLocal(const std::string& node, std::vector<AssembledFrame> frames,
                                 bool claimed_node) {
  if (workers_ == nullptr || frames.empty()) return;
  std::shared_ptr<LocalStream> local;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = local_.find(node);
    if (it == local_.end()) return;
    local = it->second;
  }
  ShardedFrameObserver* const observer = options_.observer;
  auto shared = std::make_shared<const std::vector<AssembledFrame>>(std::move(frames));
  // Per shard, in order: (frame index, moved away).
  std::vector<std::vector<std::pair<size_t, bool>>> parts(observer->shards());
  std::lock_guard<std::mutex> l(local->deliver_mu);
  for (size_t i = 0; i < shared->size(); ++i) {
    const int k = observer->ShardOf((*shared)[i].job);
    if (local->delivered_shard >= 0 && local->delivered_shard != k)
      parts[local->delivered_shard].push_back({i, true});
    parts[k].push_back({i, false});
    local->delivered_shard = k;
  }
  for (int k = 0; k < static_cast<int>(parts.size()); ++k) {
    if (parts[k].empty()) continue;
    auto run = [observer, k, shared, claimed_node, part = std::move(parts[k])] {
      for (const auto& [i, moved_away] : part) {
        const AssembledFrame& f = (*shared)[i];
        FrameView view;
        view.node = f.node;
        view.job = f.job;
        view.ts = f.ts;
        view.ids = f.ids;
        view.values = f.values;
        view.job_end.job = f.ended_job;
        view.job_end.reason = f.end_reason;
        view.claimed_node = claimed_node;
        if (moved_away) {
          observer->NodeMovedAway(k, view);
        } else {
          observer->OnFrame(k, view);
        }
      }
    };
    // Frames applied are stored: they wait for room rather than being
    // dropped, and only a stopping service runs them here.
    while (!workers_->HasRoom(k) && !workers_->stopping())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!workers_->SubmitPastCapacity(k, run)) run();
  }
}

}  // namespace vigil
