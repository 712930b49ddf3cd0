#include "server/remote_write/remote_write.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace vigil {
namespace {

// How often the sender looks for minutes of silent series that are due.
constexpr double kSweepSeconds = 1;
// Checks one sweep step looks at while holding the lock (a few ms): at a
// minute's end millions of series fall due together, and OnFrame waits
// for that lock.
constexpr size_t kSweepChecks = 10'000;
// Series keys kept by the sender; past it the cache starts over.
constexpr size_t kMaxCachedKeys = 1 << 20;
// Longest body excerpt in a logged refusal.
constexpr size_t kMaxLoggedBody = 200;
// Distinct refusals logged at most (then they are only counted).
constexpr size_t kMaxLoggedRefusals = 100;

constexpr const char* kDropNames[] = {"queue_full", "rejected", "late",
                                      "unknown_series", "shutdown"};
constexpr const char* kResultNames[] = {"success", "network_error",
                                        "server_error", "throttled",
                                        "rejected"};

// The contents of the credential file at `path`, without trailing
// whitespace. kNotFound if unreadable, kInvalidArgument if empty.
absl::StatusOr<std::string> ReadCredential(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("remote_write: ", path, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  std::string secret(absl::StripTrailingAsciiWhitespace(text.str()));
  if (secret.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("remote_write: ", path, ": empty"));
  return secret;
}

// The compiled raw_metrics patterns; kInvalidArgument naming the bad one.
absl::StatusOr<std::vector<std::regex>> CompilePatterns(
    const std::vector<std::string>& patterns) {
  std::vector<std::regex> out;
  for (size_t i = 0; i < patterns.size(); ++i) {
    try {
      out.emplace_back(patterns[i], std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "remote_write.raw_metrics[", i, "]: not a valid regex: ", e.what()));
    }
  }
  return out;
}

// How a transport result counts.
RemoteWriter::Result Classify(const TransportResult& r) {
  if (r.http_status == 0) return RemoteWriter::Result::kNetworkError;
  if (r.http_status >= 200 && r.http_status < 300)
    return RemoteWriter::Result::kSuccess;
  if (r.http_status == 429) return RemoteWriter::Result::kThrottled;
  if (r.http_status >= 500) return RemoteWriter::Result::kServerError;
  return RemoteWriter::Result::kRejected;
}

// "HTTP 503: body excerpt", or the transport's error.
std::string Describe(const TransportResult& r) {
  if (r.http_status == 0) return r.error;
  std::string body(absl::StripAsciiWhitespace(
      r.body.substr(0, std::min(r.body.size(), kMaxLoggedBody))));
  return body.empty() ? absl::StrCat("HTTP ", r.http_status)
                      : absl::StrCat("HTTP ", r.http_status, ": ", body);
}

}  // namespace

