#include <string>

#include "escalation/escalation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr double kNow = 1800000000;

TEST(ParseSilenceTest, DurationStartsNow) {
  absl::StatusOr<Silence> s = ParseSilence(json::parse(R"({
      "matchers": [{"name": "job", "value": "llama"},
                   {"name": "node", "value": "n1*"}],
      "duration_minutes": 90, "comment": "rack 7 maintenance"})"),
                                           kNow);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->matchers.size(), 2u);
  EXPECT_EQ(s->matchers[1].name, "node");
  EXPECT_EQ(s->matchers[1].value, "n1*");
  EXPECT_EQ(s->start_ts, kNow);
  EXPECT_EQ(s->end_ts, kNow + 90 * 60);
  EXPECT_EQ(s->comment, "rack 7 maintenance");
  EXPECT_TRUE(s->id.empty());
  EXPECT_TRUE(s->author.empty());
}

TEST(ParseSilenceTest, FutureWindowWithExplicitTimes) {
  absl::StatusOr<Silence> s = ParseSilence(json::parse(R"({
      "matchers": [{"name": "severity", "value": "P2"}],
      "starts_at": 1800003600, "ends_at": "2027-01-15T10:00:00Z"})"),
                                           kNow);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->start_ts, kNow + 3600);
  EXPECT_EQ(s->end_ts, kNow + 7200);
}

struct BadSilenceCase {
  const char* name;
  const char* body;
  const char* error;
};

class BadSilenceTest : public ::testing::TestWithParam<BadSilenceCase> {};

TEST_P(BadSilenceTest, IsRejected) {
  absl::StatusOr<Silence> s = ParseSilence(json::parse(GetParam().body), kNow);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(GetParam().error));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadSilenceTest,
    ::testing::Values(
        BadSilenceCase{"NotAnObject", R"("job=llama")", "must be an object"},
        BadSilenceCase{"NoMatchers", R"({"duration_minutes": 5})",
                       "matchers: required"},
        BadSilenceCase{"EmptyMatchers",
                       R"({"matchers": [], "duration_minutes": 5})",
                       "matchers: must be a non-empty array"},
        BadSilenceCase{"UnknownMatcherName",
                       R"({"matchers": [{"name": "rack", "value": "7"}],
                           "duration_minutes": 5})",
                       "matchers[0].name: unknown matcher name \"rack\""},
        BadSilenceCase{"MatcherWithoutValue",
                       R"({"matchers": [{"name": "job"}],
                           "duration_minutes": 5})",
                       "matchers[0].value: required"},
        BadSilenceCase{"EmptyValue",
                       R"({"matchers": [{"name": "job", "value": ""}],
                           "duration_minutes": 5})",
                       "matchers[0].value: must be a non-empty string"},
        BadSilenceCase{"NumberValue",
                       R"({"matchers": [{"name": "gpu", "value": 3}],
                           "duration_minutes": 5})",
                       "matchers[0].value: must be a non-empty string"},
        BadSilenceCase{"BadSeverity",
                       R"({"matchers": [{"name": "severity", "value": "high"}],
                           "duration_minutes": 5})",
                       "a severity is one of P0, P1, P2, P3"},
        BadSilenceCase{"BadGpu",
                       R"({"matchers": [{"name": "gpu", "value": "gpu3"}],
                           "duration_minutes": 5})",
                       "a gpu is a GPU index"},
        BadSilenceCase{"StarInTheMiddle",
                       R"({"matchers": [{"name": "node", "value": "n*7"}],
                           "duration_minutes": 5})",
                       "'*' may only end the value"},
        BadSilenceCase{"UnknownKey",
                       R"({"matchers": [{"name": "job", "value": "a"}],
                           "duration_minutes": 5, "author": "me"})",
                       "author: unknown key"},
        BadSilenceCase{"NoEnd",
                       R"({"matchers": [{"name": "job", "value": "a"}]})",
                       "ends_at: required (or \"duration_minutes\")"},
        BadSilenceCase{"BothEnds",
                       R"({"matchers": [{"name": "job", "value": "a"}],
                           "duration_minutes": 5, "ends_at": 1800009000})",
                       "not both"},
        BadSilenceCase{"ZeroDuration",
                       R"({"matchers": [{"name": "job", "value": "a"}],
                           "duration_minutes": 0})",
                       "duration_minutes: must be positive"},
        BadSilenceCase{"EndBeforeStart",
                       R"({"matchers": [{"name": "job", "value": "a"}],
                           "starts_at": 1800009000, "ends_at": 1800005000})",
                       "ends_at: the silence must end after it starts"},
        BadSilenceCase{"AlreadyOver",
                       R"({"matchers": [{"name": "job", "value": "a"}],
                           "starts_at": 1700000000, "ends_at": 1700005000})",
                       "ends_at: the silence would already have ended"},
        BadSilenceCase{"BadStart",
                       R"({"matchers": [{"name": "job", "value": "a"}],
                           "starts_at": "tomorrow", "duration_minutes": 5})",
                       "starts_at: must be unix seconds or an RFC 3339"},
        BadSilenceCase{"BadComment",
                       R"({"matchers": [{"name": "job", "value": "a"}],
                           "duration_minutes": 5, "comment": 7})",
                       "comment: must be a string"}),
    [](const ::testing::TestParamInfo<BadSilenceCase>& info) {
      return std::string(info.param.name);
    });

