#include "server/api/http_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "common/process_usage.h"
#include "server/escalation/escalation_service.h"
#include "server/api/http_reply.h"

namespace vigil {
namespace {

constexpr const char* kRemoteWritePath = "/api/v1/write";

using Json = nlohmann::json;

constexpr char kJson[] = "application/json";
constexpr double kDefaultRangeSeconds = 3600;
// Incidents listed when no limit is given, and the most one list may hold.
constexpr size_t kDefaultIncidents = 100;
constexpr size_t kMaxIncidents = 10'000;
// Series per page of /api/v1/series: by default, and at most.
constexpr size_t kDefaultSeriesPage = 10'000;
constexpr size_t kMaxSeriesPage = 100'000;
// Evidence entries kept per incident in a list (the detail has them all).
constexpr size_t kListEvidence = 5;

// Appends `v` as JSON: shortest round-trip form, or "nan"/"inf"/"-inf".
void AppendNumber(std::string* out, double v) {
  if (std::isnan(v)) {
    out->append("\"nan\"");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "\"inf\"" : "\"-inf\"");
  } else {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    out->append(buf, end);
  }
}

Json SeriesJson(SeriesId id, const SeriesKey& key) {
  Json labels = Json::object();
  for (const auto& [name, value] : key.labels) labels[name] = value;
  return Json{{"id", id}, {"metric", key.metric}, {"labels", labels}};
}

// Query times are Unix seconds up to the year 3000.
constexpr double kLatestTime = 32503680000.0;

// Reads optional parameter `name` as a finite number in [min, max] into
// `*out`. Returns an error message naming the parameter, or "" on success.
std::string ParseNumber(const httplib::Request& req, const char* name,
                        double min, double max, double* out) {
  if (!req.has_param(name)) return "";
  std::string text = req.get_param_value(name);
  double v;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v))
    return absl::StrCat("parameter '", name, "': '", text,
                        "' is not a finite number");
  // Far-off times would overflow the store's millisecond clock.
  if (v < min || v > max)
    return absl::StrCat("parameter '", name, "': ", text, " is outside [",
                        min, ", ", max, "]");
  *out = v;
  return "";
}

// Reads the parameters of /api/v1/incidents into `*filter`. Returns an
// error message naming the parameter, or "" on success.
std::string ParseIncidentFilter(const httplib::Request& req,
                                IncidentFilter* filter) {
  if (req.has_param("state")) {
    std::string state = req.get_param_value("state");
    if (state == "firing") {
      filter->state = IncidentState::kFiring;
    } else if (state == "resolved") {
      filter->state = IncidentState::kResolved;
    } else if (state != "all") {
      return absl::StrCat("parameter 'state': '", state,
                          "' is not firing, resolved or all");
    }
  }
  if (req.has_param("severity")) {
    std::string text = req.get_param_value("severity");
    for (absl::string_view name : absl::StrSplit(text, ',')) {
      std::optional<Severity> severity =
          ParseSeverity(std::string_view(name.data(), name.size()));
      if (!severity)
        return absl::StrCat("parameter 'severity': '", text,
                            "' is not a list of P0, P1, P2, P3");
      filter->severities.push_back(*severity);
    }
  }
  filter->job = req.get_param_value("job");
  filter->node = req.get_param_value("node");
  filter->text = req.get_param_value("q");
  filter->limit = kDefaultIncidents;
  if (req.has_param("limit")) {
    std::string text = req.get_param_value("limit");
    if (!absl::SimpleAtoi(text, &filter->limit) || filter->limit < 1 ||
        filter->limit > kMaxIncidents)
      return absl::StrCat("parameter 'limit': '", text,
                          "' is not an integer in [1, ", kMaxIncidents, "]");
  }
  return "";
}