absl::Status ValidateRemoteWriteOptions(const RemoteWriteOptions& o) {
  std::vector<std::string> errors;
  if (o.url.empty()) {
    errors.push_back("remote_write.url: required");
  } else if (!absl::StartsWith(o.url, "http://") &&
             !absl::StartsWith(o.url, "https://")) {
    errors.push_back("remote_write.url: must start with http:// or https://");
  }
  if (o.batch_samples < 1)
    errors.push_back("remote_write.batch_samples: must be >= 1");
  if (o.max_pending_samples < static_cast<uint64_t>(std::max(o.batch_samples, 1)))
    errors.push_back(
        "remote_write.max_pending_samples: must be at least batch_samples");
  const std::pair<const char*, double> positive[] = {
      {"flush_seconds", o.flush_seconds},
      {"timeout_seconds", o.timeout_seconds},
      {"retry_base_seconds", o.retry_base_seconds},
      {"retry_max_seconds", o.retry_max_seconds}};
  for (const auto& [name, value] : positive) {
    if (!(value > 0) || !std::isfinite(value))
      errors.push_back(absl::StrCat("remote_write.", name, ": must be > 0"));
  }
  if (!(o.grace_seconds >= 0) || !std::isfinite(o.grace_seconds))
    errors.push_back("remote_write.grace_seconds: must be >= 0");
  if (!(o.shutdown_flush_seconds >= 0) || !std::isfinite(o.shutdown_flush_seconds))
    errors.push_back("remote_write.shutdown_flush_seconds: must be >= 0");
  if (o.retry_max_seconds < o.retry_base_seconds)
    errors.push_back(
        "remote_write.retry_max_seconds: must not be below retry_base_seconds");
  if (!o.bearer_token_file.empty() &&
      (!o.basic_auth_username.empty() || !o.basic_auth_password_file.empty()))
    errors.push_back(
        "remote_write.bearer_token_file: cannot be combined with basic_auth");
  if (o.basic_auth_username.empty() != o.basic_auth_password_file.empty())
    errors.push_back(
        "remote_write.basic_auth: needs both username and password_file");
  if (absl::StatusOr<std::vector<std::regex>> compiled =
          CompilePatterns(o.raw_metrics);
      !compiled.ok())
    errors.push_back(std::string(compiled.status().message()));
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

absl::StatusOr<std::unique_ptr<RemoteWriter>> RemoteWriter::Create(
    const RemoteWriteOptions& options, const SeriesStore* store, Clock* clock,
    Transport* transport) {
  if (absl::Status s = ValidateRemoteWriteOptions(options); !s.ok()) return s;
  absl::StatusOr<std::vector<std::regex>> raw =
      CompilePatterns(options.raw_metrics);
  if (!raw.ok()) return raw.status();
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Content-Encoding", "snappy"},
      {"Content-Type", "application/x-protobuf"},
      {"X-Prometheus-Remote-Write-Version", "0.1.0"},
      {"User-Agent", "vigil-server"}};
  std::string password;
  if (!options.bearer_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadCredential(options.bearer_token_file);
    if (!token.ok()) return token.status();
    headers.emplace_back("Authorization", absl::StrCat("Bearer ", *token));
  } else if (!options.basic_auth_password_file.empty()) {
    absl::StatusOr<std::string> pw =
        ReadCredential(options.basic_auth_password_file);
    if (!pw.ok()) return pw.status();
    password = *std::move(pw);
  }
  return std::unique_ptr<RemoteWriter>(new RemoteWriter(
      options, store, clock, transport, *std::move(raw), std::move(headers),
      options.basic_auth_username, std::move(password)));
}

RemoteWriter::RemoteWriter(
    const RemoteWriteOptions& options, const SeriesStore* store, Clock* clock,
    Transport* transport, std::vector<std::regex> raw,
    std::vector<std::pair<std::string, std::string>> headers,
    std::string username, std::string password)
    : options_(options),
      store_(store),
      clock_(clock),
      transport_(transport),
      raw_patterns_(std::move(raw)),
      headers_(std::move(headers)),
      username_(std::move(username)),
      password_(std::move(password)),
      aggregator_(options.grace_seconds) {}

RemoteWriter::~RemoteWriter() { Stop(); }

void RemoteWriter::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void RemoteWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_deadline_ = clock_->Now() + options_.shutdown_flush_seconds;
    if (!started_) {
      CountDrop(Drop::kShutdown, queue_.size());
      queue_.clear();
    }
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RemoteWriter::CountDrop(Drop reason, uint64_t n) {
  dropped_[static_cast<size_t>(reason)] += n;
}

void RemoteWriter::Queue(const Pending& sample) {
  if (queue_.empty()) oldest_queued_at_ = clock_->Now();
  if (queue_.size() + in_flight_ >= options_.max_pending_samples) {
    CountDrop(Drop::kQueueFull, 1);
    if (queue_.empty()) return;  // all of it is in flight
    queue_.pop_front();
  }
  queue_.push_back(sample);
}

void RemoteWriter::QueueRollups(const std::vector<MinuteRollup>& rollups) {
  for (const MinuteRollup& r : rollups) {
    const int64_t ms = r.minute_start_ms;
    Queue({r.id, ExportKind::kMin, ms, r.min});
    Queue({r.id, ExportKind::kMax, ms, r.max});
    Queue({r.id, ExportKind::kAvg, ms, r.sum / static_cast<double>(r.count)});
    Queue({r.id, ExportKind::kCount, ms, static_cast<double>(r.count)});
  }
}

