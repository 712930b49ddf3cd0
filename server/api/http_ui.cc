// The web UI's API of vigil-server (see http_api.h):
//   POST   /api/v1/session  {"token"}  sign in: session cookie + CSRF token
//   GET    /api/v1/session             who is signed in, and the CSRF token
//   DELETE /api/v1/session             sign out
//   GET    /api/v1/events              server-sent events: incident changes
//   GET    /api/v1/baseline?series=ID  the detector's current baseline
//   GET    /api/v1/jobs, /api/v1/jobs/NAME   jobs with throughput and GPUs
//   GET    /api/v1/nodes               nodes with GPU state and frame age
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/escalation/escalation_service.h"
#include "server/api/http_api.h"
#include "server/api/http_reply.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

// Seconds a session cookie lives in the browser (the server may end the
// session earlier: WebSessionOptions).
constexpr int kCookieMaxAge = 7 * 86400;
// How long an event stream waits for a notice before it writes an empty
// comment (keep-alive, and the write that finds a closed page).
constexpr double kStreamWaitSeconds = 1;
// How a new event stream waits for a free slot: kSlotWaits times kSlotWait.
constexpr std::chrono::milliseconds kSlotWait{100};
constexpr int kSlotWaits = 30;
// A node whose newest frame is older than this is "silent".
constexpr double kSilentSeconds = 60;
// A GPU reading older than its node's newest frame by this is "missing".
constexpr double kMissingSeconds = 30;
// Temperature from which a GPU counts as hot.
constexpr double kHotCelsius = 85;
// Throttle reasons that cost speed: HW slowdown, SW thermal, HW thermal,
// HW power brake (NVML clocks-event bits 0x8, 0x20, 0x40, 0x80).
constexpr uint64_t kCostlyThrottle = 0x8 | 0x20 | 0x40 | 0x80;

