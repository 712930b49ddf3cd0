#include "tests/agent/fake_ingest_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_join.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace vigil::agent::testing {

struct FakeIngestServer::Impl : public v1::Ingest::Service {
  grpc::Status Stream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::Ack, v1::FrameBatch>* rw) override {
    int stream;
    {
      std::lock_guard<std::mutex> l(mu);
      stream = ++streams;
      contexts.insert(context);
    }
    std::string authorization;
    auto it = context->client_metadata().find("authorization");
    if (it != context->client_metadata().end())
      authorization.assign(it->second.data(), it->second.size());
    grpc::Status status = Serve(stream, authorization, context, rw);
    std::lock_guard<std::mutex> l(mu);
    contexts.erase(context);
    return status;
  }

  grpc::Status Serve(int stream, const std::string& authorization,
                     grpc::ServerContext* context,
                     grpc::ServerReaderWriter<v1::Ack, v1::FrameBatch>* rw) {
    bool owners_sent = false;
    std::set<uint32_t> dictionary;
    v1::FrameBatch batch;
    bool first = true;
    while (rw->Read(&batch)) {
      std::unique_lock<std::mutex> l(mu);
      ReceivedBatch r;
      r.stream = stream;
      r.seq = batch.seq();
      r.hello = batch.has_hello();
      r.hello_node = batch.hello().node();
      r.hello_instance = batch.hello().agent_instance();
      r.hello_version = batch.hello().agent_version();
      r.hello_interval = batch.hello().interval_seconds();
      r.hello_batches_dropped = batch.hello().batches_dropped();
      r.hello_batches_dropped_earlier = batch.hello().batches_dropped_earlier();
      r.authorization = authorization;
      r.series = batch.series_size();
      r.frames = batch.frames_size();
      r.bytes = batch.ByteSizeLong();
      received.push_back(r);
      if (first != r.hello) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "hello must come with the first batch only"};
      }
      if (first && refuse > 0) {
        --refuse;
        return {grpc::StatusCode::ALREADY_EXISTS, "node is taken"};
      }
      if (first && redirect) {
        context->AddTrailingMetadata("vigil-owners", absl::StrJoin(owners, ","));
        return {grpc::StatusCode::FAILED_PRECONDITION, "job belongs to another shard"};
      }
      first = false;
      if (batch.seq() == reject_seq) {
        reject_seq = 0;
        return {grpc::StatusCode::INVALID_ARGUMENT, "batch rejected by test"};
      }
      for (const v1::SeriesDef& def : batch.series())
        dictionary.insert(def.id());
      uint64_t samples = 0;
      for (const v1::Frame& f : batch.frames()) {
        for (uint32_t id : f.series_ids()) {
          if (dictionary.count(id) == 0) {
            return {grpc::StatusCode::INVALID_ARGUMENT,
                    "series id not in this stream's dictionary"};
          }
        }
        samples += f.series_ids_size();
      }
      if (hold) continue;
      if (batch.seq() > last_accepted) {
        accepted.push_back(batch.seq());
        accepted_samples += samples;
        last_accepted = batch.seq();
      }
      v1::Ack ack;
      ack.set_acked_seq(last_accepted);
      if (!owners_sent) {
        for (const std::string& owner : owners) ack.add_owners(owner);
        owners_sent = true;
      }
      l.unlock();
      rw->Write(ack);
    }
    return grpc::Status::OK;
  }

  std::mutex mu;
  int streams = 0;
  std::set<grpc::ServerContext*> contexts;
  std::vector<ReceivedBatch> received;
  std::vector<uint64_t> accepted;
  uint64_t accepted_samples = 0;
  uint64_t last_accepted = 0;
  uint64_t reject_seq = 0;
  int refuse = 0;
  bool hold = false;
  std::vector<std::string> owners;
  bool redirect = false;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

FakeIngestServer::FakeIngestServer(
    int port, std::shared_ptr<grpc::ServerCredentials> credentials)
    : impl_(new Impl) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      "127.0.0.1:" + std::to_string(port),
      credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
      &impl_->port);
  builder.RegisterService(impl_.get());
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || impl_->port == 0) {
    std::fprintf(stderr, "fake ingest server: cannot listen on port %d\n",
                 port);
    std::abort();
  }
}

FakeIngestServer::~FakeIngestServer() {
  impl_->server->Shutdown(std::chrono::system_clock::now());
  impl_->server->Wait();
}

int FakeIngestServer::port() const { return impl_->port; }

std::string FakeIngestServer::address() const {
  return "127.0.0.1:" + std::to_string(impl_->port);
}

std::vector<ReceivedBatch> FakeIngestServer::received() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->received;
}

std::vector<uint64_t> FakeIngestServer::accepted() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->accepted;
}

uint64_t FakeIngestServer::accepted_samples() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->accepted_samples;
}

int FakeIngestServer::streams() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->streams;
}

void FakeIngestServer::RejectSeq(uint64_t seq) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->reject_seq = seq;
}

void FakeIngestServer::RefuseStreams(int n) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->refuse = n;
}

void FakeIngestServer::HoldAcks(bool hold) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->hold = hold;
}

void FakeIngestServer::SetOwners(std::vector<std::string> owners, bool redirect) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->owners = std::move(owners);
  impl_->redirect = redirect;
}

void FakeIngestServer::CancelStreams() {
  std::lock_guard<std::mutex> l(impl_->mu);
  for (grpc::ServerContext* c : impl_->contexts) c->TryCancel();
}

std::shared_ptr<const TransportSecurity> Plaintext() {
  AgentTransportConfig plaintext;
  plaintext.insecure = true;
  return *TransportSecurity::Create(plaintext);
}

bool WaitFor(const std::function<bool()>& condition, double timeout_seconds) {
  auto end = std::chrono::steady_clock::now() +
             std::chrono::duration<double>(timeout_seconds);
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace vigil::agent::testing
