#include <map>
#include <string>

#include "absl/strings/str_split.h"
#include "escalation/escalation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr double kNov30Nine = 1796029200;  // 2026-11-30T09:00:00Z

const EscalationPolicy& Policy(const EscalationConfig& c, Severity s) {
  return c.policies[static_cast<int>(s)];
}

TEST(DefaultEscalationConfigTest, MatchesTheRequirements) {
  const EscalationConfig c = DefaultEscalationConfig();
  EXPECT_TRUE(c.users.empty());
  EXPECT_TRUE(c.schedules.empty());

  const EscalationPolicy& p0 = Policy(c, Severity::kP0);
  ASSERT_EQ(p0.steps.size(), 2u);
  EXPECT_THAT(p0.steps[0].targets, ElementsAre("schedule:primary"));
  EXPECT_THAT(p0.steps[0].channels, ElementsAre("phone", "sms", "im"));
  EXPECT_EQ(p0.steps[0].wait_seconds, 300);
  EXPECT_EQ(p0.steps[0].repeat, 2);
  EXPECT_THAT(p0.steps[1].targets,
              ElementsAre("schedule:primary", "schedule:secondary"));
  EXPECT_THAT(p0.steps[1].channels, ElementsAre("phone", "sms", "im"));
  EXPECT_EQ(p0.steps[1].wait_seconds, 600);
  EXPECT_EQ(p0.steps[1].repeat, 3);
  EXPECT_EQ(p0.ack_timeout_seconds, 3600);
  EXPECT_TRUE(p0.notify_resolved);

  const EscalationPolicy& p1 = Policy(c, Severity::kP1);
  ASSERT_EQ(p1.steps.size(), 2u);
  EXPECT_THAT(p1.steps[0].channels, ElementsAre("im"));
  EXPECT_EQ(p1.steps[0].wait_seconds, 900);
  EXPECT_EQ(p1.steps[0].repeat, 1);
  EXPECT_THAT(p1.steps[1].channels, ElementsAre("phone", "im"));
  EXPECT_EQ(p1.steps[1].wait_seconds, 900);
  EXPECT_EQ(p1.steps[1].repeat, 2);

  const EscalationPolicy& p2 = Policy(c, Severity::kP2);
  ASSERT_EQ(p2.steps.size(), 1u);
  EXPECT_THAT(p2.steps[0].channels, ElementsAre("email", "ticket"));
  EXPECT_EQ(p2.steps[0].wait_seconds, 0);
  EXPECT_EQ(p2.steps[0].repeat, 1);

  EXPECT_TRUE(Policy(c, Severity::kP3).steps.empty());

  EXPECT_FALSE(c.interlocks.dry_run);
  EXPECT_THAT(c.interlocks.approval_severities, ElementsAre(Severity::kP1));
  EXPECT_EQ(c.interlocks.max_cordons, 3);
  EXPECT_EQ(c.interlocks.max_pauses, 5);
  EXPECT_EQ(c.interlocks.window_seconds, 3600);
  EXPECT_EQ(c.interlocks.max_job_node_percent, 20);
}

TEST(ParseEscalationConfigTest, EmptySectionGivesTheDefaults) {
  // The defaults name schedules nobody configured: that is tolerated.
  absl::StatusOr<EscalationConfig> c = ParseEscalationConfig(json::object());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Policy(*c, Severity::kP0).steps.size(), 2u);
  EXPECT_EQ(Policy(*c, Severity::kP1).steps.size(), 2u);
}

