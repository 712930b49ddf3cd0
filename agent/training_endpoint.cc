#include "agent/training_endpoint.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vigil::agent {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr int kListenBacklog = 128;
// Ranks kept at most, per allowed connection: a connection that says hello
// again under another identity leaves the old one until it is stale.
constexpr size_t kRanksPerConnection = 4;

TrainingRanksOptions RanksOptions(const TrainingCollectorOptions& o) {
  TrainingRanksOptions r;
  r.staleness_seconds = o.staleness_seconds;
  r.disconnect_grace_seconds = o.disconnect_grace_seconds;
  r.default_job = o.default_job;
  r.max_ranks = kRanksPerConnection * std::max(o.max_connections, 1);
  return r;
}
// While out of file descriptors, accepting is retried this often.
constexpr int kAcceptRetryMillis = 1000;

std::string SysMessage(std::string_view what, const std::string& path) {
  return absl::StrCat("training endpoint: ", std::string(what), " ", path, ": ",
                      std::strerror(errno));
}

}  // namespace

TrainingCollector::TrainingCollector(TrainingCollectorOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : RealClock()),
      ranks_(RanksOptions(options_)) {}

TrainingCollector::~TrainingCollector() { Stop(); }

absl::Status TrainingCollector::Start(EventSink* events) {
  if (listen_fd_ >= 0)
    return absl::FailedPreconditionError("training endpoint already started");
  if (options_.max_connections < 1 || options_.max_line_bytes < 1 ||
      !(options_.staleness_seconds > 0))
    return absl::InvalidArgumentError(
        "training endpoint: max_connections and max_line_bytes must be >= 1 "
        "and staleness_seconds > 0");
  const std::string& path = options_.socket_path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError(
        absl::StrCat("training endpoint: socket path '", path,
                     "' must be 1 to ", sizeof(addr.sun_path) - 1, " bytes"));
  std::memcpy(addr.sun_path, path.data(), path.size());
  const auto* sa = reinterpret_cast<const sockaddr*>(&addr);
  if (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return absl::InternalError(SysMessage("cannot create directory", dir));
  }

  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(SysMessage("socket() for", path));
  auto fail = [&fd](absl::Status status) {
    close(fd);
    return status;
  };
  if (bind(fd, sa, sizeof(addr)) != 0) {
    if (errno != EADDRINUSE)
      return fail(absl::InternalError(SysMessage("cannot bind", path)));
    struct stat st;
    if (lstat(path.c_str(), &st) != 0)
      return fail(absl::InternalError(SysMessage("cannot stat", path)));
    if (!S_ISSOCK(st.st_mode))
      return fail(absl::FailedPreconditionError(
          absl::StrCat("training endpoint: ", path,
                       " exists and is not a socket; not replacing it")));
    // A socket file: replace it only if nobody listens on it.
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = probe < 0 ? -1 : connect(probe, sa, sizeof(addr));
    int err = errno;
    if (probe >= 0) close(probe);
    if (rc == 0 || err == EAGAIN)
      return fail(absl::AlreadyExistsError(
          absl::StrCat("training endpoint: another process (another "
                       "vigil-agent?) listens on ",
                       path)));
    errno = err;
    if (err != ECONNREFUSED)
      return fail(absl::InternalError(SysMessage("cannot probe", path)));
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      return fail(absl::InternalError(SysMessage("cannot remove stale", path)));
    if (bind(fd, sa, sizeof(addr)) != 0)
      return fail(absl::InternalError(SysMessage("cannot bind", path)));
  }
  struct stat st;
  if (chmod(path.c_str(), options_.socket_mode) != 0 ||
      listen(fd, kListenBacklog) != 0 || stat(path.c_str(), &st) != 0) {
    absl::Status status =
        absl::InternalError(SysMessage("cannot set up", path));
    unlink(path.c_str());
    return fail(status);
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    absl::Status status = absl::InternalError(SysMessage("eventfd for", path));
    unlink(path.c_str());
    return fail(status);
  }
  socket_dev_ = st.st_dev;
  socket_ino_ = st.st_ino;
  listen_fd_ = fd;
  events_ = events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    serve_error_.clear();
  }
  thread_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

void TrainingCollector::Stop() {
  if (listen_fd_ < 0) return;
  // An eventfd write fails only when its counter would overflow, and then
  // Serve() has been woken already.
  const uint64_t one = 1;
  ssize_t woken = write(wake_fd_, &one, sizeof(one));
  (void)woken;
  thread_.join();
  CloseAll();
}