// Names the store series of evidence that has a metric, node and GPU (or
// NIC/disk) but no series id: the GPU-wide detectors (throttle, peer power,
// clocks, NVLink) judge a GPU rather than one series, yet the page wants
// the series behind them to chart.
void FillEvidenceSeries(const SeriesStore& store, Json* incident) {
  auto text = [](const Json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  for (Json& e : (*incident)["evidence"]) {
    if (!e.is_object() || (e.contains("series") && e["series"].is_number())) continue;
    SeriesFilter filter{text(e, "job"), text(e, "node"), text(e, "metric")};
    if (filter.job.empty()) filter.job = text(*incident, "job");
    if (filter.metric.empty() || filter.node.empty()) continue;
    const std::string gpu =
        e.contains("gpu") && e["gpu"].is_number_integer()
            ? std::to_string(e["gpu"].get<int>()) : std::string();
    const std::string dev = text(e, "dev");
    for (const SeriesInfo& info : store.ListSeries(filter)) {
      if (info.key.LabelValue("gpu") == gpu && info.key.LabelValue("dev") == dev) {
        e["series"] = info.id;
        break;
      }
    }
  }
}

// Removes "br" from the Accept-Encoding of `req`. Debian's cpp-httplib
// (0.11, built with brotli) compresses every JSON, JavaScript and text
// answer with brotli whenever the client offers it, at quality 11: about
// 0.5 MB/s here, so a 2 MB incident list took 3 s to send. Offered gzip
// only, it uses zlib's default level: some 40 ms for the same list.
void RefuseBrotli(httplib::Request& req) {
  auto it = req.headers.find("Accept-Encoding");
  if (it == req.headers.end() || it->second.find("br") == std::string::npos) return;
  std::vector<std::string> kept;
  for (absl::string_view token : absl::StrSplit(it->second, ',')) {
    const absl::string_view name =
        absl::StripAsciiWhitespace(token.substr(0, token.find(';')));
    if (name != "br") kept.emplace_back(absl::StripAsciiWhitespace(token));
  }
  it->second = absl::StrJoin(kept, ", ");
}

// The Prometheus text exposition of one metric family.
void AppendFamily(std::string* out, std::string_view name,
                  std::string_view type, std::string_view help) {
  absl::StrAppend(out, "# HELP ", std::string(name), " ", std::string(help),
                  "\n# TYPE ", std::string(name), " ", std::string(type), "\n");
}

template <typename T>
void AppendSample(std::string* out, std::string_view name_and_labels, T v) {
  absl::StrAppend(out, std::string(name_and_labels), " ", v, "\n");
}

// The heap in use, counted at most once a second (at `now`) however often
// and by however many clients it is asked for: counting holds the
// allocator's locks (common/process_usage.h).
double HeapInUseAtMostOncePerSecond(double now) {
  static std::mutex mu;
  static double counted_at = -std::numeric_limits<double>::infinity();
  static double bytes = 0;
  std::lock_guard<std::mutex> l(mu);
  if (!(now - counted_at < 1)) {
    bytes = HeapInUseBytes();
    counted_at = now;
  }
  return bytes;
}

// The conventional process_* families of Prometheus' client libraries,
// and, if `heap`, the heap in use beside RSS (what is resident but not in
// use is the allocator's free pages, not live data): only when asked, as
// counting it holds the allocator's locks.
void AppendProcessMetrics(std::string* out, bool heap, double now) {
  const ProcessUsage usage = ReadProcessUsage();
  auto add = [out](const char* name, const char* type, const char* help, double v) {
    AppendFamily(out, name, type, help);
    absl::StrAppend(out, name, " ", absl::StrFormat("%.15g", v), "\n");
  };
  add("process_cpu_seconds_total", "counter", "User and system CPU time of the server.",
      usage.cpu_seconds);
  add("process_resident_memory_bytes", "gauge", "Resident memory of the server.",
      usage.resident_bytes);
  add("process_max_resident_memory_bytes", "gauge",
      "Largest resident memory of the server since it started.", usage.max_resident_bytes);
  add("process_start_time_seconds", "gauge", "Unix time the server started.",
      usage.start_time_seconds);
  add("process_open_fds", "gauge", "Open file descriptors of the server.", usage.open_fds);
  if (!heap) return;
  add("vigil_heap_in_use_bytes", "gauge",
      "Only on /metrics?heap=1: heap the server has allocated and not freed "
      "(glibc mallinfo2); resident memory above it is mostly the allocator's "
      "free pages. Counting walks the allocator's free lists under its locks "
      "(up to hundreds of ms on a fragmented heap), so scrapes leave it out; "
      "counted at most once a second.",
      HeapInUseAtMostOncePerSecond(now));
}

}  // namespace

