// The command-line wrapper (common/flags.h) over flags defined here, as a
// binary's main.cc defines them.
#include "common/flags.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, data_dir, "", "DIR: where the store lives");
ABSL_FLAG(std::string, grpc_listen, "127.0.0.1:7070", "HOST:PORT: where agents connect");
ABSL_FLAG(bool, memory, false, "keep everything in memory");
ABSL_FLAG(int, nodes, 4, "nodes in the cluster");
ABSL_FLAG(uint64_t, spool_max_mb, 256, "bound of the spool in MiB");
ABSL_FLAG(double, interval, 1.0, "SECONDS: between frames");
ABSL_FLAG(std::optional<int>, fault_gpu, std::nullopt, "GPU of the fault");
ABSL_FLAG(std::string, simulate, "", "SCENARIO: simulate a node");

namespace vigil::flags {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Program TestProgram() {
  return Program{.name = "vigil-test",
                 .synopsis = "vigil-test --data-dir DIR [flags]",
                 .about = "Tests the wrapper.",
                 .notes = "exit codes: 0 ok, 2 usage",
                 .flags_file = __FILE__,
                 .groups = {{"simulated node", {"simulate", "fault-gpu"}}},
                 .implicit_values = {{"simulate", "healthy"}}};
}

class FlagsTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(FlagsTest, ValuesInBothFormsAndSwitches) {
  absl::StatusOr<Parsed> parsed =
      Parse(TestProgram(), {"--data-dir", "/var/lib/vigil", "--grpc-listen=0.0.0.0:1",
                            "--memory", "--nodes", "-3", "--interval=0.5",
                            "--spool-max-mb", "12", "--fault-gpu=3"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->action, Parsed::Action::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_data_dir), "/var/lib/vigil");
  EXPECT_EQ(absl::GetFlag(FLAGS_grpc_listen), "0.0.0.0:1");
  EXPECT_TRUE(absl::GetFlag(FLAGS_memory));
  EXPECT_EQ(absl::GetFlag(FLAGS_nodes), -3);  // the next argument, even with a dash
  EXPECT_EQ(absl::GetFlag(FLAGS_interval), 0.5);
  EXPECT_EQ(absl::GetFlag(FLAGS_spool_max_mb), 12u);
  EXPECT_EQ(absl::GetFlag(FLAGS_fault_gpu), 3);
  EXPECT_TRUE(parsed->Given("data-dir"));
  EXPECT_TRUE(parsed->Given("memory"));
  EXPECT_FALSE(parsed->Given("simulate"));
  EXPECT_EQ(parsed->given.size(), 7u);
}

TEST_F(FlagsTest, DefaultsStayWhenNotGiven) {
  absl::StatusOr<Parsed> parsed = Parse(TestProgram(), {});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->given.empty());
  EXPECT_EQ(absl::GetFlag(FLAGS_grpc_listen), "127.0.0.1:7070");
  EXPECT_FALSE(absl::GetFlag(FLAGS_memory));
  EXPECT_EQ(absl::GetFlag(FLAGS_fault_gpu), std::nullopt);
}

TEST_F(FlagsTest, LastValueWinsAndEmptyOptionalIsUnset) {
  absl::StatusOr<Parsed> parsed =
      Parse(TestProgram(), {"--nodes", "1", "--nodes=2", "--fault-gpu", "1", "--fault-gpu="});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_nodes), 2);
  EXPECT_EQ(absl::GetFlag(FLAGS_fault_gpu), std::nullopt);
}

TEST_F(FlagsTest, ImplicitValueOnlyWithEquals) {
  absl::StatusOr<Parsed> bare = Parse(TestProgram(), {"--simulate", "--nodes", "2"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_simulate), "healthy");
  EXPECT_EQ(absl::GetFlag(FLAGS_nodes), 2);
  ASSERT_TRUE(Parse(TestProgram(), {"--simulate=gpu_xid"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_simulate), "gpu_xid");
  // "--simulate NAME" is not a value: NAME is a stray argument.
  absl::StatusOr<Parsed> spaced = Parse(TestProgram(), {"--simulate", "gpu_xid"});
  EXPECT_THAT(std::string(spaced.status().message()), HasSubstr("unexpected argument 'gpu_xid'"));
}

TEST_F(FlagsTest, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"--colour", "red"}, "unknown flag --colour"},
           {{"--colour=red"}, "unknown flag --colour"},
           {{"--data_dir", "/x"}, "unknown flag --data_dir"},  // dashes only
           {{"--flagfile", "/x"}, "unknown flag --flagfile"},  // Abseil's own: not ours
           {{"--data-dir"}, "--data-dir needs a value"},
           {{"--memory=yes"}, "--memory takes no value"},
           {{"--nodes", "four"}, "--nodes: bad value 'four' (want a whole number)"},
           {{"--nodes=1.5"}, "--nodes: bad value '1.5'"},
           {{"--spool-max-mb", "-1"}, "--spool-max-mb: bad value '-1' (want a whole number >= 0)"},
           {{"--interval", "soon"}, "--interval: bad value 'soon' (want a number)"},
           {{"--fault-gpu", "x"}, "--fault-gpu: bad value 'x'"},
           {{"stray"}, "unexpected argument 'stray'"},
           {{"--memory", "--", "--nodes"}, "unexpected argument '--nodes'"},
           {{"-x"}, "unknown flag \"-x\" (flags are spelt --name)"},
       }) {
    absl::StatusOr<Parsed> parsed = Parse(TestProgram(), c.args);
    ASSERT_FALSE(parsed.ok()) << c.error;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(c.error));
  }
}