void TrainingCollector::CloseAll() {
  for (auto& [fd, conn] : connections_) close(fd);
  connections_.clear();
  buffered_bytes_ = 0;
  close(listen_fd_);
  close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  // Remove the socket file unless someone has replaced it meanwhile.
  struct stat st;
  if (lstat(options_.socket_path.c_str(), &st) == 0 &&
      st.st_dev == socket_dev_ && st.st_ino == socket_ino_) {
    unlink(options_.socket_path.c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.connections_open = 0;
  handled_.notify_all();
}

void TrainingCollector::Serve() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({accept_paused_ ? -1 : listen_fd_, POLLIN, 0});
    for (const auto& [fd, conn] : connections_) fds.push_back({fd, POLLIN, 0});
    int n =
        poll(fds.data(), fds.size(), accept_paused_ ? kAcceptRetryMillis : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> lock(mu_);
      serve_error_ = SysMessage("poll() failed serving", options_.socket_path);
      return;
    }
    if (fds[0].revents != 0) return;
    if (accept_paused_ || fds[1].revents != 0) Accept();
    bool closed = false;
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = connections_.find(fds[i].fd);
      if (Read(it->second)) continue;
      if (it->second.hello.has_value()) {
        // A rank that closes its connection and does not come back has
        // exited (TrainingRanksOptions::disconnect_grace_seconds).
        std::lock_guard<std::mutex> lock(mu_);
        ranks_.Disconnected(*it->second.hello, clock_->Now());
      }
      close(it->first);
      buffered_bytes_ -= it->second.buffer.size();
      connections_.erase(it);
      closed = true;
    }
    if (closed) {
      accept_paused_ = false;
      std::lock_guard<std::mutex> lock(mu_);
      stats_.connections_open = connections_.size();
      handled_.notify_all();
    }
  }
}

void TrainingCollector::Accept() {
  accept_paused_ = false;
  for (;;) {
    int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      accept_paused_ = errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                       errno == ENOMEM;
      return;
    }
    Connection conn;
    conn.fd = fd;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      conn.pid = cred.pid;
      conn.uid = cred.uid;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (connections_.size() >= static_cast<size_t>(options_.max_connections)) {
      std::string reply =
          absl::StrCat("{\"error\":\"too many connections (max ",
                       options_.max_connections, ")\"}\n");
      send(fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      close(fd);
      ++stats_.connections_refused;
    } else {
      connections_.emplace(fd, std::move(conn));
      ++stats_.connections_accepted;
      stats_.connections_open = connections_.size();
    }
    handled_.notify_all();
  }
}

bool TrainingCollector::Read(Connection& conn) {
  char buf[kReadChunk];
  ssize_t n = recv(conn.fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (n == 0) return false;
  std::string_view data(buf, static_cast<size_t>(n));
  // This connection's share of the budget is what the others leave.
  buffered_bytes_ -= conn.buffer.size();
  const size_t budget = options_.max_buffered_bytes > buffered_bytes_
                            ? options_.max_buffered_bytes - buffered_bytes_
                            : 0;
  while (!data.empty()) {
    size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      if (conn.discarding) break;
      const size_t size = conn.buffer.size() + data.size();
      if (size > options_.max_line_bytes || size > budget) {
        ++conn.lines;
        conn.buffer.clear();
        conn.discarding = true;
        Reject(conn, size > options_.max_line_bytes
                         ? absl::StrCat("line longer than ",
                                        options_.max_line_bytes, " bytes")
                         : absl::StrCat("the endpoint's ",
                                        options_.max_buffered_bytes,
                                        " bytes for incomplete lines are "
                                        "taken; line dropped"));
      } else {
        conn.buffer.append(data);
      }
      break;
    }
    std::string_view piece = data.substr(0, newline);
    data.remove_prefix(newline + 1);
    if (conn.discarding) {
      conn.discarding = false;
    } else if (conn.buffer.empty()) {
      HandleLine(conn, piece);
    } else {
      conn.buffer.append(piece);
      HandleLine(conn, conn.buffer);
      conn.buffer.clear();
    }
  }
  buffered_bytes_ += conn.buffer.size();
  return true;
}

void TrainingCollector::HandleLine(Connection& conn, std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;
  ++conn.lines;
  if (line.size() > options_.max_line_bytes) {
    return Reject(conn, absl::StrCat("line longer than ",
                                     options_.max_line_bytes, " bytes"));
  }
  absl::StatusOr<TrainingMessage> message = ParseTrainingMessage(line);
  if (!message.ok())
    return Reject(conn, std::string(message.status().message()));
  if (auto* hello = std::get_if<HelloMessage>(&*message)) {
    if (absl::Status claim = CheckClaim(conn, hello); !claim.ok())
      return Reject(conn, std::string(claim.message()));
  }
  std::optional<Tick> event;
  absl::Status applied;
  {
    std::lock_guard<std::mutex> lock(mu_);
    applied = ranks_.Apply(*message, clock_->Now(), &conn.hello, &event);
    if (applied.ok()) {
      ++stats_.lines_accepted;
      handled_.notify_all();
    }
  }
  if (!applied.ok()) return Reject(conn, std::string(applied.message()));
  if (event && events_ != nullptr) events_->Deliver(std::move(*event));
}

