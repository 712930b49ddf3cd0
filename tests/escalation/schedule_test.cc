#include <optional>
#include <string>

#include "escalation/escalation.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

constexpr double kStart = 1796029200;  // 2026-11-30T09:00:00Z, a Monday
constexpr double kHour = 3600;
constexpr double kDay = 86400;
constexpr double kWeek = 7 * kDay;

RotationLayer Layer(double start, double period,
                    std::vector<std::string> users) {
  RotationLayer layer;
  layer.start_ts = start;
  layer.period_seconds = period;
  layer.users = std::move(users);
  return layer;
}

// Who OnCallAt names, or "" when nobody is on call.
std::string OnCall(const Schedule& s, double ts) {
  absl::StatusOr<std::string> user = OnCallAt(s, ts);
  if (!user.ok()) {
    EXPECT_EQ(user.status().code(), absl::StatusCode::kNotFound);
    return "";
  }
  return *user;
}

struct OnCallCase {
  double offset;  // from kStart
  const char* user;
};

TEST(OnCallAtTest, WeeklyRotationHandsOffOnTheBoundary) {
  Schedule s;
  s.name = "primary";
  s.layers = {Layer(kStart, kWeek, {"alice", "bob", "carol"})};
  for (const OnCallCase& c : std::vector<OnCallCase>{
           {-1, ""},
           {-kWeek, ""},
           {0, "alice"},
           {1, "alice"},
           {3.5 * kDay, "alice"},
           {kWeek - 0.001, "alice"},
           {kWeek, "bob"},
           {kWeek + 1, "bob"},
           {2 * kWeek - 1, "bob"},
           {2 * kWeek, "carol"},
           {3 * kWeek - 1, "carol"},
           {3 * kWeek, "alice"},
           {100 * kWeek, "bob"},  // 100 mod 3 = 1
           {100 * kWeek + 6 * kDay, "bob"},
       }) {
    EXPECT_EQ(OnCall(s, kStart + c.offset), c.user) << "offset " << c.offset;
  }
}

TEST(OnCallAtTest, DailyRotation) {
  Schedule s;
  s.layers = {Layer(kStart, kDay, {"alice", "bob"})};
  for (const OnCallCase& c : std::vector<OnCallCase>{
           {-kHour, ""},
           {0, "alice"},
           {23 * kHour, "alice"},
           {kDay - 1, "alice"},
           {kDay, "bob"},
           {2 * kDay - 1, "bob"},
           {2 * kDay, "alice"},
           {365 * kDay, "bob"},
       }) {
    EXPECT_EQ(OnCall(s, kStart + c.offset), c.user) << "offset " << c.offset;
  }
}

TEST(OnCallAtTest, OverridesWinAndTheNewestCoveringOneWins) {
  Schedule s;
  s.layers = {Layer(kStart, kWeek, {"alice", "bob"})};
  s.overrides = {{"carol", kStart + kDay, kStart + 3 * kDay},
                 // Listed later: newer, wins where both cover.
                 {"dave", kStart + 2 * kDay, kStart + 2 * kDay + 6 * kHour},
                 // Before the rotation starts: still someone on call.
                 {"erin", kStart - kDay, kStart - kHour}};
  for (const OnCallCase& c : std::vector<OnCallCase>{
           {-2 * kDay, ""},
           {-kDay, "erin"},
           {-kHour - 1, "erin"},
           {-kHour, ""},  // end is exclusive
           {0, "alice"},
           {kDay - 1, "alice"},
           {kDay, "carol"},
           {2 * kDay - 1, "carol"},
           {2 * kDay, "dave"},
           {2 * kDay + 6 * kHour - 1, "dave"},
           {2 * kDay + 6 * kHour, "carol"},
           {3 * kDay - 1, "carol"},
           {3 * kDay, "alice"},
           {kWeek, "bob"},
       }) {
    EXPECT_EQ(OnCall(s, kStart + c.offset), c.user) << "offset " << c.offset;
  }
}

TEST(OnCallAtTest, TheLayerThatStartedLastWins) {
  Schedule s;
  // A new daily rotation replaces the weekly one from week 2; a layer
  // listed first but starting latest takes over from week 4.
  s.layers = {Layer(kStart + 4 * kWeek, kWeek, {"zoe"}),
              Layer(kStart, kWeek, {"alice", "bob"}),
              Layer(kStart + 2 * kWeek, kDay, {"carol", "dave"})};
  for (const OnCallCase& c : std::vector<OnCallCase>{
           {0, "alice"},
           {kWeek, "bob"},
           {2 * kWeek - 1, "bob"},
           {2 * kWeek, "carol"},
           {2 * kWeek + kDay, "dave"},
           {2 * kWeek + 2 * kDay, "carol"},
           {4 * kWeek - 1, "dave"},  // day 13 of the daily layer
           {4 * kWeek, "zoe"},
           {10 * kWeek, "zoe"},
       }) {
    EXPECT_EQ(OnCall(s, kStart + c.offset), c.user) << "offset " << c.offset;
  }
}

TEST(OnCallAtTest, EmptyScheduleHasNobody) {
  Schedule s;
  s.name = "empty";
  absl::StatusOr<std::string> user = OnCallAt(s, kStart);
  EXPECT_EQ(user.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(user.status().message().find("empty"), std::string::npos);
}

}  // namespace
}  // namespace vigil
