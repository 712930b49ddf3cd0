// Ingest in cluster mode (docs/SCALING.md): a server takes the frames of the
// jobs its shard owns, turns the others away naming their owners, and hands
// over a node whose job moved to another shard.
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/cluster/ownership.h"
#include "server/ingest/ingest_service.h"
#include "storage/series_store.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

constexpr double kT0 = 1764000000.0;

cluster::Member M(const std::string& shard, const std::string& replica) {
  return {shard, replica, absl::StrCat(shard, replica, ":7070"),
          absl::StrCat("http://", shard, replica, ":8080")};
}

// Records what detection would be told.
class Recorder : public ShardedFrameObserver {
 public:
  int shards() const override { return 1; }
  int ShardOf(std::string_view) const override { return 0; }
  void OnFrame(int, const FrameView& frame) override {
    std::lock_guard<std::mutex> l(mu);
    frames.push_back(std::string(frame.job));
  }
  void NodeMovedAway(int, const FrameView& frame) override {
    std::lock_guard<std::mutex> l(mu);
    moved.push_back(std::string(frame.node));
  }
  void NodeHandedOver(int, const FrameView& frame) override {
    std::lock_guard<std::mutex> l(mu);
    handed_over.push_back(absl::StrCat(std::string(frame.node), "->", std::string(frame.job)));
  }
  std::mutex mu;
  std::vector<std::string> frames, moved, handed_over;
};

// An ingest service of shard s0 (of s0 and s1, two replicas each).
class ClusterIngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions store_options;
    store_options.clock = &clock_;
    store_ = NewMemoryStore(store_options);
    map_ = cluster::ShardMap({M("s0", "a"), M("s0", "b"), M("s1", "a"), M("s1", "b")});
    ownership_.SetMap(map_);
    IngestOptions options;
    options.store = store_.get();
    options.clock = &clock_;
    options.metrics = &metrics_;
    options.observer = &recorder_;
    options.ownership = &ownership_;
    service_ = std::make_unique<IngestService>(options);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    service_->AddTo(builder);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port_, 0);
    service_->Start();
    for (int i = 0; ours_.empty() || theirs_.empty(); ++i) {
      const std::string job = absl::StrCat("job", i);
      (map_.OwnerOfFamily(job) == "s0" ? ours_ : theirs_) = job;
    }
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    service_->Shutdown();
  }

  v1::FrameBatch First(const std::string& job) {
    v1::FrameBatch batch = Batch(1, "n1", "a");
    *batch.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
    *batch.add_frames() = Frame(job, kT0 - 10, {1}, {250});
    return batch;
  }

  FakeClock clock_;
  std::unique_ptr<SeriesStore> store_;
  IngestMetrics metrics_;
  Recorder recorder_;
  cluster::ShardMap map_;
  cluster::Ownership ownership_{"s0", R"(^(.*[^-_.])[-_.](?:r|run)\d+$)"};
  std::unique_ptr<IngestService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string ours_, theirs_;

  // What detection was told of hand-overs, once a worker told it (up to 5 s).
  std::vector<std::string> HandedOver() {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> l(recorder_.mu);
        if (!recorder_.handed_over.empty()) return recorder_.handed_over;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return {};
  }
};

TEST_F(ClusterIngestTest, OwnJobsAreTakenAndTheFirstAckNamesThePair) {
  IngestClient client(port_);
  client.Open();
  std::optional<v1::Ack> ack = client.Send(First(ours_));
  ASSERT_TRUE(ack.has_value());
  ASSERT_EQ(ack->owners_size(), 2);
  EXPECT_EQ(ack->owners(0), "s0a:7070");
  EXPECT_EQ(ack->owners(1), "s0b:7070");
  v1::FrameBatch next = Batch(2);
  *next.add_frames() = Frame(ours_, kT0 - 9, {1}, {251});
  ack = client.Send(next);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->owners_size(), 0) << "owners are sent again only when they change";
  // The standby joins: the next ack says so.
  ownership_.SetMap(cluster::ShardMap({M("s0", "a"), M("s0", "b"), M("s0", "c"), M("s1", "a")}));
  if (ownership_.Owner(ours_, "n1").ours) {
    v1::FrameBatch third = Batch(3);
    *third.add_frames() = Frame(ours_, kT0 - 8, {1}, {252});
    ack = client.Send(third);
    ASSERT_TRUE(ack.has_value());
    EXPECT_EQ(ack->owners_size(), 3);
  }
  EXPECT_TRUE(client.Finish().ok());
}