absl::Status TrainingCollector::CheckClaim(Connection& conn,
                                           HelloMessage* hello) {
  hello->verified_job_id.clear();
  auto count = [this](uint64_t TrainingEndpointStats::*counter) {
    std::lock_guard<std::mutex> lock(mu_);
    ++(stats_.*counter);
  };
  if (options_.job_resolver == nullptr) {
    count(&TrainingEndpointStats::claims_unverified);
    return absl::OkStatus();
  }
  if (!conn.job) conn.job = options_.job_resolver->Resolve(conn.pid, conn.uid);
  const absl::StatusOr<ProcessJob>& job = *conn.job;
  if (!job.ok()) {
    if (absl::IsPermissionDenied(job.status()) || options_.refuse_unverified) {
      count(&TrainingEndpointStats::claims_refused);
      return absl::PermissionDeniedError(absl::StrCat(
          "job claim refused: ", job.status().message()));
    }
    count(&TrainingEndpointStats::claims_unverified);
    return absl::OkStatus();
  }
  if (hello->job.empty())
    hello->job = job->job_name.empty() ? job->job_id : job->job_name;
  if (job->scheduler == "kubernetes" && hello->job != job->job_id) {
    // The agent knows the pod, not the name of the job it belongs to
    // (that takes the API server): the claim stays unverified.
    count(&TrainingEndpointStats::claims_unverified);
    return absl::OkStatus();
  }
  if (hello->job != job->job_id && hello->job != job->job_name) {
    count(&TrainingEndpointStats::claims_refused);
    return absl::PermissionDeniedError(absl::StrCat(
        "job claim refused: this process runs in ", job->scheduler, " job ",
        job->job_id,
        job->job_name.empty() ? "" : absl::StrCat(" ('", job->job_name, "')"),
        ", not in '", hello->job, "'"));
  }
  hello->verified_job_id = job->job_id;
  count(&TrainingEndpointStats::claims_verified);
  return absl::OkStatus();
}

void TrainingCollector::Reject(Connection& conn, std::string_view reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lines_rejected;
    ++rejected_since_collect_;
    last_rejection_ =
        absl::StrCat("pid ", conn.pid, " uid ", conn.uid, " line ", conn.lines,
                     ": ", std::string(reason));
    handled_.notify_all();
  }
  if (conn.replies_broken) return;
  nlohmann::json reply = {{"error", std::string(reason)}, {"line", conn.lines}};
  std::string text =
      reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  ssize_t n =
      send(conn.fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  // Nothing sent (buffer full) keeps the reply stream aligned on lines; a
  // part of a line would not, so no more replies go to this connection.
  if (n > 0 && static_cast<size_t>(n) < text.size()) conn.replies_broken = true;
}

absl::Status TrainingCollector::Collect(Tick* tick) {
  const double now = clock_->Now();
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status status;
  if (!serve_error_.empty()) {
    status = absl::InternalError(serve_error_);
  } else if (rejected_since_collect_ > 0) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "training endpoint: ", rejected_since_collect_,
        " line(s) rejected since the last tick; last from ", last_rejection_));
  }
  rejected_since_collect_ = 0;
  ranks_.Collect(now, tick);
  return status;
}

std::vector<std::pair<std::string, double>> TrainingCollector::HealthCounters()
    const {
  TrainingEndpointStats s = stats();
  return {{"lines_accepted_total", double(s.lines_accepted)},
          {"lines_rejected_total", double(s.lines_rejected)},
          {"connections_accepted_total", double(s.connections_accepted)},
          {"connections_refused_total", double(s.connections_refused)},
          {"connections_open", double(s.connections_open)},
          {"claims_verified_total", double(s.claims_verified)},
          {"claims_unverified_total", double(s.claims_unverified)},
          {"claims_refused_total", double(s.claims_refused)}};
}

TrainingEndpointStats TrainingCollector::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool TrainingCollector::WaitForStats(
    const std::function<bool(const TrainingEndpointStats&)>& done,
    std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return handled_.wait_for(lock, timeout, [&] { return done(stats_); });
}

}  // namespace vigil::agent