HttpApi::HttpApi(const HttpApiOptions& options)
    : options_(options),
      authorizer_(options.auth, options.clock, options.sessions),
      max_requests_per_client_(options.max_requests_per_client > 0
                                   ? options.max_requests_per_client
                                   : std::max(4, options.threads / 2)),
      server_(std::make_unique<httplib::Server>()) {
  int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(options_.io_timeout_seconds);
  server_->set_write_timeout(options_.io_timeout_seconds);
  server_->set_keep_alive_timeout(options_.keep_alive_seconds);
  // Every answered request is logged once, its cap released with it.
  server_->set_logger([this](const httplib::Request& req, const httplib::Response&) {
    ReleaseRequest(req);
  });
  // Errors httplib answers itself (no route, body too large) get a JSON
  // body like every other error.
  const size_t limit = options_.max_body_bytes;
  server_->set_error_handler([limit](const httplib::Request&,
                                     httplib::Response& res) {
    if (!res.body.empty()) return;
    ReplyError(res, res.status,
               res.status == 413   ? absl::StrCat("request body over ", limit,
                                                  " bytes")
               : res.status == 404 ? std::string("not found")
                                   : absl::StrCat("HTTP status ", res.status));
  });
  // A handler that reads a body field with the wrong type throws
  // nlohmann's type error: that is the client's mistake (400), not the
  // server's. Anything else that escapes a handler is a 500 with its
  // reason, logged; none leaves the request's thread.
  server_->set_exception_handler([](const httplib::Request& req,
                                    httplib::Response& res,
                                    std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const nlohmann::json::exception& e) {
      ReplyError(res, 400, absl::StrCat("bad request body: ", e.what()));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "vigil-server: %s %s failed: %s\n",
                   req.method.c_str(), req.path.c_str(), e.what());
      ReplyError(res, 500, absl::StrCat("internal error: ", e.what()));
    } catch (...) {
      ReplyError(res, 500, "internal error");
    }
  });
  InstallHandlers();
}

HttpApi::~HttpApi() { Stop(); }

std::string HttpApi::ClientAddress(const httplib::Request& req) const {
  return options_.trusted_proxies.ClientOf(req.remote_addr,
                                           req.get_header_value("X-Forwarded-For"));
}

bool HttpApi::AdmitRequest(const httplib::Request& req) {
  std::string client = ClientAddress(req);
  std::lock_guard<std::mutex> l(clients_mu_);
  int& n = in_flight_[client];
  if (n >= max_requests_per_client_) {
    if (n == 0) in_flight_.erase(client);
    return false;
  }
  ++n;
  counted_[&req] = std::move(client);
  return true;
}

void HttpApi::ReleaseRequest(const httplib::Request& req) {
  std::lock_guard<std::mutex> l(clients_mu_);
  auto it = counted_.find(&req);
  if (it == counted_.end()) return;  // refused, or answered before routing
  auto client = in_flight_.find(it->second);
  if (client != in_flight_.end() && --client->second <= 0) in_flight_.erase(client);
  counted_.erase(it);
}