TEST(ParseEscalationConfigTest, ReadsEveryKey) {
  const json section = json::parse(R"({
    "users": [{"name": "alice", "phone": "+15550001", "email": "a@x.io",
               "im": "U024BE7LH"},
              {"name": "bob"}, {"name": "carol", "email": "c@x.io"}],
    "schedules": [
      {"name": "primary",
       "layers": [{"name": "weekly", "rotation": "weekly",
                   "start": "2026-11-30T09:00:00Z",
                   "users": ["alice", "bob"]},
                  {"rotation": "daily", "start": 1796029200,
                   "users": ["carol"]}],
       "overrides": [{"user": "carol", "start": "2026-12-01T17:00:00+08:00",
                      "end": "2026-12-02T09:00:00Z"}]},
      {"name": "secondary",
       "layers": [{"start": "2026-11-30T09:00:00Z", "users": ["carol"]}]}],
    "policies": {
      "P0": {"ack_timeout_minutes": 30},
      "P1": {"steps": [{"targets": ["user:bob", "schedule:secondary"],
                        "channels": ["sms", "webhook"], "wait_minutes": 2.5,
                        "repeat": 4}],
             "notify_resolved": false}},
    "interlocks": {"dry_run": true, "approval_severities": ["P0", "P2"],
                   "max_cordons": 7, "max_pauses": 9, "window_minutes": 30,
                   "max_job_node_percent": 50}
  })");
  absl::StatusOr<EscalationConfig> c = ParseEscalationConfig(section);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->users.size(), 3u);
  EXPECT_EQ(c->users[0].name, "alice");
  EXPECT_EQ(c->users[0].phone, "+15550001");
  EXPECT_EQ(c->users[0].email, "a@x.io");
  EXPECT_EQ(c->users[0].im, "U024BE7LH");
  ASSERT_EQ(c->schedules.size(), 2u);
  const Schedule& primary = c->schedules[0];
  ASSERT_EQ(primary.layers.size(), 2u);
  EXPECT_EQ(primary.layers[0].name, "weekly");
  EXPECT_EQ(primary.layers[0].start_ts, kNov30Nine);
  EXPECT_EQ(primary.layers[0].period_seconds, 7 * 86400);
  EXPECT_THAT(primary.layers[0].users, ElementsAre("alice", "bob"));
  EXPECT_EQ(primary.layers[1].start_ts, kNov30Nine);
  EXPECT_EQ(primary.layers[1].period_seconds, 86400);
  ASSERT_EQ(primary.overrides.size(), 1u);
  // 17:00 at +08:00 is 09:00 UTC.
  EXPECT_EQ(primary.overrides[0].start_ts, kNov30Nine + 86400);
  EXPECT_EQ(primary.overrides[0].end_ts, kNov30Nine + 2 * 86400);
  EXPECT_EQ(c->schedules[1].layers[0].period_seconds, 7 * 86400);

  // P0 keeps its default steps; only the given key changed.
  EXPECT_EQ(Policy(*c, Severity::kP0).ack_timeout_seconds, 1800);
  EXPECT_EQ(Policy(*c, Severity::kP0).steps.size(), 2u);
  const EscalationPolicy& p1 = Policy(*c, Severity::kP1);
  ASSERT_EQ(p1.steps.size(), 1u);
  EXPECT_THAT(p1.steps[0].targets,
              ElementsAre("user:bob", "schedule:secondary"));
  EXPECT_THAT(p1.steps[0].channels, ElementsAre("sms", "webhook"));
  EXPECT_EQ(p1.steps[0].wait_seconds, 150);
  EXPECT_EQ(p1.steps[0].repeat, 4);
  EXPECT_FALSE(p1.notify_resolved);

  EXPECT_TRUE(c->interlocks.dry_run);
  EXPECT_THAT(c->interlocks.approval_severities,
              ElementsAre(Severity::kP0, Severity::kP2));
  EXPECT_EQ(c->interlocks.max_cordons, 7);
  EXPECT_EQ(c->interlocks.max_pauses, 9);
  EXPECT_EQ(c->interlocks.window_seconds, 1800);
  EXPECT_EQ(c->interlocks.max_job_node_percent, 50);
}

TEST(ParseEscalationConfigTest, StepDefaultsAndEmptyApprovals) {
  absl::StatusOr<EscalationConfig> c = ParseEscalationConfig(json::parse(R"({
    "users": [{"name": "bob"}],
    "policies": {"P3": {"steps": [{"targets": ["user:bob"],
                                   "channels": ["email"]}]},
                 "P2": {"steps": []}},
    "interlocks": {"approval_severities": []}})"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(Policy(*c, Severity::kP3).steps.size(), 1u);
  EXPECT_EQ(Policy(*c, Severity::kP3).steps[0].wait_seconds, 300);
  EXPECT_EQ(Policy(*c, Severity::kP3).steps[0].repeat, 1);
  EXPECT_TRUE(Policy(*c, Severity::kP2).steps.empty());
  EXPECT_TRUE(c->interlocks.approval_severities.empty());
}

