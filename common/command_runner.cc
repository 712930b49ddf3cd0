#include "common/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace vigil {
namespace {

constexpr char kTruncated[] = "[... truncated]";

// Closes the descriptors it holds when it goes out of scope.
class Fds {
 public:
  ~Fds() {
    for (int& fd : fds_) CloseFd(fd);
  }
  int& operator[](int i) { return fds_[i]; }
  static void CloseFd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }

 private:
  int fds_[4] = {-1, -1, -1, -1};  // stdout read/write, stderr read/write
};

// Reads what is available on `fd` into `sink` (keeping at most `max`
// bytes, setting `*truncated` when more came); closes `fd` at end of
// stream or on a read error.
void Drain(int& fd, std::string& sink, size_t max, bool* truncated) {
  char buffer[4096];
  ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    Fds::CloseFd(fd);
    return;
  }
  size_t room = sink.size() < max ? max - sink.size() : 0;
  sink.append(buffer, std::min(room, static_cast<size_t>(n)));
  if (static_cast<size_t>(n) > room && !*truncated) {
    sink.append(kTruncated);
    *truncated = true;
  }
}

// The inherited environment with `extra` on top: "NAME=value" sets, a bare
// "NAME" unsets. The strings live in `extra` and `environ`; the result is
// null-terminated.
std::vector<char*> Environment(const std::vector<std::string>& extra) {
  std::vector<char*> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view inherited(*entry);
    std::string_view name = inherited.substr(0, inherited.find('='));
    bool replaced = std::any_of(extra.begin(), extra.end(), [&](const std::string& e) {
      return e.starts_with(name) && (e.size() == name.size() || e[name.size()] == '=');
    });
    if (!replaced) env.push_back(*entry);
  }
  for (const std::string& entry : extra) {
    if (entry.find('=') != std::string::npos) env.push_back(const_cast<char*>(entry.c_str()));
  }
  env.push_back(nullptr);
  return env;
}

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line.push_back(' ');
    bool plain = !arg.empty() && arg.find_first_of(" \t\n'\"\\$`;&|<>*?()") ==
                                     std::string::npos;
    if (plain) {
      line += arg;
      continue;
    }
    line.push_back('\'');
    for (char c : arg) {
      if (c == '\'') {
        line += "'\\''";
      } else {
        line.push_back(c);
      }
    }
    line.push_back('\'');
  }
  return line;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const CommandOptions& options,
                                         Clock& clock) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  // The timeout counts from the call: taken after the spawn, a clock that
  // moved while the child started would be missed.
  const double deadline = clock.Now() + options.timeout_seconds;
  Fds fds;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  fds[0] = out_pipe[0];
  fds[1] = out_pipe[1];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  fds[2] = err_pipe[0];
  fds[3] = err_pipe[1];

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[3], 2);
  // Its own process group, so a timeout kills its children too; no blocked
  // or ignored signals inherited from this process.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP |
                                            POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(&attributes, &signals);
  sigfillset(&signals);
  posix_spawnattr_setsigdefault(&attributes, &signals);

  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  if (!options.environment.empty()) env = Environment(options.environment);
  char** envp = options.environment.empty() ? environ : env.data();
  pid_t pid = -1;
  int spawn_error =
      argv[0].find('/') != std::string::npos
          ? posix_spawn(&pid, args[0], &actions, &attributes, args.data(), envp)
          : posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  Fds::CloseFd(fds[1]);
  Fds::CloseFd(fds[3]);
  if (spawn_error != 0) {
    std::string message =
        absl::StrCat("cannot run ", argv[0], ": ", std::strerror(spawn_error));
    if (spawn_error == ENOENT || spawn_error == EACCES ||
        spawn_error == ENOEXEC || spawn_error == ENOTDIR) {
      return absl::NotFoundError(message);
    }
    return absl::InternalError(message);
  }

  CommandResult result;
  bool out_truncated = false;
  bool err_truncated = false;
  bool timed_out = false;
  while (fds[0] >= 0 || fds[2] >= 0) {
    double remaining = deadline - clock.Now();
    if (remaining <= 0) {
      timed_out = true;
      // Keep what it printed already, for the error message.
      for (int reads = 0; reads < 16; ++reads) {
        pollfd polled[2] = {{fds[0], POLLIN, 0}, {fds[2], POLLIN, 0}};
        if (poll(polled, 2, 0) <= 0) break;
        if (polled[0].revents != 0) {
          Drain(fds[0], result.out, options.max_output_bytes, &out_truncated);
        }
        if (polled[1].revents != 0) {
          Drain(fds[2], result.err, options.max_output_bytes, &err_truncated);
        }
      }
      break;
    }
    // Short slices: the clock, not poll(), decides when time is up.
    int slice_ms = static_cast<int>(std::clamp(remaining * 1000, 1.0, 100.0));
    pollfd polled[2] = {{fds[0], POLLIN, 0}, {fds[2], POLLIN, 0}};
    int ready = poll(polled, 2, slice_ms);
    if (ready < 0 && errno != EINTR) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (ready <= 0) continue;
    if (polled[0].revents != 0) {
      Drain(fds[0], result.out, options.max_output_bytes, &out_truncated);
    }
    if (polled[1].revents != 0) {
      Drain(fds[2], result.err, options.max_output_bytes, &err_truncated);
    }
  }

  // Output closed: wait for the exit, still within the deadline (again
  // in short poll() slices; the clock only says when time is up).
  int wait_status = 0;
  while (!timed_out) {
    pid_t reaped = waitpid(pid, &wait_status, WNOHANG);
    if (reaped == pid) break;
    if (reaped < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    if (clock.Now() >= deadline) {
      timed_out = true;
      break;
    }
    poll(nullptr, 0, 1);
  }
  if (timed_out) {
    kill(-pid, SIGKILL);
    waitpid(pid, &wait_status, 0);
    return absl::DeadlineExceededError(absl::StrCat(
        CommandLine(argv), " ran longer than ", options.timeout_seconds,
        " s and was killed; stdout: ", result.out, "; stderr: ", result.err));
  }
  result.exit_code = ExitCode(wait_status);
  result.truncated = out_truncated || err_truncated;
  return result;
}

}  // namespace vigil
