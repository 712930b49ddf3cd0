// The transport's floor: a server that speaks vigil-server's Ingest stream
// the way IngestService does (gRPC's asynchronous API, one completion
// queue and its thread, one batch in flight a stream) but does nothing with
// a batch beyond parsing it and acking it. Run under bench/ingest_bench
// (--server-bin) it measures what gRPC and protobuf alone cost a one-frame
// batch on this machine, the bound on samples per server CPU-second that no
// work in Vigil's own code can pass (bench/RESULTS.md, "Many agents, one
// server").
//
//   --grpc-listen=ADDR   where the Ingest service listens (plaintext)
//   --http-listen=ADDR   answers GET /healthz (ingest_bench waits for it)
//   --ack-from=cq|worker cq: the queue's thread writes the ack as soon as
//                        the batch is read; worker (default): a second
//                        thread writes it, as vigil-server's frame worker
//                        does after detection, so the cost of that hop shows
//   --worker-nap-us=N    the worker, woken for a batch, sleeps N µs before
//                        running what is queued: fewer wake-ups, later acks
//   --channel-arg=NAME=N an integer gRPC channel argument on top of
//                        vigil-server's (repeatable), to try a setting on
//                        the floor before vigil-server takes it
//   --memory-quota-mib=N a gRPC ResourceQuota of N MiB for the server (0,
//                        the default: none), to see what it holds back
// Other flags (those ingest_bench passes to vigil-server) are ignored.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include "vigil/v1/ingest.grpc.pb.h"

namespace {

// Runs tasks on one thread, in order, as a frame worker does.
class Worker {
 public:
  explicit Worker(int nap_us) : nap_us_(nap_us), thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void Submit(std::function<void()> task) {
    bool napping;
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_.push_back(std::move(task));
      napping = napping_;
    }
    if (!napping) cv_.notify_one();
  }

 private:
  // Waits for work; with a nap, lets more tasks gather first (they do
  // not notify meanwhile), then runs all that is queued.
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      if (tasks_.empty()) {
        cv_.wait(l, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        if (nap_us_ > 0) {
          napping_ = true;
          l.unlock();
          std::this_thread::sleep_for(std::chrono::microseconds(nap_us_));
          l.lock();
          napping_ = false;
        }
      }
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      l.unlock();
      task();
      l.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  bool napping_ = false;
  const int nap_us_;
  std::thread thread_;
};

// One stream: read a batch, ack its seq, read the next. Deletes itself
// when its Finish completes.
class Stream {
 public:
  enum class Op { kStarted, kRead, kWritten, kFinished };
  struct Tag {
    Stream* stream;
    Op op;
  };

  Stream(vigil::v1::Ingest::AsyncService* service, grpc::ServerCompletionQueue* cq,
         Worker* worker)
      : service_(service), cq_(cq), worker_(worker), io_(&context_) {
    service_->RequestStream(&context_, &io_, cq_, cq_, &started_);
  }

  void Proceed(Op op, bool ok) {
    switch (op) {
      case Op::kStarted:
        if (!ok) {
          delete this;
          return;
        }
        new Stream(service_, cq_, worker_);
        io_.Read(&batch_, &read_);
        return;
      case Op::kRead:
        if (!ok) {
          io_.Finish(grpc::Status::OK, &finished_);
          return;
        }
        ack_.set_acked_seq(batch_.seq());
        if (worker_ == nullptr) {
          io_.Write(ack_, &written_);
        } else {
          worker_->Submit([this] { io_.Write(ack_, &written_); });
        }
        return;
      case Op::kWritten:
        if (!ok) {
          io_.Finish(grpc::Status::OK, &finished_);
          return;
        }
        io_.Read(&batch_, &read_);
        return;
      case Op::kFinished:
        delete this;
        return;
    }
  }