struct BadConfigCase {
  const char* name;
  const char* section;
  const char* error;  // expected substring of the message
};

class BadConfigTest : public ::testing::TestWithParam<BadConfigCase> {};

TEST_P(BadConfigTest, IsRejectedWithItsPath) {
  const json section = json::parse(GetParam().section);
  absl::StatusOr<EscalationConfig> c = ParseEscalationConfig(section);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().error));
}

constexpr const char* kUsers = R"("users": [{"name": "alice"}])";

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfigTest,
    ::testing::Values(
        BadConfigCase{"NotAnObject", "[]", "$: must be an object, not array"},
        BadConfigCase{"UnknownTopKey", R"({"pages": 1})", "pages: unknown key"},
        BadConfigCase{"UsersNotArray", R"({"users": {}})",
                      "users: must be an array"},
        BadConfigCase{"UserWithoutName",
                      R"({"users": [{"phone": "+1555000"}]})",
                      "users[0].name: required"},
        BadConfigCase{"DuplicateUser",
                      R"({"users": [{"name": "a"}, {"name": "a"}]})",
                      "users[1].name: duplicate user \"a\" (also users[0])"},
        BadConfigCase{"BadPhone",
                      R"({"users": [{"name": "a", "phone": "555-0001"}]})",
                      "users[0].phone: must be an E.164 number"},
        BadConfigCase{"BadEmail",
                      R"({"users": [{"name": "a", "email": "nobody"}]})",
                      "users[0].email: not an e-mail address"},
        BadConfigCase{"UnknownUserKey",
                      R"({"users": [{"name": "a", "pager": "1"}]})",
                      "users[0].pager: unknown key"},
        BadConfigCase{"ScheduleWithoutLayers",
                      R"({"schedules": [{"name": "primary"}]})",
                      "schedules[0].layers: required"},
        BadConfigCase{"EmptyLayers",
                      R"({"schedules": [{"name": "p", "layers": []}]})",
                      "schedules[0].layers: needs at least one layer"},
        BadConfigCase{"LayerUnknownUser",
                      R"({"users": [{"name": "alice"}], "schedules": [{"name":
                          "p", "layers": [{"start": 0, "users": ["zed"]}]}]})",
                      "schedules[0].layers[0].users: unknown user \"zed\""},
        BadConfigCase{"LayerBadRotation",
                      R"({"users": [{"name": "alice"}], "schedules": [{"name":
                          "p", "layers": [{"start": 0, "users": ["alice"],
                          "rotation": "monthly"}]}]})",
                      "schedules[0].layers[0].rotation: must be \"daily\" or "
                      "\"weekly\""},
        BadConfigCase{"LayerTimeWithoutOffset",
                      R"({"users": [{"name": "alice"}], "schedules": [{"name":
                          "p", "layers": [{"start": "2026-11-30T09:00:00",
                          "users": ["alice"]}]}]})",
                      "schedules[0].layers[0].start: must be unix seconds or "
                      "an RFC 3339 time"},
        BadConfigCase{"LayerWithoutStart",
                      R"({"users": [{"name": "alice"}], "schedules": [{"name":
                          "p", "layers": [{"users": ["alice"]}]}]})",
                      "schedules[0].layers[0].start: required"},
        BadConfigCase{"OverrideEndsBeforeStart",
                      R"({"users": [{"name": "alice"}], "schedules": [{"name":
                          "p", "layers": [{"start": 0, "users": ["alice"]}],
                          "overrides": [{"user": "alice", "start": 10,
                          "end": 5}]}]})",
                      "schedules[0].overrides[0].end: must be after \"start\""},
        BadConfigCase{"DuplicateSchedule",
                      R"({"users": [{"name": "a"}], "schedules": [
                          {"name": "p", "layers": [{"start": 0,
                                                    "users": ["a"]}]},
                          {"name": "p", "layers": [{"start": 0,
                                                    "users": ["a"]}]}]})",
                      "schedules[1].name: duplicate schedule \"p\""},
        BadConfigCase{"UnknownSeverity", R"({"policies": {"P4": {}}})",
                      "policies.P4: unknown severity"},
        BadConfigCase{"UnknownChannel",
                      R"({"users": [{"name": "alice"}], "policies": {"P0":
                          {"steps": [{"targets": ["user:alice"], "channels":
                          ["im"]}, {"targets": ["user:alice"], "channels":
                          ["phone", "fax"]}]}}})",
                      "policies.P0.steps[1].channels: unknown channel \"fax\""},
        BadConfigCase{"DuplicateChannel",
                      R"({"users": [{"name": "alice"}], "policies": {"P0":
                          {"steps": [{"targets": ["user:alice"], "channels":
                          ["im", "im"]}]}}})",
                      "policies.P0.steps[0].channels: channel \"im\" listed "
                      "twice"},
        BadConfigCase{"UnknownScheduleTarget",
                      R"({"policies": {"P1": {"steps": [{"targets":
                          ["schedule:primary"], "channels": ["im"]}]}}})",
                      "policies.P1.steps[0].targets: unknown schedule "
                      "\"primary\""},
        BadConfigCase{"UnknownUserTarget",
                      R"({"policies": {"P1": {"steps": [{"targets":
                          ["user:mallory"], "channels": ["im"]}]}}})",
                      "policies.P1.steps[0].targets: unknown user \"mallory\""},
        BadConfigCase{"MalformedTarget",
                      R"({"policies": {"P1": {"steps": [{"targets":
                          ["alice"], "channels": ["im"]}]}}})",
                      "target must be \"schedule:NAME\" or \"user:NAME\""},
        BadConfigCase{"StepWithoutChannels",
                      R"({"users": [{"name": "alice"}], "policies": {"P1":
                          {"steps": [{"targets": ["user:alice"]}]}}})",
                      "policies.P1.steps[0].channels: required"},
        BadConfigCase{"EmptyTargets",
                      R"({"policies": {"P1": {"steps": [{"targets": [],
                          "channels": ["im"]}]}}})",
                      "policies.P1.steps[0].targets: must be a non-empty "
                      "array"},
        BadConfigCase{"NegativeWait",
                      R"({"users": [{"name": "alice"}], "policies": {"P1":
                          {"steps": [{"targets": ["user:alice"], "channels":
                          ["im"], "wait_minutes": -1}]}}})",
                      "policies.P1.steps[0].wait_minutes: must be at least 0"},
        BadConfigCase{"ZeroRepeat",
                      R"({"users": [{"name": "alice"}], "policies": {"P1":
                          {"steps": [{"targets": ["user:alice"], "channels":
                          ["im"], "repeat": 0}]}}})",
                      "policies.P1.steps[0].repeat: must be an integer in "
                      "[1, 100]"},
        BadConfigCase{"RepeatWithoutWait",
                      R"({"users": [{"name": "alice"}], "policies": {"P1":
                          {"steps": [{"targets": ["user:alice"], "channels":
                          ["im"], "repeat": 3, "wait_minutes": 0}]}}})",
                      "policies.P1.steps[0].repeat: a step with wait_minutes "
                      "0 would send its 3 pages at once"},
        BadConfigCase{"UnknownStepKey",
                      R"({"users": [{"name": "alice"}], "policies": {"P1":
                          {"steps": [{"targets": ["user:alice"], "channels":
                          ["im"], "delay": 3}]}}})",
                      "policies.P1.steps[0].delay: unknown key"},
        BadConfigCase{"BadNotifyResolved",
                      R"({"policies": {"P1": {"notify_resolved": "yes"}}})",
                      "policies.P1.notify_resolved: must be a boolean"},
        BadConfigCase{"BadApprovalSeverity",
                      R"({"interlocks": {"approval_severities": ["P9"]}})",
                      "interlocks.approval_severities: unknown severity "
                      "\"P9\""},
        BadConfigCase{"ZeroCordons", R"({"interlocks": {"max_cordons": 0}})",
                      "interlocks.max_cordons: must be an integer in [1, "},
        BadConfigCase{"ZeroWindow", R"({"interlocks": {"window_minutes": 0}})",
                      "interlocks.window_minutes: must be positive"},
        BadConfigCase{"PercentOver100",
                      R"({"interlocks": {"max_job_node_percent": 150}})",
                      "interlocks.max_job_node_percent: must be in (0, 100]"},
        BadConfigCase{"UnknownInterlock", R"({"interlocks": {"dryrun": true}})",
                      "interlocks.dryrun: unknown key"}),
    [](const ::testing::TestParamInfo<BadConfigCase>& info) {
      return std::string(info.param.name);
    });