// A finite number as JSON, else null.
Json NumberOrNull(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

// The session cookie; Secure when the page is served over TLS (by
// configuration, or a TLS-terminating proxy's X-Forwarded-Proto: a client
// that lies about it only makes its own cookie stricter).
std::string SessionCookie(const std::string& value, int max_age, bool secure_config,
                          const httplib::Request& req) {
  const bool secure =
      secure_config || absl::EqualsIgnoreCase(req.get_header_value("X-Forwarded-Proto"), "https");
  return absl::StrCat(kSessionCookie, "=", value, "; Path=/; HttpOnly; SameSite=Strict",
                      secure ? "; Secure" : "", "; Max-Age=", max_age);
}

Json CountsJson(const std::array<int, 4>& counts) {
  Json out = Json::object();
  for (int s = 0; s < 4; ++s)
    out[std::string(SeverityName(static_cast<Severity>(s)))] = counts[s];
  return out;
}

// One job figure: last value, baseline and sparkline. The baseline comes
// from the detector's baselines of the job's per-node series.
Json FigureJson(const JobSnapshot& job, JobFigure figure,
                const DetectionService& detection) {
  const int f = static_cast<int>(figure);
  Json spark = Json::array();
  double last = NAN;
  for (const FigurePoint& p : job.spark[f]) {
    if (!std::isfinite(p.value)) continue;
    spark.push_back({p.ts, p.value});
    last = p.value;
  }
  double mean_sum = 0, var_sum = 0;
  int learned = 0, learning = 0;
  int64_t progress_steps = 0, target_steps = 0;
  double progress_s = 0, target_s = 0;
  std::string band;  // the least settled band in use
  for (SeriesId id : job.series[f]) {
    absl::StatusOr<SeriesBaseline> b = detection.Baseline(id);
    if (!b.ok() || !b->learns) continue;
    if (!b->learned) {
      ++learning;
      progress_steps = std::max(progress_steps, b->learn_progress_steps);
      target_steps = b->learn_target_steps;
      progress_s = std::max(progress_s, b->learn_progress_seconds);
      target_s = b->learn_max_seconds;
      if (b->usable && band != "early") band = b->source;
    }
    if (!b->usable) continue;
    mean_sum += b->mean;
    var_sum += b->sigma * b->sigma;
    ++learned;
  }
  double baseline = NAN, sigma = NAN;
  if (learned > 0) {
    switch (figure) {
      case JobFigure::kTokensPerSecond:  // summed over nodes
        baseline = mean_sum;
        sigma = std::sqrt(var_sum);
        break;
      case JobFigure::kMfu:  // averaged over nodes
        baseline = mean_sum / learned;
        sigma = std::sqrt(var_sum) / learned;
        break;
      case JobFigure::kStepRate: {  // from the mean step time
        const double t = mean_sum / learned;
        if (t > 0) {
          baseline = 1 / t;
          sigma = std::sqrt(var_sum) / learned / (t * t);
        }
        break;
      }
    }
  }
  // "learning": the detector is still learning these series (a young or
  // resumed job); "learning_progress" says how far ("step n of 1000", or
  // seconds of the time bound, whichever ends it first) and which band is
  // in use meanwhile ("early": widened, from a short sample; "inherited":
  // the job's or its family's previous run; null: none yet). False and
  // null for figures no detector learns (MFU has a fixed threshold).
  Json progress = nullptr;
  if (learning > 0) {
    progress = {{"step", std::min(progress_steps, target_steps)},
                {"of_steps", target_steps},
                {"seconds", std::min(progress_s, target_s)},
                {"of_seconds", target_s},
                {"band", band.empty() ? Json(nullptr) : Json(band)}};
  }
  return {{"last", NumberOrNull(last)},
          {"baseline", NumberOrNull(baseline)},
          {"sigma", NumberOrNull(sigma)},
          {"learning", learning > 0},
          {"learning_progress", std::move(progress)},
          {"spark", std::move(spark)}};
}

Json JobJson(const JobSnapshot& job, int gpus, const FiringCounts& open,
             double now, const DetectionService& detection) {
  auto it = open.by_job.find(job.job);
  const std::array<int, 4> counts =
      it == open.by_job.end() ? std::array<int, 4>{} : it->second;
  std::string health = "ok";
  if (counts[0] + counts[1] > 0) {
    health = "critical";
  } else if (counts[2] + counts[3] > 0) {
    health = "warning";
  } else if (now - job.last_frame_ts > kSilentSeconds) {
    health = "silent";
  }
  return {{"job", job.job},
          {"nodes", job.nodes},
          {"gpus", gpus},
          {"last_frame_ts", job.last_frame_ts},
          {"step", job.step ? Json(*job.step) : Json(nullptr)},
          {"health", health},
          {"incidents", CountsJson(counts)},
          {"metrics",
           {{"step_rate", FigureJson(job, JobFigure::kStepRate, detection)},
            {"tokens_per_second",
             FigureJson(job, JobFigure::kTokensPerSecond, detection)},
            {"mfu", FigureJson(job, JobFigure::kMfu, detection)}}}};
}

Json GpuJson(const std::string& node, const GpuReading& g) {
  return {{"node", node},
          {"gpu", g.gpu},
          {"ts", g.ts},
          {"power_watts", NumberOrNull(g.power_watts)},
          {"temperature_celsius", NumberOrNull(g.temperature_celsius)},
          {"sm_clock_mhz", NumberOrNull(g.sm_clock_mhz)},
          {"throttle_reasons", NumberOrNull(g.throttle_reasons)},
          {"utilization", NumberOrNull(g.utilization)}};
}

// Nodes whose newest finished cordon/uncordon action is a cordon.
std::map<std::string, bool> CordonState(const EscalationService* escalation) {
  std::map<std::string, bool> cordoned;
  if (escalation == nullptr) return cordoned;
  const Json actions = escalation->ListActions("")["actions"];  // newest first
  for (const Json& a : actions) {
    const std::string action = a.value("action", "");
    if ((action != "cordon_node" && action != "uncordon_node") ||
        a.value("state", "") != "done")
      continue;
    cordoned.emplace(a.value("node", ""), action == "cordon_node");
  }
  return cordoned;
}

}  // namespace