TEST_F(ClusterIngestTest, AnotherShardsJobIsTurnedAwayWithItsOwnersAndNothingStored) {
  IngestClient client(port_);
  client.Open();
  EXPECT_FALSE(client.Send(First(theirs_)).has_value());
  grpc::Status status = client.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("shard s1"), std::string::npos) << status.error_message();
  EXPECT_EQ(client.Trailer("vigil-owners"), "s1a:7070,s1b:7070");
  EXPECT_TRUE(store_->ListSeries({}).empty());
  EXPECT_EQ(metrics_.rejected[static_cast<size_t>(RejectReason::kNotOwner)].load(), 1u);
  std::lock_guard<std::mutex> l(recorder_.mu);
  EXPECT_TRUE(recorder_.frames.empty());
}

TEST_F(ClusterIngestTest, TheOldOwnerTakesTheJobEndAndHandsTheNodeOverAfter) {
  IngestClient client(port_);
  client.Open();
  ASSERT_TRUE(client.Send(First(ours_)).has_value());
  // The node's job changed: the frame carrying the end of ours is taken here.
  v1::FrameBatch end = Batch(2);
  v1::Frame frame = Frame(theirs_, kT0 - 9, {1}, {100});
  frame.mutable_job_end()->set_job(ours_);
  frame.mutable_job_end()->set_reason("job_changed");
  *end.add_frames() = frame;
  ASSERT_TRUE(client.Send(end).has_value());
  // The next frame of the new job goes to its owner.
  v1::FrameBatch next = Batch(3);
  *next.add_frames() = Frame(theirs_, kT0 - 8, {1}, {101});
  EXPECT_FALSE(client.Send(next).has_value());
  EXPECT_EQ(client.Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(client.Trailer("vigil-owners"), "s1a:7070,s1b:7070");
  EXPECT_EQ(HandedOver(), (std::vector<std::string>{absl::StrCat("n1->", theirs_)}));
  std::lock_guard<std::mutex> l(recorder_.mu);
  EXPECT_EQ(recorder_.frames.size(), 2u);
}

TEST_F(ClusterIngestTest, AJobTheMapMovesAwayIsHandedOverMidStream) {
  IngestClient client(port_);
  client.Open();
  ASSERT_TRUE(client.Send(First(ours_)).has_value());
  // Shards join until one of them wins the job.
  std::vector<cluster::Member> members = {M("s0", "a"), M("s1", "a")};
  for (int i = 0; i < 50 && ownership_.Owner(ours_, "n1").ours; ++i) {
    members.push_back(M(absl::StrCat("x", i), "a"));
    ownership_.SetMap(cluster::ShardMap(members));
  }
  ASSERT_FALSE(ownership_.Owner(ours_, "n1").ours);
  v1::FrameBatch next = Batch(2);
  *next.add_frames() = Frame(ours_, kT0 - 9, {1}, {251});
  EXPECT_FALSE(client.Send(next).has_value());
  EXPECT_EQ(client.Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(client.Trailer("vigil-owners"),
            absl::StrCat(ownership_.Owner(ours_, "n1").shard, "a:7070"));
  EXPECT_EQ(HandedOver(), (std::vector<std::string>{absl::StrCat("n1->", ours_)}));
  std::lock_guard<std::mutex> l(recorder_.mu);
  EXPECT_EQ(recorder_.frames.size(), 1u);
}

}  // namespace
}  // namespace vigil::testing