TEST(ParseEscalationConfigTest, ReportsEveryErrorOnItsOwnLine) {
  const json section = json::parse(R"({
    "users": [{"name": "alice"}, {"name": ""}],
    "schedules": [{"name": "primary", "layers": [{"start": "soon",
                   "users": ["alice", "zed"]}]}],
    "policies": {"P0": {"steps": [{"targets": ["schedule:tertiary"],
                                   "channels": ["fax"]}]},
                 "P1": {"ack_timeout_minutes": -5}},
    "interlocks": {"max_pauses": "many"},
    "extra": 1
  })");
  absl::StatusOr<EscalationConfig> c = ParseEscalationConfig(section);
  ASSERT_FALSE(c.ok());
  const std::vector<std::string> lines =
      absl::StrSplit(c.status().message(), '\n');
  EXPECT_THAT(
      lines,
      ::testing::UnorderedElementsAre(
          HasSubstr("extra: unknown key"),
          HasSubstr("users[1].name: must be a non-empty string"),
          HasSubstr("schedules[0].layers[0].start: must be unix seconds"),
          HasSubstr("schedules[0].layers[0].users: unknown user \"zed\""),
          HasSubstr("policies.P0.steps[0].targets: unknown schedule "
                    "\"tertiary\""),
          HasSubstr("policies.P0.steps[0].channels: unknown channel \"fax\""),
          HasSubstr("policies.P1.ack_timeout_minutes: must be at least 0"),
          HasSubstr("interlocks.max_pauses: must be an integer")));
}

