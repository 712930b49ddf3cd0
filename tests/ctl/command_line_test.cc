#include "ctl/command_line.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vigil::ctl {
namespace {

using Args = std::vector<std::string>;

struct GoodCase {
  Args args;
  std::string command;
  Args positional;
};

class ParseGoodTest : public ::testing::TestWithParam<GoodCase> {};

TEST_P(ParseGoodTest, ParsesCommandAndArguments) {
  const GoodCase& c = GetParam();
  absl::StatusOr<Invocation> invocation = ParseCommandLine(c.args, {});
  ASSERT_TRUE(invocation.ok()) << invocation.status();
  EXPECT_EQ(invocation->command, c.command);
  EXPECT_EQ(invocation->args, c.positional);
  EXPECT_FALSE(invocation->help);
}

INSTANTIATE_TEST_SUITE_P(
    Commands, ParseGoodTest,
    ::testing::Values(
        GoodCase{{"incidents"}, "incidents", {}},
        GoodCase{{"incidents", "--state", "all", "--severity", "p0,P1",
                  "--job=llama", "--node", "n1", "--limit=5"},
                 "incidents",
                 {}},
        GoodCase{{"incident", "inc-1"}, "incident", {"inc-1"}},
        GoodCase{{"ack", "inc-1", "--comment", "on it"}, "ack", {"inc-1"}},
        GoodCase{{"unack", "inc-1"}, "unack", {"inc-1"}},
        GoodCase{{"resolve", "--comment=fixed", "inc-1"}, "resolve", {"inc-1"}},
        GoodCase{{"silences"}, "silences", {}},
        GoodCase{{"silence", "add", "--match", "job=llama", "--match",
                  "node=gpu-node-1*", "--duration", "1h30m", "--comment", "x"},
                 "silence add",
                 {}},
        GoodCase{{"silence", "add", "--match", "severity=p1", "--start",
                  "2026-11-30T08:00:00Z", "--until", "2026-11-30T09:00:00Z",
                  "--comment", "window"},
                 "silence add",
                 {}},
        GoodCase{{"silence", "expire", "s-1"}, "silence expire", {"s-1"}},
        GoodCase{{"deliveries", "--incident", "inc-1"}, "deliveries", {}},
        GoodCase{{"actions"}, "actions", {}},
        GoodCase{{"action", "run", "cordon_node", "--job", "j", "--node", "n",
                  "--reason", "xid"},
                 "action run",
                 {"cordon_node"}},
        GoodCase{{"action", "run", "pause_job", "--job", "j", "--incident",
                  "inc-1", "--reason", "nan loss"},
                 "action run",
                 {"pause_job"}},
        GoodCase{{"approve", "act-1"}, "approve", {"act-1"}},
        GoodCase{{"remediation"}, "remediation", {}},
        GoodCase{{"remediation", "reset"}, "remediation reset", {}},
        GoodCase{{"reload"}, "reload", {}},
        GoodCase{{"audit", "--limit", "20"}, "audit", {}},
        GoodCase{{"oncall"}, "oncall", {}}, GoodCase{{"whoami"}, "whoami", {}},
        GoodCase{
            {"hash-token", "abc", "--name", "alice"}, "hash-token", {"abc"}},
        GoodCase{{"gen-token"}, "gen-token", {}},
        // "--" ends the flags: a token may start with a dash.
        GoodCase{{"hash-token", "--", "-starts-with-dash"},
                 "hash-token",
                 {"-starts-with-dash"}}));

struct BadCase {
  Args args;
  std::string error;  // a substring of the message
};

class ParseBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParseBadTest, NamesTheProblem) {
  const BadCase& c = GetParam();
  absl::StatusOr<Invocation> invocation = ParseCommandLine(c.args, {});
  ASSERT_FALSE(invocation.ok())
      << "accepted: " << ::testing::PrintToString(c.args);
  EXPECT_EQ(invocation.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(invocation.status().message().find(c.error), std::string::npos)
      << invocation.status().message();
}

// A valid "silence add" with `extra` appended.
Args SilenceAdd(Args extra) {
  Args args = {"silence", "add", "--comment", "c"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Errors, ParseBadTest,
    ::testing::Values(
        BadCase{{}, "no command given"},
        BadCase{{"--json"}, "no command given"},
        BadCase{{"frobnicate"}, "unknown command \"frobnicate\""},
        BadCase{{"incident"}, "incident: missing incident ID"},
        BadCase{{"ack"}, "ack: missing incident ID"},
        BadCase{{"ack", "a", "b"}, "ack: unexpected argument \"b\""},
        BadCase{{"approve"}, "approve: missing action ID"},
        BadCase{{"silence", "expire"}, "silence expire: missing silence ID"},
        BadCase{{"silence"}, "silence: missing subcommand (add or expire)"},
        BadCase{{"silence", "mute"}, "silence: unknown subcommand \"mute\""},
        BadCase{{"action"}, "action: missing subcommand (run)"},
        BadCase{{"remediation", "now"},
                "remediation: unexpected argument \"now\""},
        BadCase{{"hash-token"}, "hash-token: missing TOKEN"},
        // Flags.
        BadCase{{"incidents", "--foo", "1"}, "incidents: unknown flag --foo"},
        BadCase{{"incidents", "--state", "open"},
                "--state: bad state \"open\""},
        BadCase{{"incidents", "--state", "all", "--state", "firing"},
                "--state given twice"},
        BadCase{{"incidents", "--severity", "P0,P5"}, "bad severity \"P5\""},
        BadCase{{"incidents", "--limit", "0"}, "bad limit \"0\""},
        BadCase{{"incidents", "--limit", "ten"}, "bad limit \"ten\""},
        BadCase{{"incidents", "--job"}, "--job needs a value"},
        BadCase{{"incidents", "--job="}, "incidents: --job is empty"},
        BadCase{{"whoami", "--server"}, "--server needs a value"},
        BadCase{{"whoami", "--token="}, "--token is empty"},
        BadCase{{"whoami", "--json=yes"}, "--json takes no value"},
        BadCase{{"whoami", "-x"}, "unknown flag \"-x\""},
        BadCase{{"ack", "inc-1", "--state", "all"},
                "ack: unknown flag --state"},
        // Silences.
        BadCase{SilenceAdd({"--match", "job=a", "--duration", "2x"}),
                "--duration: bad duration \"2x\""},
        BadCase{SilenceAdd({"--match", "job=a", "--duration", "0m"}),
                "must be longer than 0"},
        BadCase{SilenceAdd({"--match", "job", "--duration", "1h"}),
                "--match: bad matcher \"job\": want NAME=VALUE"},
        BadCase{SilenceAdd({"--match", "pod=p1", "--duration", "1h"}),
                "unknown name \"pod\""},
        BadCase{SilenceAdd({"--match", "job=", "--duration", "1h"}),
                "empty value"},
        BadCase{SilenceAdd({"--match", "node=*", "--duration", "1h"}),
                "would match everything"},
        BadCase{SilenceAdd({"--match", "severity=P7", "--duration", "1h"}),
                "severity is P0, P1, P2 or P3"},
        BadCase{SilenceAdd({"--duration", "1h"}),
                "silence add: missing --match NAME=VALUE"},
        BadCase{{"silence", "add", "--match", "job=a", "--duration", "1h"},
                "silence add: missing --comment"},
        BadCase{SilenceAdd({"--match", "job=a"}),
                "missing --duration or --until"},
        BadCase{SilenceAdd({"--match", "job=a", "--duration", "1h", "--until",
                            "2026-11-30T09:00:00Z"}),
                "not both"},
        BadCase{SilenceAdd({"--match", "job=a", "--until", "tomorrow"}),
                "--until: bad time \"tomorrow\""},
        BadCase{
            SilenceAdd({"--match", "job=a", "--start", "2026-11-30T09:00:00Z",
                        "--until", "2026-11-30T08:00:00Z"}),
            "--until must come after --start"},
        // Actions.
        BadCase{{"action", "run", "reboot_node", "--job", "j", "--reason", "r"},
                "unknown action \"reboot_node\""},
        BadCase{{"action", "run", "cordon_node", "--job", "j", "--reason", "r"},
                "cordon_node needs --node"},
        BadCase{{"action", "run", "pause_job", "--reason", "r"},
                "action run: missing --job"},
        BadCase{{"action", "run", "pause_job", "--job", "j"},
                "action run: missing --reason"}));

TEST(ParseCommandLineTest, GlobalFlagsGoAnywhereAndBeatTheEnvironment) {
  Environment env{.server = "http://env:1", .token = "env-token"};
  absl::StatusOr<Invocation> invocation = ParseCommandLine(
      {"incidents", "--json", "--server", "https://flag:2", "--token=flag",
       "--ca-cert", "/etc/ca.pem", "--token-file", "/tmp/t"},
      env);
  ASSERT_TRUE(invocation.ok()) << invocation.status();
  EXPECT_TRUE(invocation->global.json);
  EXPECT_EQ(invocation->global.server, "https://flag:2");
  EXPECT_EQ(invocation->global.token, "flag");
  EXPECT_EQ(invocation->global.token_file, "/tmp/t");
  EXPECT_EQ(invocation->global.ca_cert_file, "/etc/ca.pem");
  EXPECT_TRUE(invocation->flags.empty());
}

TEST(ParseCommandLineTest, EnvironmentBeatsTheDefaults) {
  absl::StatusOr<Invocation> from_env = ParseCommandLine(
      {"whoami"}, {.server = "http://env:1", .token = "env-token"});
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->global.server, "http://env:1");
  EXPECT_EQ(from_env->global.token, "env-token");
  // Empty variables count as unset.
  absl::StatusOr<Invocation> defaults =
      ParseCommandLine({"whoami"}, {.server = "", .token = ""});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->global.server, "http://127.0.0.1:8080");
  EXPECT_EQ(defaults->global.token, "");
  EXPECT_FALSE(defaults->global.json);
}