TEST(ParseSilenceTest, ReportsEveryProblem) {
  absl::StatusOr<Silence> s = ParseSilence(json::parse(R"({
      "matchers": [{"name": "rack", "value": "7"},
                   {"name": "severity", "value": "P7"}],
      "extra": true})"),
                                           kNow);
  ASSERT_FALSE(s.ok());
  const std::string message(s.status().message());
  EXPECT_THAT(message, HasSubstr("matchers[0].name"));
  EXPECT_THAT(message, HasSubstr("matchers[1].value"));
  EXPECT_THAT(message, HasSubstr("extra: unknown key"));
  EXPECT_THAT(message, HasSubstr("ends_at: required"));
}

TEST(SilenceToJsonTest, HasEveryField) {
  Silence s;
  s.id = "sil-1";
  s.matchers = {{"job", "llama"}, {"gpu", "3"}};
  s.start_ts = 10;
  s.end_ts = 20;
  s.author = "alice";
  s.comment = "swap GPU 3";
  EXPECT_EQ(SilenceToJson(s), json::parse(R"({
      "id": "sil-1",
      "matchers": [{"name": "job", "value": "llama"},
                   {"name": "gpu", "value": "3"}],
      "starts_at": 10.0, "ends_at": 20.0, "author": "alice",
      "comment": "swap GPU 3"})"));
}

Incident MakeIncident() {
  Incident i;
  i.id = "inc-000001";
  i.severity = Severity::kP1;
  i.kind = "gpu_thermal_throttle";
  i.job = "llama-70b";
  i.node = "n12";
  i.gpu = 3;
  return i;
}

struct MatchCase {
  std::vector<Matcher> matchers;
  bool matches;
};

TEST(SilenceMatchesTest, ExactPrefixAndEveryMatcher) {
  const Incident incident = MakeIncident();
  Incident no_gpu = incident;
  no_gpu.gpu.reset();
  for (const MatchCase& c : std::vector<MatchCase>{
           {{{"job", "llama-70b"}}, true},
           {{{"job", "llama"}}, false},
           {{{"job", "llama*"}}, true},
           {{{"job", "*"}}, true},
           {{{"job", "gpt*"}}, false},
           {{{"node", "n12"}}, true},
           {{{"node", "n1*"}}, true},
           {{{"node", "n1"}}, false},
           {{{"gpu", "3"}}, true},
           {{{"gpu", "03"}}, false},
           {{{"gpu", "4"}}, false},
           {{{"kind", "gpu_*"}}, true},
           {{{"kind", "gpu_xid"}}, false},
           {{{"severity", "P1"}}, true},
           {{{"severity", "P0"}}, false},
           {{{"severity", "P*"}}, true},
           {{{"job", "llama*"}, {"severity", "P1"}}, true},
           {{{"job", "llama*"}, {"severity", "P2"}}, false},
           {{{"rack", "7"}}, false},
           {{}, false},
       }) {
    Silence s;
    s.matchers = c.matchers;
    EXPECT_EQ(SilenceMatches(s, incident), c.matches)
        << SilenceToJson(s).dump();
  }
  Silence gpu3;
  gpu3.matchers = {{"gpu", "3"}};
  EXPECT_FALSE(SilenceMatches(gpu3, no_gpu));
}

}  // namespace
}  // namespace vigil