TEST(ParseEscalationConfigTest, DocumentsEveryKeyWithItsDefault) {
  ConfigSchema schema;
  ParseEscalationConfig(json::object(), &schema, "escalation").IgnoreError();
  EXPECT_TRUE(schema.CheckComplete().ok()) << schema.CheckComplete();
  std::map<std::string, ConfigKey> keys;
  for (const ConfigKey& key : schema.keys()) keys[key.path] = key;
  ASSERT_TRUE(keys.count("escalation.policies"));
  const json& policies = keys["escalation.policies"].default_value;
  EXPECT_EQ(policies["P1"]["steps"][1]["channels"], json::array({"phone", "im"}));
  EXPECT_EQ(policies["P1"]["steps"][1]["wait_minutes"], 15);
  EXPECT_EQ(policies["P2"]["steps"][0]["wait_minutes"], 0);
  EXPECT_EQ(keys["escalation.policies.<severity>.ack_timeout_minutes"].default_value, 60);
  EXPECT_EQ(keys["escalation.policies.<severity>.steps[].repeat"].range, "[1, 100]");
  EXPECT_EQ(keys["escalation.schedules[].layers[].rotation"].default_value, "weekly");
  EXPECT_EQ(keys["escalation.interlocks.window_minutes"].default_value, 60);
  EXPECT_EQ(keys["escalation.interlocks.max_cordons"].default_value, 3);
  EXPECT_TRUE(keys["escalation.schedules[].layers[].start"].default_value.is_null());
  EXPECT_TRUE(keys["escalation.schedules[].layers[].start"].required);
  EXPECT_TRUE(keys["escalation.schedules[].layers"].required);
  EXPECT_FALSE(keys["escalation.schedules[].overrides"].required);
  for (const ConfigKey& key : schema.keys()) {
    EXPECT_TRUE(key.path.starts_with("escalation")) << key.path;
  }
}

}  // namespace
}  // namespace vigil