 private:
  vigil::v1::Ingest::AsyncService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  Worker* const worker_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<vigil::v1::Ack, vigil::v1::FrameBatch> io_;
  Tag started_{this, Op::kStarted};
  Tag read_{this, Op::kRead};
  Tag written_{this, Op::kWritten};
  Tag finished_{this, Op::kFinished};
  vigil::v1::FrameBatch batch_;
  vigil::v1::Ack ack_;
};

std::string FlagValue(std::string_view arg, std::string_view name) {
  const std::string prefix = "--" + std::string(name) + "=";
  if (arg.substr(0, prefix.size()) != prefix) return "";
  return std::string(arg.substr(prefix.size()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string grpc_listen, http_listen, ack_from = "worker";
  int nap_us = 0;
  long quota_mib = 0;
  std::vector<std::pair<std::string, int>> channel_args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (std::string v = FlagValue(arg, "channel-arg"); !v.empty()) {
      const size_t eq = v.find('=');
      char* end = nullptr;
      const long n = eq == std::string::npos ? 0 : std::strtol(v.c_str() + eq + 1, &end, 10);
      if (eq == std::string::npos || eq == 0 || end == v.c_str() + eq + 1 || *end != '\0') {
        std::fprintf(stderr, "--channel-arg: expected NAME=INTEGER, got %s\n", v.c_str());
        return 2;
      }
      channel_args.emplace_back(v.substr(0, eq), static_cast<int>(n));
    }
    if (std::string v = FlagValue(arg, "grpc-listen"); !v.empty()) grpc_listen = v;
    if (std::string v = FlagValue(arg, "http-listen"); !v.empty()) http_listen = v;
    if (std::string v = FlagValue(arg, "ack-from"); !v.empty()) ack_from = v;
    if (std::string v = FlagValue(arg, "memory-quota-mib"); !v.empty()) {
      char* end = nullptr;
      quota_mib = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || quota_mib < 0 || quota_mib > 1 << 20) {
        std::fprintf(stderr, "--memory-quota-mib: expected 0..1048576, got %s\n", v.c_str());
        return 2;
      }
    }
    if (std::string v = FlagValue(arg, "worker-nap-us"); !v.empty()) {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 0 || n > 1'000'000) {
        std::fprintf(stderr, "--worker-nap-us: expected 0..1000000, got %s\n", v.c_str());
        return 2;
      }
      nap_us = static_cast<int>(n);
    }
  }
  if (grpc_listen.empty() || http_listen.empty() ||
      (ack_from != "cq" && ack_from != "worker")) {
    std::fprintf(stderr,
                 "usage: grpc_floor_server --grpc-listen=ADDR --http-listen=HOST:PORT "
                 "[--ack-from=cq|worker] [--worker-nap-us=N] [--channel-arg=NAME=N]... "
                 "[--memory-quota-mib=N]\n");
    return 2;
  }
  const size_t colon = http_listen.rfind(':');
  char* port_end = nullptr;
  const long http_port =
      colon == std::string::npos ? -1 : std::strtol(http_listen.c_str() + colon + 1, &port_end, 10);
  if (http_port <= 0 || http_port > 65535 || *port_end != '\0') {
    std::fprintf(stderr, "--http-listen: expected HOST:PORT, got %s\n", http_listen.c_str());
    return 2;
  }

  vigil::v1::Ingest::AsyncService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(grpc_listen, grpc::InsecureServerCredentials(), &port);
  // vigil-server's settings with its defaults (server/server.cc; the
  // message limit is ingest.max_message_mb, 4 MiB), so the floor is its floor.
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (const auto& [name, value] : channel_args) builder.AddChannelArgument(name, value);
  grpc::ResourceQuota quota("grpc_floor_server");
  if (quota_mib > 0) {
    quota.Resize(static_cast<size_t>(quota_mib) << 20);
    builder.SetResourceQuota(quota);
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::ServerCompletionQueue> cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "cannot listen for gRPC on %s\n", grpc_listen.c_str());
    return 1;
  }
  std::unique_ptr<Worker> worker;
  if (ack_from == "worker") worker = std::make_unique<Worker>(nap_us);
  new Stream(&service, cq.get(), worker.get());
  std::thread poller([q = cq.get()] {
    void* tag = nullptr;
    bool ok = false;
    while (q->Next(&tag, &ok)) {
      Stream::Tag* t = static_cast<Stream::Tag*>(tag);
      t->stream->Proceed(t->op, ok);
    }
  });

  httplib::Server http;
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  // ingest_bench ends the run with SIGTERM; the default action ends the
  // process, which is all a floor measurement needs.
  if (!http.listen(http_listen.substr(0, colon), static_cast<int>(http_port))) {
    std::fprintf(stderr, "cannot listen for HTTP on %s\n", http_listen.c_str());
    return 1;
  }
  server->Shutdown();
  cq->Shutdown();
  poller.join();
  return 0;
}