void HttpApi::InstallUiHandlers() {
  const HttpApiOptions& o = options_;
  RequestAuthorizer* authorizer = &authorizer_;

  const bool secure = o.secure_cookies;
  server_->Post("/api/v1/session", [this, authorizer, secure](const httplib::Request& req,
                                                              httplib::Response& res) {
    Json body = ParseBody(req.body);
    if (body.is_discarded() || !body.is_object() || !body.contains("token") ||
        !body["token"].is_string())
      return ReplyError(res, 400, "body must be {\"token\": \"<API token>\"}");
    absl::StatusOr<NewSession> session =
        authorizer->SignIn(body["token"].get<std::string>(), ClientAddress(req));
    if (!session.ok()) return ReplyStatus(res, session.status());
    res.set_header("Set-Cookie", SessionCookie(session->id, kCookieMaxAge, secure, req));
    res.set_header("Cache-Control", "no-store");
    Reply(res, 200, Json{{"name", session->who.name},
                         {"role", std::string(RoleName(session->who.role))},
                         {"csrf", session->csrf}});
  });
  server_->Get("/api/v1/session", [authorizer](const httplib::Request& req,
                                               httplib::Response& res) {
    absl::StatusOr<RequestIdentity> who =
        authorizer->Authorize(CredentialsOf(req), Role::kViewer);
    if (!who.ok()) return ReplyStatus(res, who.status());
    res.set_header("Cache-Control", "no-store");
    Reply(res, 200, Json{{"name", who->who.name},
                         {"role", std::string(RoleName(who->who.role))},
                         {"via", who->via},
                         {"csrf", who->csrf.empty() ? Json(nullptr) : Json(who->csrf)}});
  });
  server_->Delete("/api/v1/session", [authorizer, secure](const httplib::Request& req,
                                                          httplib::Response& res) {
    // Signing out needs the CSRF token too, so no other site can do it.
    absl::StatusOr<RequestIdentity> who =
        authorizer->Authorize(CredentialsOf(req), Role::kViewer);
    if (!who.ok()) return ReplyStatus(res, who.status());
    authorizer->SignOut(req.get_header_value("Cookie"));
    res.set_header("Set-Cookie", SessionCookie("", 0, secure, req));
    Reply(res, 200, Json::object());
  });

  server_->Get("/api/v1/baseline", [&o](const httplib::Request& req,
                                        httplib::Response& res) {
    const std::string text = req.get_param_value("series");
    SeriesId id;
    if (!absl::SimpleAtoi(text, &id))
      return ReplyError(res, 400, absl::StrCat("parameter 'series': '", text,
                                               "' is not a series id"));
    absl::StatusOr<SeriesBaseline> b = o.detection->Baseline(id);
    if (!b.ok()) return ReplyStatus(res, b.status());
    // mean/sigma whenever a band is in use (learned, or early/inherited
    // while learning: "source" says which, k_sigma is then widened).
    Json progress = nullptr;
    if (b->learns && !b->learned) {
      progress = {{"step", std::min(b->learn_progress_steps,
                                    b->learn_target_steps)},
                  {"of_steps", b->learn_target_steps},
                  {"seconds",
                   std::min(b->learn_progress_seconds, b->learn_max_seconds)},
                  {"of_seconds", b->learn_max_seconds}};
    }
    Reply(res, 200, Json{{"series", id},
                         {"learned", b->learned},
                         {"usable", b->usable},
                         {"source", b->learns ? Json(b->source) : Json(nullptr)},
                         {"mean", b->usable ? Json(b->mean) : Json(nullptr)},
                         {"sigma", b->usable ? Json(b->sigma) : Json(nullptr)},
                         {"k_sigma", b->k_sigma},
                         {"rate", b->rate},
                         {"evaluated", b->evaluated},
                         {"learning", std::move(progress)}});
  });

  if (o.changes != nullptr) {
    const int max_streams = std::max(1, o.threads / 2);
    server_->Get("/api/v1/events", [this, max_streams](const httplib::Request& req,
                                                       httplib::Response& res) {
      // A reloading page opens its new stream before the server has noticed
      // that the old one is gone (at its next write), so wait a little for
      // a slot before turning it away.
      int waited = 0;
      while (event_streams_.fetch_add(1) >= max_streams) {
        --event_streams_;
        if (++waited > kSlotWaits)
          return ReplyError(res, 503, absl::StrCat(
              "all ", max_streams, " live-event streams are taken; poll instead"));
        std::this_thread::sleep_for(kSlotWait);
      }
      EventHub* hub = options_.changes;
      uint64_t position = hub->last_seq();
      // A reconnecting EventSource says where it stopped.
      uint64_t resume;
      if (absl::SimpleAtoi(req.get_header_value("Last-Event-ID"), &resume) &&
          resume <= position)
        position = resume;
      res.set_header("Cache-Control", "no-store");
      res.set_header("X-Accel-Buffering", "no");
      auto sent_hello = std::make_shared<bool>(false);
      const double now = options_.clock->Now();
      // Who opened the stream, re-checked before every write: signing out
      // (or the session's expiry, or a revoked token) ends it.
      auto authorization = std::make_shared<std::string>(req.get_header_value("Authorization"));
      auto cookie = std::make_shared<std::string>(req.get_header_value("Cookie"));
      RequestAuthorizer* authorizer = &authorizer_;
      res.set_chunked_content_provider(
          "text/event-stream",
          [hub, position, sent_hello, now, authorization, cookie, authorizer](
              size_t, httplib::DataSink& sink) mutable {
            if (!authorizer->Authorize(RequestCredentials{"GET", *authorization, *cookie, ""},
                                       Role::kViewer).ok())
              return false;
            std::string out;
            if (!*sent_hello) {
              *sent_hello = true;
              out = absl::StrCat("retry: 3000\nevent: hello\ndata: ",
                                 Json{{"ts", now}, {"seq", position}}.dump(), "\n\n");
              return sink.write(out.data(), out.size());
            }
            ChangeBatch batch = hub->WaitAfter(position, kStreamWaitSeconds);
            if (batch.gap) out = "event: reload\ndata: {}\n\n";
            for (const ChangeNotice& notice : batch.notices) {
              absl::StrAppend(&out, "id: ", notice.seq, "\nevent: ", notice.topic,
                              "\ndata: ", notice.json, "\n\n");
              position = notice.seq;
            }
            // An empty comment after a quiet wait: keeps proxies from timing
            // the stream out and finds a closed page within seconds.
            if (out.empty()) out = ":\n\n";
            return sink.write(out.data(), out.size());
          },
          [this](bool) { --event_streams_; });
    });
  }

  if (o.fleet == nullptr) return;
  server_->Get("/api/v1/jobs", [this, &o](const httplib::Request& req,
                                          httplib::Response& res) {
    const double now = o.clock->Now();
    const FiringCounts open = o.detection->CountFiring();
    std::map<std::string, int> gpus;
    for (const NodeSnapshot& node : o.fleet->Nodes())
      gpus[node.job] += static_cast<int>(node.gpus.size());
    Json jobs = Json::array();
    for (const JobSnapshot& job : o.fleet->Jobs())
      jobs.push_back(JobJson(job, gpus[job.job], open, now, *o.detection));
    ReplyFleetWide(req, res, Json{{"now", now}, {"jobs", std::move(jobs)}}, "jobs",
                   /*newest_first=*/false);
  });
  server_->Get(R"(/api/v1/jobs/([^/]+))", [&o](const httplib::Request& req,
                                                httplib::Response& res) {
    const std::string name = req.matches[1].str();
    std::optional<JobSnapshot> job = o.fleet->Job(name);
    if (!job) return ReplyError(res, 404, absl::StrCat("job '", name, "' not seen"));
    const double now = o.clock->Now();
    Json gpus = Json::array();
    for (const NodeSnapshot& node : o.fleet->Nodes()) {
      if (node.job != name) continue;
      for (const GpuReading& g : node.gpus) gpus.push_back(GpuJson(node.node, g));
    }
    Json out = JobJson(*job, static_cast<int>(gpus.size()), o.detection->CountFiring(),
                       now, *o.detection);
    // The detail lists the GPUs' readings where the list has their count.
    out["gpus"] = std::move(gpus);
    out["now"] = now;
    Reply(res, 200, out);
  });
  server_->Get("/api/v1/nodes", [this, &o](const httplib::Request& req,
                                           httplib::Response& res) {
    const double now = o.clock->Now();
    const FiringCounts open = o.detection->CountFiring();
    const std::map<std::string, bool> cordoned = CordonState(o.escalation);
    // Repeat offenders ("lemons"): the firing lemon_node incident of a node.
    // In cluster mode the fleet leader's shard raises them, whichever shard
    // the node streams to: every shard's lemons are merged below.
    Json lemons = Json::object();
    IncidentFilter lemon_filter;
    lemon_filter.state = IncidentState::kFiring;
    lemon_filter.text = "lemon_node";
    lemon_filter.limit = 100000;
    for (const Json& inc : o.detection->ListIncidents(lemon_filter)) {
      if (inc.value("kind", "") != "lemon_node" || !inc["node"].is_string()) {
        continue;
      }
      std::string history;
      if (inc.contains("evidence") && inc["evidence"].is_array() &&
          !inc["evidence"].empty()) {
        history = inc["evidence"][0].value("detail", "");
      }
      lemons[inc["node"].get<std::string>()] = {
          {"incident", inc["id"]},
          {"summary", inc.value("summary", "")},
          {"history", history},
          {"suggested", "drain"}};
    }
    Json nodes = Json::array();
    for (const NodeSnapshot& node : o.fleet->Nodes()) {
      int ok = 0, throttled = 0, hot = 0, missing = 0;
      for (const GpuReading& g : node.gpus) {
        if (node.last_frame_ts - g.ts > kMissingSeconds) {
          ++missing;
        } else if (std::isfinite(g.temperature_celsius) &&
                   g.temperature_celsius >= kHotCelsius) {
          ++hot;
        } else if (std::isfinite(g.throttle_reasons) &&
                   (static_cast<uint64_t>(g.throttle_reasons) & kCostlyThrottle)) {
          ++throttled;
        } else {
          ++ok;
        }
      }
      auto counts = open.by_node.find(node.node);
      auto cordon = cordoned.find(node.node);
      nodes.push_back(
          {{"node", node.node},
           {"job", node.job},
           {"source", node.claimed ? "remote_write" : "agent"},
           {"gpus", node.gpus.size()},
           {"gpu_state", {{"ok", ok}, {"throttled", throttled}, {"hot", hot},
                          {"missing", missing}}},
           {"last_frame_ts", node.last_frame_ts},
           {"age_seconds", std::max(0.0, now - node.last_frame_ts)},
           {"cordoned", cordon != cordoned.end() && cordon->second},
           {"lemon", lemons.contains(node.node) ? lemons[node.node] : Json(nullptr)},
           {"incidents", CountsJson(counts == open.by_node.end()
                                        ? std::array<int, 4>{}
                                        : counts->second)}});
    }
    Json merged = MergeFleetWide(
        req, Json{{"now", now}, {"nodes", std::move(nodes)}, {"lemons", std::move(lemons)}},
        "nodes", /*newest_first=*/false, /*map_key=*/"lemons");
    const Json& all_lemons = merged["lemons"];
    for (Json& node : merged["nodes"]) {
      const std::string name = node.value("node", "");
      if (node["lemon"].is_null() && all_lemons.contains(name)) node["lemon"] = all_lemons[name];
    }
    Reply(res, 200, merged);
  });
}

}  // namespace vigil