bool RemoteWriter::IsRaw(uint32_t id) {
  auto [it, inserted] = raw_ids_.try_emplace(id, false);
  if (inserted) {
    // Once per id: the key never changes (ids are not reused).
    if (absl::StatusOr<SeriesKey> key = store_->Key(id); key.ok()) {
      for (const std::regex& pattern : raw_patterns_)
        it->second = it->second || std::regex_match(key->metric, pattern);
    }
  }
  return it->second;
}

void RemoteWriter::OnFrame(const FrameView& frame) {
  const double now = clock_->Now();
  const int64_t ts_ms = std::llround(frame.ts * 1000.0);
  const size_t n = std::min(frame.ids.size(), frame.values.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  scratch_.clear();
  uint64_t late = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = frame.ids[i];
    const double value = frame.values[i];
    if (aggregator_.Add(id, frame.ts, value, now, &scratch_) ==
        MinuteAggregator::Fold::kLate)
      ++late;
    if (!raw_patterns_.empty() && !std::isnan(value) && IsRaw(id))
      Queue({id, ExportKind::kRaw, ts_ms, value});
  }
  CountDrop(Drop::kLate, late);
  QueueRollups(scratch_);
  if (queue_.size() >= static_cast<size_t>(options_.batch_samples))
    wake_.notify_one();
}

void RemoteWriter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  double next_sweep = clock_->Now();
  while (!stopping_) {
    const double now = clock_->Now();
    if (now >= next_sweep) {
      scratch_.clear();
      const bool more = aggregator_.Sweep(now, &scratch_, kSweepChecks);
      QueueRollups(scratch_);
      if (more) {  // let ingest in between chunks
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        continue;
      }
      next_sweep = now + kSweepSeconds;
    }
    const double flush_at = oldest_queued_at_ + options_.flush_seconds;
    if (!queue_.empty() &&
        (queue_.size() >= static_cast<size_t>(options_.batch_samples) ||
         now >= flush_at)) {
      SendBatch(lock);
      continue;
    }
    clock_->WaitUntil(lock, wake_,
                      queue_.empty() ? next_sweep : std::min(next_sweep, flush_at));
  }
  while (!queue_.empty() && clock_->Now() < stop_deadline_) SendBatch(lock);
  CountDrop(Drop::kShutdown, queue_.size());
  queue_.clear();
}

std::string RemoteWriter::Encode(const std::vector<Pending>& batch,
                                 size_t* samples, size_t* unknown) {
  if (keys_.size() > kMaxCachedKeys) keys_.clear();
  std::vector<ExportSeries> series;
  // (id, kind) -> index in `series`.
  absl::flat_hash_map<uint64_t, size_t> index;
  for (const Pending& p : batch) {
    auto key = keys_.find(p.id);
    if (key == keys_.end()) {
      absl::StatusOr<SeriesKey> found = store_->Key(p.id);
      if (!found.ok()) {  // expired since: nothing to name it by
        ++*unknown;
        continue;
      }
      key = keys_.emplace(p.id, *std::move(found)).first;
    }
    const uint64_t slot = (static_cast<uint64_t>(p.id) << 3) |
                          static_cast<uint64_t>(p.kind);
    auto [it, inserted] = index.try_emplace(slot, series.size());
    if (inserted) series.push_back(ExportSeries{&key->second, p.kind, {}});
    series[it->second].samples.emplace_back(p.ts_ms, p.value);
    ++*samples;
  }
  return series.empty() ? std::string() : EncodeWriteRequest(series);
}

