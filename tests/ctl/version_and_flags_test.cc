// vigilctl's --version, and flags no command knows: named in the error,
// without taking the next word as their value.
#include <sstream>
#include <string>
#include <vector>

#include "common/flags.h"
#include "ctl/command_line.h"
#include "ctl/ctl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::ctl {
namespace {

using ::testing::HasSubstr;

TEST(VigilctlVersionTest, AnywhereAndWithoutACommand) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--version"}, {"incidents", "--version"}, {"--version", "silence"},
           {"--version", "--colour"}, {"ack", "--version"}}) {
    absl::StatusOr<Invocation> invocation = ParseCommandLine(args, {});
    ASSERT_TRUE(invocation.ok()) << invocation.status();
    EXPECT_TRUE(invocation->version);
    EXPECT_FALSE(invocation->help);
  }
  // --help wins.
  absl::StatusOr<Invocation> help = ParseCommandLine({"--version", "--help"}, {});
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
  // A value is not --version.
  absl::StatusOr<Invocation> value =
      ParseCommandLine({"ack", "inc-1", "--comment", "--version"}, {});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_FALSE(value->version);
  EXPECT_EQ(value->Flag("comment"), "--version");
}

TEST(VigilctlVersionTest, RunPrintsTheProjectVersion) {
  std::ostringstream out, err;
  EXPECT_EQ(RunVigilCtl({"--version"}, {}, Dependencies(), out, err), kExitOk);
  EXPECT_EQ(out.str(), "vigilctl " + std::string(flags::Version()) + "\n");
  EXPECT_EQ(err.str(), "");
}

TEST(VigilctlUnknownFlagTest, NamedWithoutSwallowingTheNextWord) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"--colour"}, "unknown flag --colour"},
           {{"--colour", "incidents"}, "incidents: unknown flag --colour"},
           {{"--colour=red", "incidents"}, "incidents: unknown flag --colour"},
           {{"whoami", "--no-such-flag"}, "whoami: unknown flag --no-such-flag"},
       }) {
    absl::StatusOr<Invocation> invocation = ParseCommandLine(c.args, {});
    ASSERT_FALSE(invocation.ok()) << c.error;
    EXPECT_THAT(std::string(invocation.status().message()), HasSubstr(c.error));
  }
  std::ostringstream out, err;
  EXPECT_EQ(RunVigilCtl({"--no-such-flag"}, {}, Dependencies(), out, err), kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("vigilctl: unknown flag --no-such-flag"));
  EXPECT_EQ(kExitUsage, flags::kExitUsage);
}

}  // namespace
}  // namespace vigil::ctl
