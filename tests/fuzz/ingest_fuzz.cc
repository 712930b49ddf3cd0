// Fuzzes ingest batch handling (server/ingest/ingest_service.h) end to end: a
// real in-process server (memory store, detection on) on loopback, fed
// a stream of FrameBatch messages as any agent - or anyone holding a node
// token - could send them. Every batch must be acked or end the stream
// with a status; nothing may crash, hang or trip ASan/UBSan.
//
// Input: a run of [u16 length][serialized FrameBatch]; pieces that do not
// parse are skipped. The first batch gets a hello when it has none, so
// most inputs get past the stream's first check.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"
#include "tests/fuzz/loopback_server.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace {

struct Fixture {
  Fixture() : server(Options(), &clock) {
    if (!server.Start().ok()) __builtin_trap();
    stub = vigil::v1::Ingest::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server.grpc_port()),
        grpc::InsecureChannelCredentials()));
  }
  static vigil::ServerOptions Options() {
    return vigil::fuzz::LoopbackServerOptions(2);
  }
  vigil::FakeClock clock{1764000000.0};
  vigil::VigilServer server;
  std::unique_ptr<vigil::v1::Ingest::Stub> stub;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();  // lives for the process
  std::string_view in(reinterpret_cast<const char*>(data), size);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto stream = fixture->stub->Stream(&context);
  bool first = true;
  while (in.size() >= 2) {
    const size_t n = static_cast<uint8_t>(in[0]) | (static_cast<uint8_t>(in[1]) << 8);
    in.remove_prefix(2);
    const std::string_view piece = in.substr(0, n);
    in.remove_prefix(piece.size());
    vigil::v1::FrameBatch batch;
    if (!batch.ParseFromArray(piece.data(), static_cast<int>(piece.size()))) continue;
    if (first && !batch.has_hello()) {
      batch.mutable_hello()->set_node("fuzz-node");
      batch.mutable_hello()->set_agent_instance("fuzz");
    }
    first = false;
    vigil::v1::Ack ack;
    if (!stream->Write(batch) || !stream->Read(&ack)) break;
    if (ack.acked_seq() != batch.seq()) __builtin_trap();
  }
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  // A crash or a hang shows as UNAVAILABLE / DEADLINE_EXCEEDED here, and
  // an internal error as INTERNAL/UNKNOWN: none of them is a clean refusal.
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      __builtin_trap();
    default:
      break;
  }
  return 0;
}
