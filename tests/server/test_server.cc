#include "tests/server/test_server.h"

#include <chrono>

#include "gtest/gtest.h"

namespace vigil::testing {

ServerOptions TestOptions() {
  ServerOptions options;
  options.memory = true;
  options.grpc_listen = "127.0.0.1:0";
  options.http_listen = "127.0.0.1:0";
  options.http_threads = 2;
  options.grpc_insecure = true;
  return options;
}

TestServer::TestServer(const ServerOptions& options, FrameObserver* observer)
    : server(options, &clock, observer) {
  absl::Status s = server.Start();
  EXPECT_TRUE(s.ok()) << s;
}

IngestClient::IngestClient(int grpc_port)
    : channel_(grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port),
                                   grpc::InsecureChannelCredentials())),
      stub_(v1::Ingest::NewStub(channel_)) {}

void IngestClient::Open() {
  context_ = std::make_unique<grpc::ClientContext>();
  context_->set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
  stream_ = stub_->Stream(context_.get());
}

std::optional<v1::Ack> IngestClient::Send(const v1::FrameBatch& batch) {
  if (!stream_->Write(batch)) return std::nullopt;
  v1::Ack ack;
  if (!stream_->Read(&ack)) return std::nullopt;
  return ack;
}

std::string IngestClient::Trailer(const std::string& key) const {
  const auto& trailers = context_->GetServerTrailingMetadata();
  auto it = trailers.find(key);
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

grpc::Status IngestClient::Finish() {
  stream_->WritesDone();
  v1::Ack ack;
  while (stream_->Read(&ack)) {
  }
  return stream_->Finish();
}

v1::SeriesDef Def(uint32_t id, const std::string& metric,
                  const std::vector<std::pair<std::string, std::string>>& labels) {
  v1::SeriesDef def;
  def.set_id(id);
  def.set_metric(metric);
  for (const auto& [name, value] : labels) {
    v1::Label* label = def.add_labels();
    label->set_name(name);
    label->set_value(value);
  }
  return def;
}

v1::Frame Frame(const std::string& job, double ts, std::vector<uint32_t> ids,
                std::vector<double> values) {
  v1::Frame frame;
  frame.set_job(job);
  frame.set_ts(ts);
  for (uint32_t id : ids) frame.add_series_ids(id);
  for (double v : values) frame.add_values(v);
  return frame;
}

v1::FrameBatch Batch(uint64_t seq, const std::string& node,
                     const std::string& instance) {
  v1::FrameBatch batch;
  batch.set_seq(seq);
  if (!node.empty()) {
    batch.mutable_hello()->set_node(node);
    batch.mutable_hello()->set_agent_instance(instance);
    batch.mutable_hello()->set_interval_seconds(1);
  }
  return batch;
}

}  // namespace vigil::testing