void RemoteWriter::SendBatch(std::unique_lock<std::mutex>& lock) {
  const size_t take =
      std::min(queue_.size(), static_cast<size_t>(options_.batch_samples));
  std::vector<Pending> batch(queue_.begin(), queue_.begin() + take);
  queue_.erase(queue_.begin(), queue_.begin() + take);
  in_flight_ = take;
  if (!queue_.empty()) oldest_queued_at_ = clock_->Now();

  lock.unlock();
  size_t samples = 0;
  size_t unknown = 0;
  OutboundRequest request;
  request.url = options_.url;
  request.headers = headers_;
  request.username = username_;
  request.password = password_;
  request.body = Encode(batch, &samples, &unknown);
  lock.lock();
  CountDrop(Drop::kUnknownSeries, unknown);

  for (int attempt = 1; samples > 0; ++attempt) {
    double timeout = options_.timeout_seconds;
    if (stopping_)
      timeout = std::clamp(stop_deadline_ - clock_->Now(), 0.1, timeout);
    const uint64_t seed = ++request_seq_;
    lock.unlock();
    const TransportResult r = transport_->Send(request, timeout);
    lock.lock();
    const double now = clock_->Now();
    const Result result = Classify(r);
    ++requests_[static_cast<size_t>(result)];
    if (result == Result::kSuccess) {
      sent_ += samples;
      bytes_sent_ += request.body.size();
      last_success_ = now;
      if (failing_)
        std::fprintf(stderr, "vigil-server: remote write to %s works again\n",
                     options_.url.c_str());
      failing_ = false;
      break;
    }
    const std::string why = Describe(r);
    if (result == Result::kRejected) {
      CountDrop(Drop::kRejected, samples);
      if (logged_refusals_.size() < kMaxLoggedRefusals &&
          logged_refusals_.insert(why).second)
        std::fprintf(stderr,
                     "vigil-server: remote write: %s refused a request of %zu "
                     "samples (dropped): %s\n",
                     options_.url.c_str(), samples, why.c_str());
      break;
    }
    if (!failing_)
      std::fprintf(stderr,
                   "vigil-server: remote write to %s failing, retrying: %s\n",
                   options_.url.c_str(), why.c_str());
    failing_ = true;
    double delay = BackoffSeconds(attempt, options_.retry_base_seconds,
                                  options_.retry_max_seconds, seed);
    if (r.retry_after_seconds.has_value())
      delay = std::max(delay, std::min(*r.retry_after_seconds,
                                       10 * options_.retry_max_seconds));
    const double until = now + delay;
    bool give_up = false;
    while (!(give_up = stopping_ && until > stop_deadline_) &&
           clock_->Now() < until)
      clock_->WaitUntil(lock, wake_, until);
    if (give_up) {
      CountDrop(Drop::kShutdown, samples);
      break;
    }
  }
  in_flight_ = 0;
}

std::string RemoteWriter::MetricsText() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto family = [&out](const char* name, const char* type, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                    type, "\n");
  };
  family("vigil_remote_write_samples_sent_total", "counter",
         "Samples (rollup fields and raw samples) the remote-write endpoint "
         "accepted.");
  absl::StrAppend(&out, "vigil_remote_write_samples_sent_total ", sent_, "\n");
  family("vigil_remote_write_samples_dropped_total", "counter",
         "Samples not sent, by reason (late: came after their minute was "
         "sent).");
  for (size_t i = 0; i < static_cast<size_t>(Drop::kCount); ++i)
    absl::StrAppend(&out, "vigil_remote_write_samples_dropped_total{reason=\"",
                    kDropNames[i], "\"} ", dropped_[i], "\n");
  family("vigil_remote_write_requests_total", "counter",
         "Remote-write requests by result (retried ones count each try).");
  for (size_t i = 0; i < static_cast<size_t>(Result::kCount); ++i)
    absl::StrAppend(&out, "vigil_remote_write_requests_total{result=\"",
                    kResultNames[i], "\"} ", requests_[i], "\n");
  family("vigil_remote_write_sent_bytes_total", "counter",
         "Compressed request bytes the endpoint accepted.");
  absl::StrAppend(&out, "vigil_remote_write_sent_bytes_total ", bytes_sent_,
                  "\n");
  family("vigil_remote_write_pending_samples", "gauge",
         "Samples queued or in flight.");
  absl::StrAppend(&out, "vigil_remote_write_pending_samples ",
                  queue_.size() + in_flight_, "\n");
  family("vigil_remote_write_open_series", "gauge",
         "Series with a minute being rolled up or remembered.");
  absl::StrAppend(&out, "vigil_remote_write_open_series ",
                  aggregator_.series(), "\n");
  family("vigil_remote_write_last_success_timestamp_seconds", "gauge",
         "Unix time of the last accepted request (0: none yet).");
  absl::StrAppend(&out, "vigil_remote_write_last_success_timestamp_seconds ",
                  absl::StrFormat("%.3f", last_success_), "\n");
  return out;
}

}  // namespace vigil
