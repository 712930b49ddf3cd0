#include "server/ingest/frame_assembler.h"

#include "gtest/gtest.h"

namespace vigil {
namespace {

AssembledFrame Piece(const std::string& node, double ts, std::vector<uint32_t> ids,
                     std::vector<double> values, const std::string& job = "j") {
  AssembledFrame f;
  f.node = node;
  f.job = job;
  f.ts = ts;
  f.ids = std::move(ids);
  f.values = std::move(values);
  return f;
}

TEST(FrameAssemblerTest, PiecesOfOneScrapeLeaveAsOneFrameAfterTheGrace) {
  FrameAssembler a(/*grace_seconds=*/10, /*max_open_frames=*/100);
  EXPECT_EQ(a.Add(Piece("n1", 1000, {1, 2}, {10, 20}), /*now=*/1001), FrameAssembler::Added::kAdded);
  EXPECT_EQ(a.Add(Piece("n1", 1000, {3}, {30}), 1004), FrameAssembler::Added::kAdded);
  std::vector<AssembledFrame> out;
  a.TakeDue(1013, &out);  // 9 s after the last piece
  EXPECT_TRUE(out.empty());
  a.TakeDue(1014, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ids, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(out[0].values, (std::vector<double>{10, 20, 30}));
  EXPECT_EQ(a.open_frames(), 0u);
  // A piece of a frame that left is late.
  EXPECT_EQ(a.Add(Piece("n1", 1000, {4}, {40}), 1015), FrameAssembler::Added::kLate);
}

TEST(FrameAssemblerTest, ANodesFramesLeaveInTimeOrder) {
  FrameAssembler a(10, 100);
  a.Add(Piece("n1", 1015, {1}, {2}), 1016);
  a.Add(Piece("n1", 1000, {1}, {1}), 1020);  // a straggler of the older scrape
  a.Add(Piece("n2", 1000, {7}, {7}), 1016);
  std::vector<AssembledFrame> out;
  a.TakeDue(1026, &out);  // n1@1015 and n2@1000 are due; n1@1000 goes first
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> n1;
  for (const AssembledFrame& f : out) {
    if (f.node == "n1") n1.push_back(f.ts);
  }
  EXPECT_EQ(n1, (std::vector<double>{1000, 1015}));
}

TEST(FrameAssemblerTest, AResentSampleReplacesTheOldOne) {
  FrameAssembler a(0, 100);
  a.Add(Piece("n1", 1000, {1, 2, 1}, {10, 20, 11}), 1000);
  a.Add(Piece("n1", 1000, {2, 3}, {21, 30}), 1000);
  std::vector<AssembledFrame> out;
  a.TakeDue(1000, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ids, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(out[0].values, (std::vector<double>{11, 21, 30}));
}

TEST(FrameAssemblerTest, APieceOfAnotherJobIsDroppedAndTheJobEndIsKept) {
  FrameAssembler a(0, 100);
  a.Add(Piece("n1", 1000, {1}, {1}, "a"), 1000);
  AssembledFrame ending = Piece("n1", 1000, {2}, {2}, "a");
  ending.ended_job = "old";
  ending.end_reason = "job_changed";
  EXPECT_EQ(a.Add(std::move(ending), 1000), FrameAssembler::Added::kAdded);
  EXPECT_EQ(a.Add(Piece("n1", 1000, {3}, {3}, "b"), 1000), FrameAssembler::Added::kOtherJob);
  std::vector<AssembledFrame> out;
  a.TakeDue(1000, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ids, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(out[0].ended_job, "old");
}

TEST(FrameAssemblerTest, OverTheBoundTheLongestWaitingLeaveEarly) {
  FrameAssembler a(1000, /*max_open_frames=*/2);
  a.Add(Piece("n1", 1000, {1}, {1}), 1000);
  a.Add(Piece("n2", 1000, {1}, {1}), 1001);
  a.Add(Piece("n3", 1000, {1}, {1}), 1002);
  std::vector<AssembledFrame> out;
  a.TakeDue(1003, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].node, "n1");
  EXPECT_EQ(a.open_frames(), 2u);
  out.clear();
  a.TakeAll(&out);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(a.open_frames(), 0u);
}

}  // namespace
}  // namespace vigil
