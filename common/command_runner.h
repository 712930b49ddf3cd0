// Runs scheduler client programs (scontrol, squeue, ...) directly with
// posix_spawn — never through a shell — and captures what they print.
#ifndef VIGIL_COMMON_COMMAND_RUNNER_H_
#define VIGIL_COMMON_COMMAND_RUNNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"

namespace vigil {

// How a finished command went.
struct CommandResult {
  // The exit status, or 128 + N when killed by signal N.
  int exit_code = 0;
  std::string out;  // stdout, at most CommandOptions::max_output_bytes
  std::string err;  // stderr, likewise
  // True when stdout or stderr went over max_output_bytes and was cut.
  bool truncated = false;
};

struct CommandOptions {
  // The command is killed (its whole process group) after this long, as
  // the clock counts. Default 30 s.
  double timeout_seconds = 30;
  // Output beyond this many bytes per stream is read and dropped, with
  // "[... truncated]" appended. Default 64 KiB.
  size_t max_output_bytes = 64 * 1024;
  // Changes to the inherited environment: "NAME=value" sets NAME (replacing
  // an inherited value), a bare "NAME" removes it. Default none.
  std::vector<std::string> environment;
};

// Runs argv[0] (looked up in PATH when it has no '/') with `argv`, stdin
// from /dev/null and the environment inherited, in a process group of its
// own (plus options.environment), and waits for it. A non-zero exit is a result, not an error.
// kInvalidArgument for an empty argv; kNotFound when the program does not
// exist or cannot be executed; kDeadlineExceeded (with what it printed so
// far) when it ran past the timeout and was killed; kInternal when pipes or
// spawning fail. Thread-safe.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const CommandOptions& options,
                                         Clock& clock);

// `argv` as one line for logs and webhook answers, elements with spaces or
// quotes single-quoted. Display only: nothing ever runs it through a shell.
std::string CommandLine(const std::vector<std::string>& argv);

}  // namespace vigil

#endif  // VIGIL_COMMON_COMMAND_RUNNER_H_
