// The frame log's replay (storage/frame_log.h) read record by record:
// records across the reader's buffer boundaries and larger than its
// buffer, and the ways a segment ends badly.
#include "storage/frame_log.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"

namespace vigil {
namespace {

// One frame of `n` samples at `ts`: ids from `first_id`, values from them.
struct TestFrame {
  double ts = 0;
  std::vector<SeriesId> ids = {};
  std::vector<double> values = {};
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

  // Bit for bit: -0 is not 0, and a NaN keeps its payload.
  static void ExpectSame(const std::vector<TestFrame>& want, const std::vector<TestFrame>& got) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].ts, want[i].ts) << i;
      EXPECT_EQ(got[i].ids, want[i].ids) << i;
      ASSERT_EQ(got[i].values.size(), want[i].values.size()) << i;
      for (size_t k = 0; k < want[i].values.size(); ++k) {
        EXPECT_EQ(std::bit_cast<uint64_t>(got[i].values[k]),
                  std::bit_cast<uint64_t>(want[i].values[k]))
            << "frame " << i << " value " << k << ": " << want[i].values[k];
      }
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
  Write({frames[0]});
  const uint64_t first = std::filesystem::file_size(Path());  // header and record
  Write({frames[0], frames[1]});
  const uint64_t second = std::filesystem::file_size(Path()) - first;
  Write(frames);
  const auto whole = std::filesystem::file_size(Path());
  {
    std::fstream f(Path(), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(first + second / 2));
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

// Every kind of value a node sends comes back bit for bit, with ids in any
// order; the coding's branches (integers, thousandths, floats, doubles)
// meet their edges.
TEST_F(FrameLogTest, EveryValueComesBackBitForBit) {
  const double nan_with_payload = std::bit_cast<double>(uint64_t{0x7ff8dead0000beef});
  const std::vector<double> values = {
      0.0, -0.0, 1, -1, 42, 1e6, 3.2e12, 9007199254740991.0, 9007199254740992.0,
      -9007199254740992.0, 1e300, -1e-300, 312.456, -0.001, 0.1, 0.001, 9007199254740.991,
      1.0 / 3, 2.5, 1.5e-45, std::numeric_limits<double>::denorm_min(),
      std::numeric_limits<double>::max(), std::numeric_limits<float>::max(),
      std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::quiet_NaN(), nan_with_payload, -nan_with_payload,
      123456.789, 0.5 + 1e-12};
  TestFrame frame{.ts = 1.7e9 + 0.123};
  const std::vector<SeriesId> ids = {5, 4, 0, 4'000'000'000u, 7, 1, 2, 3};
  for (size_t i = 0; i < values.size(); ++i) {
    frame.ids.push_back(ids[i % ids.size()] + static_cast<SeriesId>(i / ids.size()));
    frame.values.push_back(values[i]);
  }
  Write({frame, MakeFrame(1.7e9 + 1, 0, 0)});
  std::vector<TestFrame> got;
  absl::StatusOr<FrameLogReplay> r = Replay(false, &got);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectSame({frame, MakeFrame(1.7e9 + 1, 0, 0)}, got);
}

// A GPU node's frame as agents send it (consecutive ids; counters, watts to
// the milliwatt, small integers, a few floats) takes a few bytes a sample,
// not the 12 of an id and a double.
TEST_F(FrameLogTest, ANodesFrameTakesAFewBytesASample) {
  TestFrame frame{.ts = 1.7e9};
  for (SeriesId id = 1000; id < 1229; ++id) {
    frame.ids.push_back(id);
    switch (id % 4) {
      case 0: frame.values.push_back(3.2e12 + id * 7919.0); break;  // a byte counter
      case 1: frame.values.push_back(412.337 + id % 50); break;     // watts
      case 2: frame.values.push_back(id % 90); break;               // degrees, clocks, zeros
      default: frame.values.push_back(0.75); break;                 // a utilisation
    }
  }
  Write({frame});
  const auto bytes = std::filesystem::file_size(Path()) - 8 - 8;  // segment and record headers
  // 8 bytes a counter, 5 a wattage, 1-2 an integer or utilisation, and an
  // id's byte each: 4.8.
  EXPECT_LT(static_cast<double>(bytes) / 229, 5);
  std::vector<TestFrame> got;
  ASSERT_TRUE(Replay(false, &got).ok());
  ExpectSame({frame}, got);
}

// A segment written by hand from the format's description in
// storage/frame_log.h (by a Python encoder, not FrameLogWriter; the same
// bytes seed the frame log fuzzer: tests/fuzz/corpus/frame_log_fuzz/
// two_records_v2): integers, thousandths, a double, NaN, an empty frame.
TEST_F(FrameLogTest, AHandWrittenSegmentDecodesAsTheFormatSays) {
  constexpr char kSegment[] =
      "\x56\x47\x46\x4c\x02\x00\x00\x00\x23\x00\x00\x00\xb8\xa0\x14\xcb\x01\x00"
      "\x00\x00\x40\xfc\x54\xd9\x41\x04\x0a\x02\x02\x07\x00\x89\xab\xc9\x01\x80"
      "\x80\xa0\xb7\x87\xe9\x05\x03\x55\x55\x55\x55\x55\x55\xd5\x3f\x26\x00\x00"
      "\x00\xa2\x04\x9c\x85\x02\x00\x00\x40\x40\xfc\x54\xd9\x41\x04\x0a\x02\x02"
      "\x07\x08\x9d\x1f\x03\x00\x00\x00\x00\x00\x00\xf8\x7f\xa1\x9c\x01\x00\x00"
      "\x60\x40\xfc\x54\xd9\x41\x00";
  std::ofstream(Path(), std::ios::binary).write(kSegment, sizeof kSegment - 1);
  std::vector<TestFrame> got;
  absl::StatusOr<FrameLogReplay> r = Replay(false, &got);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->torn_bytes, 0u);
  const std::vector<SeriesId> ids = {5, 6, 7, 3};
  const std::vector<TestFrame> frames = {
      TestFrame{1.7e9, ids, {0, 412.337, 3.2e12, 1.0 / 3}},
      TestFrame{1.7e9 + 1, ids, {1, -0.5, std::numeric_limits<double>::quiet_NaN(), 2.5}},
      TestFrame{1.7e9 + 1.5, {}, {}}};
  ExpectSame(frames, got);

  // And the writer writes those very bytes.
  std::vector<FrameColumns> columns;
  for (const TestFrame& f : frames)
    columns.push_back(FrameColumns{.ts = f.ts, .ids = f.ids, .values = f.values});
  {
    auto writer = FrameLogWriter::Create(Path());
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Append({columns.data(), 1}, false).ok());
    ASSERT_TRUE((*writer)->Append({columns.data() + 1, 2}, false).ok());
  }
  std::ifstream in(Path(), std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, std::string(kSegment, sizeof kSegment - 1));
}

// A segment written before the compact coding (no segment header, fixed
// width records) is still replayed, torn tail and all.
TEST_F(FrameLogTest, Version1SegmentsAreStillReplayed) {
  const std::vector<TestFrame> frames = {MakeFrame(1, 3, 5), MakeFrame(2, 9, 0)};
  std::string file;
  for (const TestFrame& f : frames) {
    std::string payload;
    const auto put = [&payload](const void* p, size_t n) {
      payload.append(static_cast<const char*>(p), n);
    };
    const uint32_t count = 1, n = static_cast<uint32_t>(f.ids.size());
    put(&count, 4), put(&f.ts, 8), put(&n, 4);
    put(f.ids.data(), 4 * n), put(f.values.data(), 8 * n);
    const uint32_t length = static_cast<uint32_t>(payload.size());
    const uint32_t crc = Crc32c(payload.data(), payload.size());
    file.append(reinterpret_cast<const char*>(&length), 4);
    file.append(reinterpret_cast<const char*>(&crc), 4);
    file += payload;
  }
  const size_t valid = file.size();
  file += "torn";
  std::ofstream(Path(), std::ios::binary) << file;
  std::vector<TestFrame> got;
  absl::StatusOr<FrameLogReplay> r = Replay(true, &got);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 2u);
  EXPECT_EQ(r->valid_bytes, valid);
  EXPECT_EQ(r->torn_bytes, 4u);
  EXPECT_EQ(std::filesystem::file_size(Path()), valid);
  ExpectSame(frames, got);
}

// A segment of a version this code does not know (a later server's, after
// a downgrade) is refused and left as it is, never cut as if torn.
TEST_F(FrameLogTest, AnUnknownVersionIsRefusedAndKept) {
  Write({MakeFrame(1, 0, 10)});
  {
    std::fstream f(Path(), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(4);
    const uint32_t version = 3;
    f.write(reinterpret_cast<const char*>(&version), 4);
  }
  const auto whole = std::filesystem::file_size(Path());
  std::vector<TestFrame> got;
  absl::StatusOr<FrameLogReplay> r = Replay(true, &got);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("version 3"), std::string_view::npos) << r.status();
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(std::filesystem::file_size(Path()), whole);
}

// A segment cut short in its own header (a crash right after it was
// created) holds no record.
TEST_F(FrameLogTest, ASegmentCutInItsHeaderIsEmpty) {
  Write({});
  std::filesystem::resize_file(Path(), 5);
  std::vector<TestFrame> got;
  absl::StatusOr<FrameLogReplay> r = Replay(true, &got);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 0u);
  EXPECT_EQ(r->torn_bytes, 5u);
  EXPECT_EQ(std::filesystem::file_size(Path()), 0u);
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