TEST(ParseCommandLineTest, KeepsRepeatedMatchersInOrder) {
  absl::StatusOr<Invocation> invocation =
      ParseCommandLine({"silence", "add", "--match", "job=a", "--match=node=n*",
                        "--duration", "2h", "--comment", "c"},
                       {});
  ASSERT_TRUE(invocation.ok()) << invocation.status();
  EXPECT_EQ(invocation->flags.at("match"),
            (std::vector<std::string>{"job=a", "node=n*"}));
  EXPECT_EQ(invocation->Flag("duration"), "2h");
  EXPECT_EQ(invocation->Flag("until"), "");
}

TEST(ParseCommandLineTest, HelpNeedsOnlyAKnownCommand) {
  for (const Args& args :
       {Args{"--help"}, Args{"help"}, Args{"-h", "--json"}}) {
    absl::StatusOr<Invocation> invocation = ParseCommandLine(args, {});
    ASSERT_TRUE(invocation.ok()) << invocation.status();
    EXPECT_TRUE(invocation->help);
    EXPECT_EQ(invocation->command, "");
  }
  absl::StatusOr<Invocation> ack = ParseCommandLine({"ack", "--help"}, {});
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_TRUE(ack->help);
  EXPECT_EQ(ack->command, "ack");
  absl::StatusOr<Invocation> group = ParseCommandLine({"help", "silence"}, {});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->command, "silence");
  absl::StatusOr<Invocation> sub =
      ParseCommandLine({"silence", "add", "-h"}, {});
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(sub->command, "silence add");
  EXPECT_FALSE(ParseCommandLine({"nope", "--help"}, {}).ok());
}

