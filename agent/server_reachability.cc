#include "agent/server_reachability.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/catch_all.h"

namespace vigil::agent {
namespace {

// The two gauges, for /metrics and the status file.
std::string Render(bool unreachable, double silence) {
  return absl::StrCat(
      "# HELP vigil_agent_server_unreachable 1 while no server has "
      "acknowledged a batch for unreachable_after_seconds.\n"
      "# TYPE vigil_agent_server_unreachable gauge\n"
      "vigil_agent_server_unreachable ",
      unreachable ? 1 : 0,
      "\n# HELP vigil_agent_seconds_since_last_ack Seconds since a server last "
      "acknowledged a batch (since the agent started, if none has).\n"
      "# TYPE vigil_agent_seconds_since_last_ack gauge\n"
      "vigil_agent_seconds_since_last_ack ",
      absl::StrFormat("%.3f", silence), "\n");
}

}  // namespace

ServerReachability::ServerReachability(ServerReachabilityOptions options)
    : options_(std::move(options)),
      started_at_(options_.clock->Now()),
      // Errors are logged by Check itself; a bug must not end the checks.
      rounds_(options_.clock, options_.check_seconds, [this] { (void)Check(); },
              [this](const std::string& error) {
                Log(absl::StrCat("reachability check threw ", error));
              }) {}

ServerReachability::~ServerReachability() { Stop(); }

double ServerReachability::Silence(const StreamClientStats& stats,
                                   double now) const {
  const double since = stats.last_ack_time > 0 ? stats.last_ack_time : started_at_;
  return std::max(0.0, now - since);
}

std::string ServerReachability::MetricsText() const {
  const double silence = Silence(options_.stats(), options_.clock->Now());
  return Render(silence >= options_.unreachable_after_seconds, silence);
}

absl::Status ServerReachability::Check() {
  std::lock_guard<std::mutex> l(check_mu_);
  const StreamClientStats stats = options_.stats();
  const double now = options_.clock->Now();
  const double silence = Silence(stats, now);
  const bool unreachable = silence >= options_.unreachable_after_seconds;
  if (unreachable && !unreachable_) {
    silent_since_ = now - silence;
    Log(absl::StrFormat(
        "no ack from server %s for %.0f s (unreachable after %g s); %u "
        "batches waiting to be sent",
        options_.server, silence, options_.unreachable_after_seconds,
        stats.pending_batches));
  } else if (!unreachable && unreachable_) {
    Log(absl::StrFormat(
        "server %s acknowledging again after %.0f s without acks; %u "
        "batches still spooled",
        options_.server, std::max(0.0, stats.last_ack_time - silent_since_),
        stats.pending_batches));
  }
  unreachable_ = unreachable;
  if (options_.status_file.empty()) return absl::OkStatus();
  absl::Status written = WriteStatusFile(Render(unreachable, silence));
  const std::string error(written.message());
  if (error != logged_file_error_) {
    Log(written.ok() ? absl::StrCat("status file ", options_.status_file,
                                    " written again")
                     : error);
    logged_file_error_ = error;
  }
  return written;
}

absl::Status ServerReachability::WriteStatusFile(const std::string& text) const {
  const std::string& path = options_.status_file;
  // node_exporter reads only *.prom files: the temp file is never read.
  const std::string temp = path + ".tmp";
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat(
        "cannot write status file ", temp, ": ", std::strerror(errno)));
  // Readable by node_exporter's user whatever the agent's umask (the
  // systemd unit's is 0027); the content is no secret.
  (void)fchmod(fd, 0644);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      close(fd);
      unlink(temp.c_str());
      return absl::UnavailableError(
          absl::StrCat("cannot write status file ", temp, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 || rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(temp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot replace status file ", path, ": ", why));
  }
  return absl::OkStatus();
}

void ServerReachability::Log(const std::string& line) {
  if (options_.log) return options_.log(line);
  std::fprintf(stderr, "vigil-agent: %s\n", line.c_str());
}

void ServerReachability::Start() { rounds_.Start(); }

void ServerReachability::Stop() { rounds_.Stop(); }

}  // namespace vigil::agent