absl::StatusOr<int> HttpApi::Start(const std::string& host, int port) {
  if (thread_.joinable())
    return absl::FailedPreconditionError("HTTP API already started");
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (!server_->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot bind HTTP to ", host, ":", port));
  listen_returned_ = false;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  // stop() is a no-op until the accept loop runs, so wait for it.
  while (!server_->is_running() && !listen_returned_) std::this_thread::yield();
  return bound;
}

void HttpApi::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

void HttpApi::InstallHandlers() {
  const HttpApiOptions& o = options_;
  // Every request under /api/, whatever its method (a HEAD is answered by
  // the GET handler, with the body's length), needs a viewer token unless
  // anonymous reads are on; mutating handlers check their own, higher role
  // on top. The session endpoints and the Twilio callback (signed by
  // Twilio) check for themselves.
  server_->set_pre_routing_handler([this](const httplib::Request& req,
                                          httplib::Response& res) {
    // httplib hands the handler a const view of its own, non-const request.
    RefuseBrotli(const_cast<httplib::Request&>(req));
    if (!AdmitRequest(req)) {
      ReplyError(res, 429, absl::StrCat("more than ", max_requests_per_client_,
                                        " requests in flight from ", ClientAddress(req),
                                        "; retry when one has finished"));
      return httplib::Server::HandlerResponse::Handled;
    }
    // Everything under /api/ but sign-in, Twilio's signed callback and
    // signed peer requests, and /metrics (it names jobs and nodes), needs a
    // viewer unless anonymous reads are allowed. /healthz and the UI's
    // static files do not.
    // A signed request of another server of the fleet for a job's
    // profiles carries no user's token; its handler checks the signature.
    const bool peer = req.path == cluster::kProfilesPath &&
                      req.has_header(cluster::kPeerSignatureHeader);
    // Remote write and alerts carry machine senders' tokens (the
    // remote_write role), checked by their handlers.
    const bool gated = (req.path.rfind("/api/", 0) == 0 &&
                        req.path != "/api/v1/session" && req.path != kRemoteWritePath &&
                        req.path != "/api/v1/alerts" && req.path != "/api/v2/alerts" &&
                        req.path != "/api/v1/callbacks/twilio/voice" && !peer) ||
                       req.path == "/metrics";
    if (options_.auth == nullptr || !gated)
      return httplib::Server::HandlerResponse::Unhandled;
    absl::StatusOr<RequestIdentity> who =
        authorizer_.Authorize(CredentialsOf(req), Role::kViewer);
    if (who.ok()) return httplib::Server::HandlerResponse::Unhandled;
    ReplyStatus(res, who.status());
    return httplib::Server::HandlerResponse::Handled;
  });
  if (o.escalation != nullptr) InstallEscalationHandlers();
  InstallUiHandlers();
  InstallClusterHandlers();
  if (!o.web_dir.empty() && std::filesystem::is_directory(o.web_dir)) {
    server_->set_mount_point("/", o.web_dir);
  }

  server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    ReplyError(res, 404, "no web UI: web dir not configured or no index.html");
  });

  // Liveness stays 200 while the store refuses writes: a restart would not
  // free the disk, and the server recovers by itself. Readiness says 503.
  server_->Get("/healthz", [&o](const httplib::Request&,
                                httplib::Response& res) {
    const absl::Status storage = o.store->Health();
    Json body{{"status", storage.ok() ? "ok" : "degraded"},
              {"time", o.clock->Now()}};
    if (!storage.ok()) body["storage"] = std::string(storage.message());
    Reply(res, 200, body);
  });
  server_->Get("/readyz", [&o](const httplib::Request&,
                               httplib::Response& res) {
    const absl::Status storage = o.store->Health();
    if (storage.ok()) return Reply(res, 200, Json{{"ready", true}});
    Reply(res, 503, Json{{"ready", false},
                         {"storage", std::string(storage.message())}});
  });

  server_->Get("/metrics", [&o](const httplib::Request& req,
                                httplib::Response& res) {
    const IngestMetrics& m = *o.metrics;
    const StoreStats stats = o.store->Stats();
    std::string out;
    AppendFamily(&out, "vigil_ingest_samples_total", "counter",
                 "Samples in applied batches, dropped ones included.");
    AppendSample(&out, "vigil_ingest_samples_total", m.samples.load());
    AppendFamily(&out, "vigil_ingest_batches_total", "counter",
                 "Batches applied (resends not counted).");
    AppendSample(&out, "vigil_ingest_batches_total", m.batches.load());
    AppendFamily(&out, "vigil_ingest_frames_total", "counter",
                 "Frames applied.");
    AppendSample(&out, "vigil_ingest_frames_total", m.frames.load());
    AppendFamily(&out, "vigil_ingest_resent_batches_total", "counter",
                 "Batches resent after a lost ack, acked without re-applying.");
    AppendSample(&out, "vigil_ingest_resent_batches_total",
                 m.resent_batches.load());
    AppendFamily(&out, "vigil_ingest_rejected_total", "counter",
                 "Refused inputs by reason; each ended its stream.");
    for (size_t r = 0; r < m.rejected.size(); ++r) {
      AppendSample(&out,
                   absl::StrCat("vigil_ingest_rejected_total{reason=\"",
                                std::string(RejectReasonName(
                                    static_cast<RejectReason>(r))),
                                "\"}"),
                   m.rejected[r].load());
    }
    AppendFamily(&out, "vigil_ingest_dropped_samples_total", "counter",
                 "Samples of accepted batches the store dropped, by reason.");
    AppendSample(&out, "vigil_ingest_dropped_samples_total{reason=\"duplicate\"}",
                 m.dropped_duplicate.load());
    AppendSample(&out,
                 "vigil_ingest_dropped_samples_total{reason=\"out_of_order\"}",
                 m.dropped_out_of_order.load());
    AppendSample(&out,
                 "vigil_ingest_dropped_samples_total{reason=\"series_limit\"}",
                 m.dropped_series_limit.load());
    AppendFamily(&out, "vigil_ingest_series_refused_total", "counter",
                 "New series refused by a series limit, by limit.");
    for (size_t l = 0; l < static_cast<size_t>(SeriesLimit::kCount); ++l) {
      AppendSample(&out,
                   absl::StrCat("vigil_ingest_series_refused_total{limit=\"",
                                std::string(SeriesLimitName(
                                    static_cast<SeriesLimit>(l))),
                                "\"}"),
                   m.series_refused[l].load());
    }
    AppendFamily(&out, "vigil_ingest_rate_samples_per_second", "gauge",
                 "Samples ingested per second over the last 10 s.");
    AppendSample(&out, "vigil_ingest_rate_samples_per_second",
                 m.sample_rate.Rate(o.clock->Now()));
    m.batch_apply.AppendText(&out, "vigil_ingest_batch_apply_seconds",
                             "Per agent batch: from its read to its samples stored (frame "
                             "log and open blocks).");
    m.batch_ack.AppendText(&out, "vigil_ingest_batch_ack_seconds",
                           "Per agent batch: from its read to its ack, the store's append "
                           "and the wait for and the run of detection included.");
    m.batch_detect.AppendText(&out, "vigil_ingest_batch_detect_seconds",
                              "Per part of an agent batch a frame worker runs: detection on "
                              "its frames (waits for the shard included, the queue not).");
    out += m.AgentDropsText();
    AppendFamily(&out, "vigil_connected_agents", "gauge",
                 "Live agent streams.");
    AppendSample(&out, "vigil_connected_agents", m.connected_agents.load());
    AppendFamily(&out, "vigil_frame_worker_queued_batches", "gauge",
                 "Batches each frame worker (detection shard) holds, queued "
                 "or running.");
    for (int k = 0; k < std::min(m.frame_workers.load(), IngestMetrics::kMaxReportedWorkers); ++k)
      AppendSample(&out,
                   absl::StrCat("vigil_frame_worker_queued_batches{worker=\"", k, "\"}"),
                   m.worker_queued[k].load());
    AppendFamily(&out, "vigil_series", "gauge", "Series in the store.");
    AppendSample(&out, "vigil_series", stats.series);
    AppendFamily(&out, "vigil_storage_bytes", "gauge",
                 "Bytes the store uses on disk, frame log included.");
    AppendSample(&out, "vigil_storage_bytes", stats.bytes_on_disk);
    AppendFamily(&out, "vigil_frame_log_bytes", "gauge",
                 "Bytes in the frame log not yet checkpointed.");
    AppendSample(&out, "vigil_frame_log_bytes", stats.frame_log_bytes);
    AppendFamily(&out, "vigil_storage_chunks_flushed_total", "counter",
                 "Compressed chunks the store has written.");
    AppendSample(&out, "vigil_storage_chunks_flushed_total",
                 stats.chunks_flushed);
    AppendFamily(&out, "vigil_storage_healthy", "gauge",
                 "1 while the store accepts writes, 0 while it refuses them "
                 "(see /readyz for why).");
    AppendSample(&out, "vigil_storage_healthy", o.store->Health().ok() ? 1 : 0);
    AppendFamily(&out, "vigil_storage_write_errors_total", "counter",
                 "Writes to the frame log or the database that failed.");
    AppendSample(&out, "vigil_storage_write_errors_total", stats.write_errors);
    AppendFamily(&out, "vigil_storage_recoveries_total", "counter",
                 "Returns to health after write errors, without a restart.");
    AppendSample(&out, "vigil_storage_recoveries_total", stats.recoveries);
    AppendFamily(&out, "vigil_storage_checkpoints_total", "counter",
                 "Checkpoints (open blocks saved, frame log cut).");
    AppendSample(&out, "vigil_storage_checkpoints_total", stats.checkpoints);
    AppendFamily(&out, "vigil_storage_open_blocks", "gauge",
                 "Series holding an open block in memory (counted about once "
                 "a minute).");
    AppendSample(&out, "vigil_storage_open_blocks", stats.open_blocks);
    AppendFamily(&out, "vigil_storage_open_block_bytes", "gauge",
                 "Memory the open blocks' compressed samples hold (counted "
                 "about once a minute).");
    AppendSample(&out, "vigil_storage_open_block_bytes", stats.open_block_bytes);
    AppendFamily(&out, "vigil_storage_idle_blocks_closed_total", "counter",
                 "Open blocks written out because their series had sent "
                 "nothing for storage.idle_block_seconds.");
    AppendSample(&out, "vigil_storage_idle_blocks_closed_total",
                 stats.idle_blocks_closed);
    AppendFamily(&out, "vigil_storage_corrupt_chunks_total", "counter",
                 "Chunks that failed to decode: quarantined by retention, "
                 "or skipped by a query.");
    AppendSample(&out, "vigil_storage_corrupt_chunks_total{what=\"quarantined\"}",
                 stats.chunks_quarantined);
    AppendSample(&out, "vigil_storage_corrupt_chunks_total{what=\"skipped_by_query\"}",
                 stats.corrupt_chunks_skipped);
    const DetectionCounters d = o.detection->counters();
    AppendFamily(&out, "vigil_detector_frames_total", "counter",
                 "Frames run through detection.");
    AppendSample(&out, "vigil_detector_frames_total", d.frames);
    AppendFamily(&out, "vigil_incidents_adopted_total", "counter",
                 "Incidents raised again after a restart and taken as the one "
                 "that was firing before it (no new page, no repeated action).");
    AppendSample(&out, "vigil_incidents_adopted_total", d.adopted);
    AppendFamily(&out, "vigil_detection_counters_primed_total", "counter",
                 "Counter series this process started from their last stored "
                 "sample, so a counter that moved across a restart is seen.");
    AppendSample(&out, "vigil_detection_counters_primed_total",
                 d.counters_primed);
    AppendFamily(&out, "vigil_incidents_restart_resolved_total", "counter",
                 "Incidents firing before a restart that were not raised again "
                 "while their nodes reported, resolved.");
    AppendSample(&out, "vigil_incidents_restart_resolved_total",
                 d.restart_resolved);
    AppendFamily(&out, "vigil_incidents_open", "gauge",
                 "Firing incidents by severity (stored ones included).");
    for (size_t i = 0; i < d.open.size(); ++i) {
      AppendSample(&out,
                   absl::StrCat("vigil_incidents_open{severity=\"",
                                std::string(SeverityName(
                                    static_cast<Severity>(i))),
                                "\"}"),
                   d.open[i]);
    }
    AppendFamily(&out, "vigil_incident_updates_total", "counter",
                 "Incident updates by type.");
    for (size_t i = 0; i < d.updates.size(); ++i) {
      AppendSample(&out,
                   absl::StrCat("vigil_incident_updates_total{type=\"",
                                std::string(UpdateTypeName(
                                    static_cast<UpdateType>(i))),
                                "\"}"),
                   d.updates[i]);
    }
    if (o.escalation != nullptr) {
      const Outbox::Counters c = o.escalation->outbox_counters();
      AppendFamily(&out, "vigil_outbox_items", "gauge",
                   "Notifications and action webhooks by delivery state.");
      AppendSample(&out, "vigil_outbox_items{state=\"pending\"}", c.pending);
      AppendSample(&out, "vigil_outbox_items{state=\"delivered\"}", c.delivered);
      AppendSample(&out, "vigil_outbox_items{state=\"failed\"}", c.failed);
      AppendFamily(&out, "vigil_outbox_attempts_total", "counter",
                   "Sends of notifications and action webhooks.");
      AppendSample(&out, "vigil_outbox_attempts_total", c.attempts);
      AppendFamily(&out, "vigil_outbox_store_errors_total", "counter",
                   "Outbox records the store refused (the sends go on; "
                   "enqueues are stored again later) and failed deletions "
                   "of records past the retention.");
      AppendSample(&out, "vigil_outbox_store_errors_total{op=\"attempt\"}",
                   c.persist_errors);
      AppendSample(&out, "vigil_outbox_store_errors_total{op=\"enqueue\"}",
                   c.unstored_enqueues);
      AppendSample(&out, "vigil_outbox_store_errors_total{op=\"delete\"}",
                   c.delete_errors);
      AppendFamily(&out, "vigil_outbox_unstored_items", "gauge",
                   "Items being sent that the store has not accepted yet.");
      AppendSample(&out, "vigil_outbox_unstored_items", c.unstored);
    }
    AppendFamily(&out, "vigil_incident_persist_errors_total", "counter",
                 "Incident events the store failed to write.");
    AppendSample(&out, "vigil_incident_persist_errors_total", d.persist_errors);
    AppendFamily(&out, "vigil_incidents_unreadable", "gauge",
                 "Stored incidents skipped at startup as unreadable.");
    AppendSample(&out, "vigil_incidents_unreadable", d.unreadable);
    AppendFamily(&out, "vigil_scheduler_queries_total", "counter",
                 "Job-state queries to the scheduler (through vigil-actuator).");
    AppendSample(&out, "vigil_scheduler_queries_total", d.scheduler_queries);
    AppendFamily(&out, "vigil_scheduler_query_errors_total", "counter",
                 "Job-state queries that failed.");
    AppendSample(&out, "vigil_scheduler_query_errors_total",
                 d.scheduler_errors);
    AppendFamily(&out, "vigil_detection_snapshots_total", "counter",
                 "Snapshots of learned baselines written to the store.");
    AppendSample(&out, "vigil_detection_snapshots_total", d.snapshots);
    AppendFamily(&out, "vigil_detection_snapshot_errors_total", "counter",
                 "Snapshots of learned baselines that failed.");
    AppendSample(&out, "vigil_detection_snapshot_errors_total",
                 d.snapshot_errors);
    AppendFamily(&out, "vigil_detection_snapshot_bytes", "gauge",
                 "Size of the last snapshot of learned baselines.");
    AppendSample(&out, "vigil_detection_snapshot_bytes", d.snapshot_bytes);
    AppendFamily(&out, "vigil_detection_snapshot_learning_series", "gauge",
                 "Series of running jobs still to learn their baseline (warm-up "
                 "or learning) at the last snapshot (0: snapshots every "
                 "detection.learned_snapshot_seconds).");
    AppendSample(&out, "vigil_detection_snapshot_learning_series",
                 d.snapshot_learning_series);
    AppendFamily(&out, "vigil_detection_restored", "gauge",
                 "1 when this process started from a snapshot of learned "
                 "baselines.");
    AppendSample(&out, "vigil_detection_restored", d.restored ? 1 : 0);
    AppendProcessMetrics(&out, req.has_param("heap"), o.clock->Now());
    if (o.more_metrics) out += o.more_metrics();
    res.set_content(out, "text/plain; version=0.0.4; charset=utf-8");
  });

  if (o.remote_write_receiver != nullptr) {
    server_->Post(kRemoteWritePath, [this, &o](const httplib::Request& req,
                                               httplib::Response& res) {
      if (o.auth != nullptr) {
        absl::StatusOr<RequestIdentity> who =
            authorizer_.Authorize(CredentialsOf(req), Role::kRemoteWrite);
        if (!who.ok()) return ReplyStatus(res, who.status());
      }
      const absl::Status s = o.remote_write_receiver->Write(
          req.get_header_value("Content-Encoding"), req.body);
      if (s.ok()) {
        res.status = 204;
        return;
      }
      // A body too large is refused for good (Prometheus retries a 429).
      ReplyError(res, absl::IsResourceExhausted(s) ? 413 : HttpStatusOf(s),
                 std::string(s.message()));
    });
  }

  if (o.alert_intake != nullptr) {
    for (const bool webhook : {true, false}) {
      server_->Post(webhook ? "/api/v1/alerts" : "/api/v2/alerts",
                    [this, &o, webhook](const httplib::Request& req, httplib::Response& res) {
        if (o.auth != nullptr &&
            !authorizer_.Authorize(CredentialsOf(req), Role::kRemoteWrite).ok()) {
          // An operator may send an alert by hand.
          absl::StatusOr<RequestIdentity> who =
              authorizer_.Authorize(CredentialsOf(req), Role::kOperator);
          if (!who.ok()) return ReplyStatus(res, who.status());
        }
        absl::StatusOr<AlertIntake::Counts> counts = o.alert_intake->Receive(req.body, webhook);
        if (!counts.ok()) return ReplyStatus(res, counts.status());
        Reply(res, 200, Json{{"opened", counts->opened}, {"updated", counts->updated},
                             {"resolved", counts->resolved}, {"looped", counts->looped}});
      });
    }
  }

  server_->Get("/api/v1/series", [&o](const httplib::Request& req,
                                      httplib::Response& res) {
    SeriesFilter filter;
    filter.job = req.get_param_value("job");
    filter.node = req.get_param_value("node");
    filter.metric = req.get_param_value("metric");
    size_t limit = kDefaultSeriesPage;
    if (req.has_param("limit")) {
      const std::string text = req.get_param_value("limit");
      if (!absl::SimpleAtoi(text, &limit) || limit < 1 || limit > kMaxSeriesPage)
        return ReplyError(res, 400, absl::StrCat("parameter 'limit': '", text,
                                                 "' is not an integer in [1, ",
                                                 kMaxSeriesPage, "]"));
    }
    if (req.has_param("start")) {
      const std::string text = req.get_param_value("start");
      if (!absl::SimpleAtoi(text, &filter.start))
        return ReplyError(res, 400, absl::StrCat("parameter 'start': '", text,
                                                 "' is not a series id"));
    }
    filter.limit = limit + 1;  // one more says whether a next page exists
    std::vector<SeriesInfo> page = o.store->ListSeries(filter);
    Json next = nullptr;
    if (page.size() > limit) {
      next = page[limit].id;
      page.resize(limit);
    }
    Json list = Json::array();
    for (const SeriesInfo& info : page) list.push_back(SeriesJson(info.id, info.key));
    Reply(res, 200, Json{{"series", std::move(list)}, {"next_start", std::move(next)}});
  });

  server_->Get("/api/v1/incidents", [this, &o](const httplib::Request& req,
                                         httplib::Response& res) {
    IncidentFilter filter;
    if (std::string error = ParseIncidentFilter(req, &filter); !error.empty())
      return ReplyError(res, 400, error);
    Json list = Json::array();
    for (Json& incident : o.detection->ListIncidents(filter)) {
      if (o.escalation != nullptr) o.escalation->Decorate(&incident);
      Json& evidence = incident["evidence"];
      incident["evidence_total"] = evidence.size();
      if (evidence.size() > kListEvidence)
        evidence.erase(evidence.begin() + kListEvidence, evidence.end());
      list.push_back(std::move(incident));
    }
    ReplyFleetWide(req, res, Json{{"incidents", std::move(list)}}, "incidents",
                   /*newest_first=*/true);
  });

  server_->Get(R"(/api/v1/incidents/([A-Za-z0-9_.-]+))",
               [this, &o](const httplib::Request& req, httplib::Response& res) {
    if (ForwardToShardOf(req.matches[1].str(), req, res)) return;
    absl::StatusOr<Json> incident =
        o.detection->GetIncident(req.matches[1].str());
    if (!incident.ok())
      return ReplyError(res, 404, std::string(incident.status().message()));
    FillEvidenceSeries(*o.store, &*incident);
    if (o.escalation != nullptr) {
      o.escalation->Decorate(&*incident);
      Json& timeline = (*incident)["timeline"];
      for (Json& event : o.escalation->Timeline(req.matches[1].str()))
        timeline.push_back(std::move(event));
      std::stable_sort(timeline.begin(), timeline.end(),
                       [](const Json& a, const Json& b) {
                         return a.value("ts", 0.0) < b.value("ts", 0.0);
                       });
    }
    Reply(res, 200, *incident);
  });

  server_->Get("/api/v1/query", [&o](const httplib::Request& req,
                                     httplib::Response& res) {
    if (!req.has_param("series"))
      return ReplyError(res, 400, "parameter 'series': required");
    std::string id_text = req.get_param_value("series");
    SeriesId id;
    if (!absl::SimpleAtoi(id_text, &id))
      return ReplyError(res, 400,
                        absl::StrCat("parameter 'series': '", id_text,
                                     "' is not a series id"));
    double to = o.clock->Now();
    double from = NAN;
    double step = 0;
    for (std::string error :
         {ParseNumber(req, "to", 0, kLatestTime, &to),
          ParseNumber(req, "from", 0, kLatestTime, &from),
          ParseNumber(req, "step", 0, kLatestTime, &step)}) {
      if (!error.empty()) return ReplyError(res, 400, error);
    }
    if (std::isnan(from)) from = to - kDefaultRangeSeconds;
    if (from >= to)
      return ReplyError(res, 400, "parameter 'from': must be before 'to'");
    if (req.has_param("step") && step <= 0)
      return ReplyError(res, 400, "parameter 'step': must be > 0");
    if (step > 0 && (to - from) / step > static_cast<double>(o.max_points))
      return ReplyError(
          res, 400,
          absl::StrCat("parameter 'step': ", step, " gives more than ",
                       o.max_points, " buckets; use a larger step"));
    absl::StatusOr<SeriesKey> key = o.store->Key(id);
    if (!key.ok())
      return ReplyError(res, 404, absl::StrCat("series ", id, " not found"));

    // Points are written by hand: a DOM for a million points is slow.
    std::string out = absl::StrCat("{\"series\":", SeriesJson(id, *key).dump());
    if (step > 0) {
      absl::StatusOr<std::vector<Aggregate>> buckets =
          o.store->QueryAggregate(id, from, to, step);
      if (!buckets.ok())
        return ReplyError(res, 500, std::string(buckets.status().message()));
      out.append(",\"step\":");
      AppendNumber(&out, step);
      out.append(",\"points\":[");
      for (size_t i = 0; i < buckets->size(); ++i) {
        const Aggregate& a = (*buckets)[i];
        const uint64_t numbers = a.count - a.nan_count;
        out.append(i ? ",[" : "[");
        AppendNumber(&out, a.start);
        out.push_back(',');
        AppendNumber(&out, numbers ? a.min : NAN);
        out.push_back(',');
        AppendNumber(&out, numbers ? a.max : NAN);
        out.push_back(',');
        AppendNumber(&out, numbers ? a.sum / numbers : NAN);
        absl::StrAppend(&out, ",", a.count, "]");
      }
    } else {
      absl::StatusOr<std::vector<Sample>> samples = o.store->Query(id, from, to);
      if (!samples.ok())
        return ReplyError(res, 500, std::string(samples.status().message()));
      if (samples->size() > o.max_points)
        return ReplyError(
            res, 400,
            absl::StrCat(samples->size(), " points exceed the limit of ",
                         o.max_points, "; narrow 'from'/'to' or set 'step'"));
      out.append(",\"points\":[");
      for (size_t i = 0; i < samples->size(); ++i) {
        out.append(i ? ",[" : "[");
        AppendNumber(&out, (*samples)[i].ts);
        out.push_back(',');
        AppendNumber(&out, (*samples)[i].value);
        out.push_back(']');
      }
    }
    out.append("]}");
    res.set_content(out, kJson);
  });
}

}  // namespace vigil