TEST(UsageTextTest, CoversCommandsFlagsAndGroups) {
  const std::string overview = UsageText("");
  for (const char* command :
       {"incidents", "incident ID", "ack ID", "silence add",
        "silence expire ID", "action run ACTION", "remediation reset",
        "hash-token TOKEN", "gen-token", "--token-file PATH", "exit codes"}) {
    EXPECT_NE(overview.find(command), std::string::npos) << command;
  }
  const std::string incidents = UsageText("incidents");
  EXPECT_NE(incidents.find("usage: vigilctl [global flags] incidents"),
            std::string::npos);
  EXPECT_NE(incidents.find("--severity LIST"), std::string::npos);
  const std::string silence = UsageText("silence");
  EXPECT_NE(silence.find("silence add --match NAME=VALUE"), std::string::npos);
  EXPECT_NE(silence.find("silence expire ID"), std::string::npos);
}

TEST(ParseDurationMinutesTest, AcceptsUnitsAndSums) {
  const std::pair<const char*, int64_t> kGood[] = {
      {"30m", 30}, {"2h", 120}, {"1d", 1440}, {"1h30m", 90}, {"1d2h", 1560}};
  for (const auto& [text, minutes] : kGood) {
    absl::StatusOr<int64_t> parsed = ParseDurationMinutes(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, minutes) << text;
  }
  for (const char* bad : {"", "h", "2", "2x", "-1h", "1.5h", "2h ", " 2h", "0m",
                          "0h0m", "3651d", "99999999999999999999m"}) {
    EXPECT_FALSE(ParseDurationMinutes(bad).ok())
        << "accepted \"" << bad << "\"";
  }
}

TEST(ParseRfc3339Test, ParsesZonesAndRejectsOtherForms) {
  absl::StatusOr<double> utc = ParseRfc3339("2026-11-30T09:00:00Z");
  ASSERT_TRUE(utc.ok()) << utc.status();
  EXPECT_EQ(*utc, 1796029200.0);
  absl::StatusOr<double> offset = ParseRfc3339("2026-11-30T10:00:00+01:00");
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(*offset, 1796029200.0);
  for (const char* bad :
       {"", "tomorrow", "2026-11-30", "2026-11-30 09:00:00", "1796029200"}) {
    EXPECT_FALSE(ParseRfc3339(bad).ok()) << "accepted \"" << bad << "\"";
  }
}

TEST(ParseMatcherTest, SplitsAtTheFirstEqualsSign) {
  absl::StatusOr<LabelMatcher> prefix = ParseMatcher("node=gpu-node-1*");
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->name, "node");
  EXPECT_EQ(prefix->value, "gpu-node-1*");
  absl::StatusOr<LabelMatcher> kind = ParseMatcher("kind=a=b");
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(kind->value, "a=b");
  absl::StatusOr<LabelMatcher> severity = ParseMatcher("severity=p0");
  ASSERT_TRUE(severity.ok());
  EXPECT_EQ(severity->value, "P0");
  EXPECT_FALSE(ParseMatcher("=x").ok());
  EXPECT_FALSE(ParseMatcher("Job=x").ok());
}

TEST(ParseSeverityListTest, NormalisesCase) {
  absl::StatusOr<std::string> list = ParseSeverityList("p0,P2");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*list, "P0,P2");
  for (const char* bad : {"", "P0,", "P4", "high", "P0 P1"}) {
    EXPECT_FALSE(ParseSeverityList(bad).ok()) << "accepted \"" << bad << "\"";
  }
}

}  // namespace
}  // namespace vigil::ctl
