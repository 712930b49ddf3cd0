// The frame log's replay (storage/frame_log.h) read record by record:
// records across the reader's buffer boundaries and larger than its
// buffer, and the ways a segment ends badly.
#include "storage/frame_log.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"

namespace vigil {
namespace {

// One frame of `n` samples at `ts`: ids from `first_id`, values from them.
struct TestFrame {
  double ts;
  std::vector<SeriesId> ids;
  std::vector<double> values;
};

TestFrame MakeFrame(double ts, uint32_t first_id, size_t n) {
  TestFrame f{.ts = ts};
  for (size_t i = 0; i < n; ++i) {
    f.ids.push_back(first_id + static_cast<SeriesId>(i));
    f.values.push_back(ts * 1000 + static_cast<double>(i) / 8);
  }
  return f;
}

class FrameLogTest : public ::testing::Test {
 protected:
  std::string Path() const { return dir_.path() + "/frames-00000000000000000001.log"; }

  // Writes each frame as a record of its own.
  void Write(const std::vector<TestFrame>& frames) {
    auto writer = FrameLogWriter::Create(Path());
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const TestFrame& f : frames) {
      FrameColumns columns{.ts = f.ts, .ids = f.ids, .values = f.values};
      ASSERT_TRUE((*writer)->Append({&columns, 1}, false).ok());
    }
  }

  // Replays the segment, collecting its frames.
  absl::StatusOr<FrameLogReplay> Replay(bool truncate, std::vector<TestFrame>* out) {
    return ReplayFrameLogSegment(Path(), truncate, [out](std::span<const FrameColumns> frames) {
      for (const FrameColumns& f : frames)
        out->push_back(TestFrame{.ts = f.ts,
                                 .ids = {f.ids.begin(), f.ids.end()},
                                 .values = {f.values.begin(), f.values.end()}});
      return absl::OkStatus();
    });
  }

  static void ExpectSame(const std::vector<TestFrame>& want, const std::vector<TestFrame>& got) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].ts, want[i].ts) << i;
      EXPECT_EQ(got[i].ids, want[i].ids) << i;
      EXPECT_EQ(got[i].values, want[i].values) << i;
    }
  }

  testing::TestDir dir_;
};

// Records of every size up to three times the reader's 1 MiB buffer, so
// that records start, end and straddle its boundaries at many offsets.
TEST_F(FrameLogTest, RecordsOfEverySizeReplayInOrder) {
  std::vector<TestFrame> frames;
  double ts = 1.7e9;
  for (size_t n : {0, 1, 229, 1, 90'000, 3, 87'381, 87'382, 262'000, 5, 100'000, 229})
    frames.push_back(MakeFrame(ts++, 7, n));
  for (int i = 0; i < 2000; ++i) frames.push_back(MakeFrame(ts++, i, 1 + i % 300));
  Write(frames);
  std::vector<TestFrame> got;
  absl::StatusOr<FrameLogReplay> r = Replay(false, &got);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, frames.size());
  EXPECT_EQ(r->torn_bytes, 0u);
  EXPECT_EQ(r->valid_bytes, std::filesystem::file_size(Path()));
  ExpectSame(frames, got);
}

// A header whose length runs past the end of the file (a torn write, or a
// corrupt length) ends the replay there, whatever length it claims.
TEST_F(FrameLogTest, LengthPastTheEndIsATornTail) {
  const std::vector<TestFrame> frames = {MakeFrame(1, 0, 100'000), MakeFrame(2, 0, 10)};
  Write(frames);
  const auto whole = std::filesystem::file_size(Path());
  for (const uint32_t length : {0x3fffffffu, 0xffffffffu, 200u}) {
    {
      std::ofstream out(Path(), std::ios::binary | std::ios::app);
      out.write(reinterpret_cast<const char*>(&length), 4);
      out.write("\0\0\0\0", 4);
      out.write("partial", 7);
    }
    std::vector<TestFrame> got;
    absl::StatusOr<FrameLogReplay> r = Replay(true, &got);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->records, 2u) << length;
    EXPECT_EQ(r->valid_bytes, whole);
    EXPECT_EQ(r->torn_bytes, 15u);
    EXPECT_EQ(std::filesystem::file_size(Path()), whole);
    ExpectSame(frames, got);
  }
}

// A record whose payload was damaged stops the replay before it: what came
// before is applied, the rest reported as torn.
TEST_F(FrameLogTest, DamagedRecordStopsTheReplay) {
  const std::vector<TestFrame> frames = {MakeFrame(1, 0, 50), MakeFrame(2, 0, 200'000),
                                         MakeFrame(3, 0, 50)};
  Write(frames);
  const auto whole = std::filesystem::file_size(Path());
  const uint64_t first = 8 + 4 + 12 + 12 * 50;
  {
    std::fstream f(Path(), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(first + 8 + 1'500'000));
    f.put('\x5a');
  }
  std::vector<TestFrame> got;
  absl::StatusOr<FrameLogReplay> r = Replay(false, &got);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 1u);
  EXPECT_EQ(r->valid_bytes, first);
  EXPECT_EQ(r->torn_bytes, whole - first);
  ExpectSame({frames[0]}, got);
}

// What apply refuses stops the replay with its error; nothing is cut.
TEST_F(FrameLogTest, ApplyErrorStopsAndKeepsTheFile) {
  Write({MakeFrame(1, 0, 10), MakeFrame(2, 0, 10)});
  const auto whole = std::filesystem::file_size(Path());
  int calls = 0;
  absl::StatusOr<FrameLogReplay> r =
      ReplayFrameLogSegment(Path(), true, [&calls](std::span<const FrameColumns>) {
        return ++calls == 2 ? absl::DataLossError("refused") : absl::OkStatus();
      });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::filesystem::file_size(Path()), whole);
}

}  // namespace
}  // namespace vigil