TEST_F(FlagsTest, HelpAndVersionWinOverOtherErrors) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"--colour", "--help"},
                                             {"--nodes=x", "-h", "--version"}}) {
    absl::StatusOr<Parsed> parsed = Parse(TestProgram(), args);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->action, Parsed::Action::kHelp);
  }
  absl::StatusOr<Parsed> version = Parse(TestProgram(), {"stray", "--version", "--nodes", "2"});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->action, Parsed::Action::kVersion);
  EXPECT_EQ(absl::GetFlag(FLAGS_nodes), 4);  // nothing set
  // A flag's value is not --help.
  absl::StatusOr<Parsed> value = Parse(TestProgram(), {"--data-dir", "--help"});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->action, Parsed::Action::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_data_dir), "--help");
}

TEST_F(FlagsTest, UsageListsEveryFlagWithItsValueAndDefault) {
  const std::string usage = UsageText(TestProgram());
  EXPECT_THAT(usage, HasSubstr("usage: vigil-test --data-dir DIR [flags]\n\nTests the wrapper.\n"));
  EXPECT_THAT(usage, HasSubstr("  --data-dir DIR "));
  EXPECT_THAT(usage, HasSubstr("where the store lives\n"));
  EXPECT_THAT(usage, HasSubstr("where agents connect (default: 127.0.0.1:7070)\n"));
  EXPECT_THAT(usage, HasSubstr("  --memory "));
  EXPECT_THAT(usage, HasSubstr("keep everything in memory\n"));  // a switch: no default
  EXPECT_THAT(usage, HasSubstr("  --nodes N "));
  EXPECT_THAT(usage, HasSubstr("nodes in the cluster (default: 4)\n"));
  EXPECT_THAT(usage, HasSubstr("  --interval SECONDS "));
  EXPECT_THAT(usage, HasSubstr("between frames (default: 1)\n"));
  EXPECT_THAT(usage, HasSubstr("\nsimulated node:\n  --simulate[=SCENARIO] "));
  EXPECT_THAT(usage, HasSubstr("simulate a node (bare: healthy)\n  --fault-gpu N "));
  EXPECT_THAT(usage, HasSubstr("  --help "));
  EXPECT_THAT(usage, HasSubstr("print \"vigil-test " + std::string(Version()) + "\" and exit\n"));
  EXPECT_THAT(usage, HasSubstr("\nexit codes: 0 ok, 2 usage\n"));
  EXPECT_THAT(usage, Not(HasSubstr("flagfile")));
  EXPECT_THAT(usage, Not(HasSubstr("_")));  // dashed names only
  // Ungrouped flags first, by name; one line each.
  EXPECT_LT(usage.find("--data-dir"), usage.find("--grpc-listen"));
  EXPECT_LT(usage.find("--spool-max-mb"), usage.find("simulated node:"));
}

TEST(ProjectVersionTest, OneVersionForTheProject) {
  EXPECT_EQ(Version(), "0.1.0");
  EXPECT_EQ(VersionText("vigilctl"), "vigilctl 0.1.0\n");
}

TEST(TokenizeTest, SplitsFlagsAndWordsByArity) {
  auto arity = [](std::string_view name) {
    if (name == "json") return Arity::kSwitch;
    if (name == "server") return Arity::kValue;
    return Arity::kUnknown;
  };
  absl::StatusOr<std::vector<Token>> tokens =
      Tokenize({"incidents", "--server", "http://x", "--json", "--foo", "1", "--bar=2", "-", "-h",
                "--", "--json"},
               arity);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 9u);
  EXPECT_FALSE((*tokens)[0].is_flag);
  EXPECT_EQ((*tokens)[0].name, "incidents");
  EXPECT_EQ((*tokens)[1].name, "server");
  EXPECT_EQ((*tokens)[1].value, "http://x");
  EXPECT_EQ((*tokens)[2].name, "json");
  EXPECT_EQ((*tokens)[2].value, std::nullopt);
  EXPECT_EQ((*tokens)[3].name, "foo");  // unknown: takes no value ...
  EXPECT_EQ((*tokens)[3].arity, Arity::kUnknown);
  EXPECT_FALSE((*tokens)[4].is_flag);  // ... so "1" is a word
  EXPECT_EQ((*tokens)[5].value, "2");
  EXPECT_FALSE((*tokens)[6].is_flag);  // "-" is a word
  EXPECT_EQ((*tokens)[7].name, "help");
  EXPECT_FALSE((*tokens)[8].is_flag);  // after "--"
  EXPECT_EQ((*tokens)[8].name, "--json");
  EXPECT_THAT(std::string(Tokenize({"--server"}, arity).status().message()),
              HasSubstr("--server needs a value"));
}

}  // namespace
}  // namespace vigil::flags
