// RunCommand: argv passed verbatim (no shell), output and exit status
// captured, timeouts and missing programs reported.
#include "common/command_runner.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actuator/test_util.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using testing::ScratchDir;
using testing::WriteFile;

CommandOptions Options(double timeout_seconds = 30) {
  CommandOptions options;
  options.timeout_seconds = timeout_seconds;
  return options;
}

TEST(CommandRunnerTest, PassesArgvVerbatimAndCapturesOutput) {
  FakeClock clock;
  std::vector<std::string> argv = {"printf", "%s|%s|%s\\n", "a b", "n1; rm -rf /", "$(id)"};
  absl::StatusOr<CommandResult> result = RunCommand(argv, Options(), clock);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->out, "a b|n1; rm -rf /|$(id)\n");
  EXPECT_EQ(result->err, "");
}

TEST(CommandRunnerTest, CapturesStderrAndTheExitStatus) {
  FakeClock clock;
  absl::StatusOr<CommandResult> result =
      RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, Options(), clock);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_EQ(result->out, "out\n");
  EXPECT_EQ(result->err, "err\n");
  absl::StatusOr<CommandResult> killed = RunCommand({"sh", "-c", "kill -9 $$"}, Options(), clock);
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(killed->exit_code, 128 + 9);
}

TEST(CommandRunnerTest, LongOutputIsTruncated) {
  FakeClock clock;
  CommandOptions options = Options();
  options.max_output_bytes = 10;
  absl::StatusOr<CommandResult> result =
      RunCommand({"sh", "-c", "seq 1 100000"}, options, clock);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->out, "1\n2\n3\n4\n5\n[... truncated]");
  EXPECT_TRUE(result->truncated);
  absl::StatusOr<CommandResult> short_output = RunCommand({"echo", "12345678"}, options, clock);
  ASSERT_TRUE(short_output.ok()) << short_output.status();
  EXPECT_FALSE(short_output->truncated);
}

TEST(CommandRunnerTest, TheEnvironmentCanBeSetAndUnset) {
  FakeClock clock;
  setenv("VIGIL_TEST_KEEP", "kept", 1);
  setenv("VIGIL_TEST_DROP", "inherited", 1);
  setenv("VIGIL_TEST_SET", "inherited", 1);
  CommandOptions options = Options();
  options.environment = {"VIGIL_TEST_SET=new=value", "VIGIL_TEST_DROP", "VIGIL_TEST_NEW=x"};
  absl::StatusOr<CommandResult> result = RunCommand(
      {"sh", "-c",
       "echo \"$VIGIL_TEST_KEEP|${VIGIL_TEST_DROP-unset}|$VIGIL_TEST_SET|$VIGIL_TEST_NEW\"; "
       "env | grep -c '^VIGIL_TEST_SET='"},
      options, clock);
  unsetenv("VIGIL_TEST_KEEP");
  unsetenv("VIGIL_TEST_DROP");
  unsetenv("VIGIL_TEST_SET");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->out, "kept|unset|new=value|x\n1\n");
}

TEST(CommandRunnerTest, AMissingProgramIsNotFound) {
  FakeClock clock;
  EXPECT_EQ(RunCommand({"/nonexistent/scontrol"}, Options(), clock).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(RunCommand({"vigil-no-such-program"}, Options(), clock).status().code(),
            absl::StatusCode::kNotFound);
  ScratchDir dir;
  WriteFile(dir.File("not-executable"), "#!/bin/sh\n");
  EXPECT_EQ(RunCommand({dir.File("not-executable")}, Options(), clock).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(RunCommand({}, Options(), clock).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CommandRunnerTest, ACommandPastItsTimeoutIsKilledWithItsChildren) {
  ScratchDir dir;
  std::string pid_file = dir.File("child.pid");
  std::string ready = dir.File("ready");
  ASSERT_EQ(mkfifo(ready.c_str(), 0600), 0);
  FakeClock clock;
  absl::StatusOr<CommandResult> result;
  // The background sleep outlives the shell unless the whole process group
  // is killed.
  std::thread runner([&] {
    result = RunCommand({"sh", "-c",
                         "sleep 30 & echo $! > " + pid_file + "; echo started; echo > " +
                             ready + "; wait"},
                        Options(30), clock);
  });
  std::ifstream(ready).get();  // blocks until the command gets there
  clock.Advance(31);
  runner.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("ran longer than 30 s"));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("stdout: started"));
  std::string child = testing::ReadFile(pid_file);
  ASSERT_FALSE(child.empty());
  // SIGKILL is delivered asynchronously: a pidfd becomes readable when the
  // child has exited (ESRCH: it is gone already).
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, std::stoi(child), 0));
  if (pidfd < 0) {
    EXPECT_EQ(errno, ESRCH);
    return;
  }
  pollfd exited = {pidfd, POLLIN, 0};
  EXPECT_EQ(poll(&exited, 1, 5000), 1) << "the child of the killed command still runs";
  close(pidfd);
}

TEST(CommandRunnerTest, CommandLineQuotesForDisplay) {
  EXPECT_EQ(CommandLine({"scontrol", "update", "Reason=vigil inc-1: it's hot", "State=DRAIN"}),
            "scontrol update 'Reason=vigil inc-1: it'\\''s hot' State=DRAIN");
  EXPECT_EQ(CommandLine({"squeue", "-o", "%i", ""}), "squeue -o %i ''");
}

}  // namespace
}  // namespace vigil
