// DiskBatchQueue: the BatchQueue contract, the bound, segment lifecycle,
// damaged segments and restarts, and a StreamClient spooling an outage.
#include "agent/disk_spool.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/stream_client.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_ingest_server.h"

namespace vigil::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeIngestServer;
using testing::WaitFor;

// A fresh directory under the test temp dir, removed afterwards.
class SpoolDir {
 public:
  SpoolDir() {
    const ::testing::TestInfo* t =
        ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(::testing::TempDir()) /
            (std::string("disk_spool_") + t->name() + "_" +
             std::to_string(getpid()));
    fs::remove_all(path_);
  }
  ~SpoolDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }
  // Segment files, oldest first.
  std::vector<fs::path> Segments() const {
    std::vector<fs::path> out;
    for (const fs::directory_entry& e : fs::directory_iterator(path_)) {
      if (e.path().extension() == ".seg") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  uintmax_t SegmentBytes() const {
    uintmax_t n = 0;
    for (const fs::path& p : Segments()) n += fs::file_size(p);
    return n;
  }

 private:
  fs::path path_;
};

std::unique_ptr<DiskBatchQueue> OpenOrDie(const std::string& dir,
                                          size_t max_bytes) {
  absl::StatusOr<std::unique_ptr<DiskBatchQueue>> q =
      DiskBatchQueue::Open(dir, max_bytes);
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? std::move(*q) : nullptr;
}

// A batch with `seq` and one frame of `values` samples.
std::shared_ptr<const v1::FrameBatch> MakeBatch(uint64_t seq, int values = 1) {
  auto b = std::make_shared<v1::FrameBatch>();
  b->set_seq(seq);
  v1::Frame* f = b->add_frames();
  f->set_job("llama-70b");
  f->set_step(static_cast<int64_t>(seq));
  f->set_ts(1764000000.0 + static_cast<double>(seq));
  for (int i = 0; i < values; ++i) {
    f->add_series_ids(static_cast<uint32_t>(i));
    f->add_values(static_cast<double>(seq) * 1000 + i + 0.25);
  }
  return b;
}

bool SameBatch(const v1::FrameBatch& a, const v1::FrameBatch& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// The MemoryBatchQueue behaviour, on disk.

TEST(DiskSpoolTest, PushNextAfterRemoveUpToAndPopFront) {
  SpoolDir dir;
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->NextAfter(0), nullptr);
  EXPECT_EQ(q->PopFront(), nullptr);
  for (uint64_t s : {2, 4, 6, 8}) ASSERT_TRUE(q->Push(MakeBatch(s)).ok());
  EXPECT_EQ(q->size(), 4u);
  EXPECT_EQ(q->bytes(), 4 * MakeBatch(2)->ByteSizeLong());
  EXPECT_EQ(q->NextAfter(0)->seq(), 2u);
  EXPECT_EQ(q->NextAfter(2)->seq(), 4u);
  EXPECT_EQ(q->NextAfter(5)->seq(), 6u);
  EXPECT_EQ(q->NextAfter(8), nullptr);
  EXPECT_TRUE(SameBatch(*q->NextAfter(3), *MakeBatch(4)));

  EXPECT_EQ(q->RemoveUpTo(5), 2u);
  EXPECT_EQ(q->RemoveUpTo(5), 0u);
  EXPECT_EQ(q->NextAfter(0)->seq(), 6u);
  std::shared_ptr<const v1::FrameBatch> head = q->PopFront();
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(SameBatch(*head, *MakeBatch(6)));
  EXPECT_EQ(q->size(), 1u);
  EXPECT_EQ(q->RemoveUpTo(100), 1u);
  EXPECT_EQ(q->size(), 0u);
  EXPECT_EQ(q->bytes(), 0u);
  EXPECT_EQ(q->dropped(), 0u);
  EXPECT_TRUE(dir.Segments().empty());
  // After everything is gone a new push starts a new segment.
  ASSERT_TRUE(q->Push(MakeBatch(9)).ok());
  EXPECT_EQ(q->NextAfter(0)->seq(), 9u);
}

TEST(DiskSpoolTest, RejectsSeqThatDoesNotIncrease) {
  SpoolDir dir;
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  ASSERT_TRUE(q->Push(MakeBatch(5)).ok());
  EXPECT_EQ(q->Push(MakeBatch(5)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q->Push(MakeBatch(3)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q->size(), 1u);
}

TEST(DiskSpoolTest, OpenRejectsBadArguments) {
  SpoolDir dir;
  EXPECT_EQ(DiskBatchQueue::Open(dir.path(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DiskBatchQueue::Open("", 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DiskSpoolTest, FileInPlaceOfDirIsAClearError) {
  SpoolDir dir;
  fs::create_directories(dir.path());
  std::string file = dir.path() + "/not-a-dir";
  std::ofstream(file) << "x";
  for (const std::string& path : {file, file + "/spool"}) {
    absl::StatusOr<std::unique_ptr<DiskBatchQueue>> q =
        DiskBatchQueue::Open(path, 1 << 20);
    EXPECT_EQ(q.status().code(), absl::StatusCode::kFailedPrecondition) << path;
    EXPECT_NE(q.status().message().find("not a directory"), std::string::npos)
        << q.status();
  }
}

TEST(DiskSpoolTest, SecondOpenOfTheSameDirIsRefused) {
  SpoolDir dir;
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  absl::StatusOr<std::unique_ptr<DiskBatchQueue>> again =
      DiskBatchQueue::Open(dir.path(), 1 << 20);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("in use"), std::string::npos);
  q.reset();
  EXPECT_TRUE(DiskBatchQueue::Open(dir.path(), 1 << 20).ok());
}

// An hour at 1 Hz of an 8-GPU node (~229 samples a frame) fits the default
// bound and comes back whole and in order.
TEST(DiskSpoolTest, HourOfEightGpuFramesComesBackExactlyInOrder) {
  SpoolDir dir;
  std::unique_ptr<DiskBatchQueue> q =
      OpenOrDie(dir.path(), kDefaultSpoolMaxBytes);
  for (uint64_t s = 1; s <= 3600; ++s) {
    ASSERT_TRUE(q->Push(MakeBatch(s, 229)).ok());
  }
  EXPECT_EQ(q->size(), 3600u);
  EXPECT_EQ(q->dropped(), 0u);
  EXPECT_LE(q->disk_bytes(), kDefaultSpoolMaxBytes);
  EXPECT_EQ(q->disk_bytes(), dir.SegmentBytes());
  EXPECT_GT(q->segments(), 1u);  // rolled at 4 MiB
  uint64_t seq = 0;
  for (uint64_t want = 1; want <= 3600; ++want) {
    std::shared_ptr<const v1::FrameBatch> b = q->NextAfter(seq);
    ASSERT_NE(b, nullptr) << want;
    ASSERT_TRUE(SameBatch(*b, *MakeBatch(want, 229))) << want;
    seq = b->seq();
  }
  EXPECT_EQ(q->NextAfter(seq), nullptr);
}

TEST(DiskSpoolTest, FullSpoolDropsOldestSegmentsAndKeepsNewest) {
  SpoolDir dir;
  const size_t max_bytes = 64 << 10;
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), max_bytes);
  const uint64_t n = 500;  // ~2.3 KB each: ~1.1 MB in all
  for (uint64_t s = 1; s <= n; ++s) {
    ASSERT_TRUE(q->Push(MakeBatch(s, 229)).ok());
    ASSERT_LE(q->disk_bytes(), max_bytes);
    ASSERT_EQ(q->NextAfter(s - 1)->seq(), s);  // the newest is held
  }
  EXPECT_GT(q->dropped(), 400u);
  EXPECT_EQ(q->size() + q->dropped(), n);
  EXPECT_EQ(q->disk_bytes(), dir.SegmentBytes());
  // What is held is the newest run, in order.
  uint64_t first = q->NextAfter(0)->seq();
  EXPECT_EQ(first, n - q->size() + 1);
  uint64_t seq = 0, count = 0;
  while (std::shared_ptr<const v1::FrameBatch> b = q->NextAfter(seq)) {
    EXPECT_EQ(b->seq(), first + count);
    seq = b->seq();
    ++count;
  }
  EXPECT_EQ(count, q->size());
}

TEST(DiskSpoolTest, BatchBiggerThanTheBoundIsStillKept) {
  SpoolDir dir;
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1000);
  ASSERT_TRUE(q->Push(MakeBatch(1, 10)).ok());
  ASSERT_TRUE(q->Push(MakeBatch(2, 500)).ok());  // ~6 KB
  EXPECT_EQ(q->size(), 1u);
  EXPECT_EQ(q->dropped(), 1u);
  EXPECT_TRUE(SameBatch(*q->NextAfter(0), *MakeBatch(2, 500)));
}

TEST(DiskSpoolTest, AcknowledgedSegmentsAreDeleted) {
  SpoolDir dir;
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  for (uint64_t s = 1; s <= 300; ++s) {
    ASSERT_TRUE(q->Push(MakeBatch(s, 229)).ok());  // 128 KiB segments
  }
  size_t segments = dir.Segments().size();
  uintmax_t bytes = dir.SegmentBytes();
  ASSERT_GE(segments, 4u);
  EXPECT_EQ(q->segments(), segments);

  EXPECT_EQ(q->RemoveUpTo(150), 150u);
  EXPECT_LT(dir.Segments().size(), segments);
  EXPECT_LT(dir.SegmentBytes(), bytes);
  EXPECT_EQ(q->disk_bytes(), dir.SegmentBytes());
  // A partly acknowledged segment stays, and serves the rest.
  EXPECT_TRUE(SameBatch(*q->NextAfter(0), *MakeBatch(151, 229)));
  EXPECT_TRUE(SameBatch(*q->NextAfter(299), *MakeBatch(300, 229)));

  EXPECT_EQ(q->RemoveUpTo(300), 150u);
  EXPECT_TRUE(dir.Segments().empty());
  EXPECT_EQ(q->disk_bytes(), 0u);
  EXPECT_EQ(q->dropped(), 0u);
}

// Writes 10 batches through a spool, closes it, damages the last segment
// with `damage` and reopens; returns the reopened spool's dropped count.
uint64_t DroppedAfterReopen(
    const SpoolDir& dir,
    const std::function<void(const fs::path&, size_t record_bytes)>& damage) {
  {
    std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
    for (uint64_t s = 1; s <= 10; ++s) EXPECT_TRUE(q->Push(MakeBatch(s)).ok());
  }
  std::vector<fs::path> segments = dir.Segments();
  EXPECT_EQ(segments.size(), 1u);
  size_t record_bytes = 8 + MakeBatch(1)->ByteSizeLong();
  EXPECT_EQ(fs::file_size(segments[0]), 10 * record_bytes);
  if (damage) damage(segments[0], record_bytes);
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  // No dictionary was kept, so the batches' series are unknown: dropped.
  EXPECT_EQ(q->size(), 0u);
  EXPECT_TRUE(q->LeftSeries().empty());
  EXPECT_EQ(q->NextAfter(0), nullptr);
  EXPECT_TRUE(dir.Segments().empty());
  // The reopened spool works from seq 1 again, as a new agent process does.
  EXPECT_TRUE(q->Push(MakeBatch(1)).ok());
  EXPECT_EQ(q->NextAfter(0)->seq(), 1u);
  return q->dropped();
}

TEST(DiskSpoolTest, ReopenDropsBatchesNamingSeriesTheDictionaryLacks) {
  SpoolDir dir;
  EXPECT_EQ(DroppedAfterReopen(dir, nullptr), 10u);
}

TEST(DiskSpoolTest, ReopenStopsAtATornTail) {
  SpoolDir dir;
  EXPECT_EQ(DroppedAfterReopen(dir,
                               [](const fs::path& p, size_t record) {
                                 fs::resize_file(p, 9 * record + 5);
                               }),
            9u);
}

TEST(DiskSpoolTest, ReopenStopsAtACorruptRecord) {
  SpoolDir dir;
  EXPECT_EQ(DroppedAfterReopen(
                dir,
                [](const fs::path& p, size_t record) {
                  std::fstream f(
                      p, std::ios::in | std::ios::out | std::ios::binary);
                  f.seekp(static_cast<std::streamoff>(6 * record + 8 + 3));
                  f.put('\x7f');
                }),
            6u);
}

// The dictionary entry of series id `id`.
v1::SeriesDef Def(uint32_t id) {
  v1::SeriesDef def;
  def.set_id(id);
  def.set_metric("gpu_power_watts");
  v1::Label* label = def.add_labels();
  label->set_name("gpu");
  label->set_value(std::to_string(id));
  return def;
}

TEST(DiskSpoolTest, ReopenResendsBatchesWithTheirDictionary) {
  SpoolDir dir;
  {
    std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
    ASSERT_TRUE(q->KeepSeries(Def(0)).ok());
    ASSERT_TRUE(q->KeepSeries(Def(1)).ok());
    EXPECT_EQ(q->KeepSeries(Def(5)).code(), absl::StatusCode::kInvalidArgument);
    for (uint64_t s = 1; s <= 10; ++s) {
      ASSERT_TRUE(q->Push(MakeBatch(s, 2)).ok());
    }
    q->RemoveUpTo(3);  // acknowledged before the process went away
  }
  {
    std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
    EXPECT_EQ(q->size(), 7u);
    EXPECT_EQ(q->dropped(), 0u);
    EXPECT_EQ(q->newest_seq(), 10u);
    ASSERT_EQ(q->LeftSeries().size(), 2u);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        q->LeftSeries()[1], Def(1)));
    for (uint64_t s = 4; s <= 10; ++s) {
      std::shared_ptr<const v1::FrameBatch> b = q->NextAfter(s - 1);
      ASSERT_NE(b, nullptr);
      EXPECT_TRUE(SameBatch(*b, *MakeBatch(s, 2))) << s;
    }
    // The new process goes on: the next id and seq follow the old ones.
    ASSERT_TRUE(q->KeepSeries(Def(2)).ok());
    ASSERT_TRUE(q->Push(MakeBatch(11, 3)).ok());
    EXPECT_EQ(q->RemoveUpTo(11), 8u);
  }
  {
    // Everything acknowledged: a later process starts from nothing...
    std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
    EXPECT_EQ(q->size(), 0u);
    EXPECT_TRUE(q->LeftSeries().empty());
    EXPECT_TRUE(q->KeepSeries(Def(0)).ok());
    // ...at seq 1, which the old watermark (11) must not swallow.
    ASSERT_TRUE(q->Push(MakeBatch(1)).ok());
  }
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  EXPECT_EQ(q->size(), 1u);
}

TEST(DiskSpoolTest, ReopenKeepsWhatPrecedesATornTail) {
  SpoolDir dir;
  {
    std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
    ASSERT_TRUE(q->KeepSeries(Def(0)).ok());
    for (uint64_t s = 1; s <= 10; ++s) ASSERT_TRUE(q->Push(MakeBatch(s)).ok());
  }
  size_t record_bytes = 8 + MakeBatch(1)->ByteSizeLong();
  fs::resize_file(dir.Segments()[0], 9 * record_bytes + 5);
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  EXPECT_EQ(q->size(), 9u);
  EXPECT_EQ(q->newest_seq(), 9u);
  ASSERT_TRUE(q->Push(MakeBatch(10)).ok());  // the seq the torn batch had
  EXPECT_EQ(q->NextAfter(9)->seq(), 10u);
}

TEST(DiskSpoolTest, BatchCorruptedOnDiskIsSkippedAndCounted) {
  SpoolDir dir;
  std::unique_ptr<DiskBatchQueue> q = OpenOrDie(dir.path(), 1 << 20);
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_TRUE(q->Push(MakeBatch(s)).ok());
  size_t record = 8 + MakeBatch(1)->ByteSizeLong();
  {
    std::fstream f(dir.Segments()[0],
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(record + 8 + 3));  // batch 2
    f.put('\x7f');
  }
  EXPECT_EQ(q->NextAfter(0)->seq(), 1u);
  EXPECT_EQ(q->NextAfter(1)->seq(), 3u);
  EXPECT_EQ(q->dropped(), 1u);
  EXPECT_EQ(q->PopFront()->seq(), 1u);
  EXPECT_EQ(q->PopFront()->seq(), 3u);
  EXPECT_EQ(q->PopFront(), nullptr);
  EXPECT_EQ(q->dropped(), 1u);
}

// A StreamClient spooling to disk through a server outage delivers
// everything, once, when the server returns.
TEST(DiskSpoolTest, StreamClientOutageLosesNothing) {
  SpoolDir dir;
  std::optional<FakeIngestServer> server(std::in_place);
  int port = server->port();
  StreamClientOptions options;
  options.server = server->address();
  options.node = "n003";
  options.security = testing::Plaintext();
  options.initial_backoff_seconds = 0.01;
  options.max_backoff_seconds = 0.05;
  absl::StatusOr<std::unique_ptr<StreamClient>> client =
      StreamClient::Create(options, OpenOrDie(dir.path(), 1 << 20));
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<uint32_t> ids;
  for (int gpu = 0; gpu < 8; ++gpu) {
    ids.push_back(*(*client)->RegisterSeries(
        {"gpu_power_watts", {{"gpu", std::to_string(gpu)}}}));
  }
  auto send = [&](int from, int to) {
    for (int i = from; i <= to; ++i) {
      v1::Frame f;
      f.set_ts(1764000000.0 + i);
      for (uint32_t id : ids) {
        f.add_series_ids(id);
        f.add_values(i + id);
      }
      ASSERT_EQ(*(*client)->Enqueue({f}), static_cast<uint64_t>(i));
    }
  };
  (*client)->Start();
  send(1, 5);
  ASSERT_TRUE((*client)->WaitForAcked(5, RealClock()->Now() + 20));
  server.reset();
  send(6, 400);
  ASSERT_TRUE(WaitFor([&] { return (*client)->stats().reconnects >= 2; }));
  EXPECT_FALSE(dir.Segments().empty());
  server.emplace(port);
  ASSERT_TRUE((*client)->WaitForAcked(400, RealClock()->Now() + 20));
  std::vector<uint64_t> want;
  for (uint64_t s = 6; s <= 400; ++s) want.push_back(s);
  EXPECT_EQ(server->accepted(), want);
  StreamClientStats s = (*client)->stats();
  EXPECT_EQ(s.batches_dropped, 0u);
  EXPECT_EQ(s.pending_batches, 0u);
  EXPECT_TRUE(dir.Segments().empty());
}

// The agent restarts while the server is away: the new process resends
// what the old one queued, with the old series ids, then its own batches.
TEST(DiskSpoolTest, AgentRestartDuringAnOutageLosesNothing) {
  SpoolDir dir;
  StreamClientOptions options;
  options.node = "n004";
  options.security = testing::Plaintext();
  options.initial_backoff_seconds = 0.01;
  options.max_backoff_seconds = 0.05;
  auto frame = [](int i, const std::vector<uint32_t>& ids) {
    v1::Frame f;
    f.set_ts(1764000000.0 + i);
    for (uint32_t id : ids) {
      f.add_series_ids(id);
      f.add_values(i + id);
    }
    return f;
  };
  std::vector<uint32_t> ids;
  {
    options.server = "127.0.0.1:1";  // never started: the server is away
    absl::StatusOr<std::unique_ptr<StreamClient>> client =
        StreamClient::Create(options, OpenOrDie(dir.path(), 1 << 20));
    ASSERT_TRUE(client.ok()) << client.status();
    for (int gpu = 0; gpu < 8; ++gpu) {
      ids.push_back(*(*client)->RegisterSeries(
          {"gpu_power_watts", {{"gpu", std::to_string(gpu)}}}));
    }
    for (int i = 1; i <= 50; ++i) {
      ASSERT_EQ(*(*client)->Enqueue({frame(i, ids)}), static_cast<uint64_t>(i));
    }
  }
  FakeIngestServer server;
  options.server = server.address();
  absl::StatusOr<std::unique_ptr<StreamClient>> client =
      StreamClient::Create(options, OpenOrDie(dir.path(), 1 << 20));
  ASSERT_TRUE(client.ok()) << client.status();
  // Same keys, same ids; a new series gets the next one.
  for (int gpu = 0; gpu < 8; ++gpu) {
    EXPECT_EQ(*(*client)->RegisterSeries(
                  {"gpu_power_watts", {{"gpu", std::to_string(gpu)}}}),
              ids[gpu]);
  }
  uint32_t temp = *(*client)->RegisterSeries(
      {"gpu_temperature_celsius", {{"gpu", "0"}}});
  EXPECT_EQ(temp, 8u);
  (*client)->Start();
  for (int i = 51; i <= 60; ++i) {
    ASSERT_EQ(*(*client)->Enqueue({frame(i, {ids[0], temp})}),
              static_cast<uint64_t>(i));
  }
  ASSERT_TRUE((*client)->WaitForAcked(60, RealClock()->Now() + 20));
  std::vector<uint64_t> want;
  for (uint64_t s = 1; s <= 60; ++s) want.push_back(s);
  EXPECT_EQ(server.accepted(), want);
  EXPECT_EQ(server.accepted_samples(), 50u * 8 + 10u * 2);
  EXPECT_EQ((*client)->stats().batches_dropped, 0u);
}

}  // namespace
}  // namespace vigil::agent
