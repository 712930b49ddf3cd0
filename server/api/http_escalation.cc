// The operator API of vigil-server (see http_api.h):
//   POST /api/v1/incidents/ID/ack|unack|resolve   {"comment"}      operator
//   GET  /api/v1/silences                                          viewer
//   POST /api/v1/silences      (escalation.h ParseSilence body)    operator
//   DELETE /api/v1/silences/ID                                     operator
//   GET  /api/v1/deliveries?incident=&limit=                       viewer
//   GET  /api/v1/actions?incident=                                 viewer
//   POST /api/v1/actions       {"action","job","node","incident_id","reason"}
//   POST /api/v1/actions/ID/approve                                operator
//   GET  /api/v1/remediation, POST /api/v1/remediation/reset       admin
//   GET  /api/v1/audit?limit=                                      viewer
//   GET  /api/v1/oncall, GET /api/v1/whoami                        viewer
// In cluster mode a request about another shard's incident or action goes
// on to that shard (HttpApi::ForwardToShardOf, http_cluster.cc).
//   POST /api/v1/callbacks/twilio/voice   Twilio <Gather> keypresses,
//        authenticated by X-Twilio-Signature instead of a token.
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "notify/signing.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/escalation/escalation_service.h"
#include "server/api/http_api.h"
#include "server/api/http_reply.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr char kId[] = "([A-Za-z0-9_.-]+)";

// The body as a JSON object; an empty body is {}. nullopt (and a 400 sent)
// when it is not a JSON object.
std::optional<Json> BodyObject(const httplib::Request& req,
                               httplib::Response& res) {
  if (req.body.empty()) return Json::object();
  Json body = ParseBody(req.body);
  if (body.is_discarded() || !body.is_object()) {
    ReplyError(res, 400, absl::StrCat("body must be a JSON object nested at most ", kMaxBodyDepth, " deep"));
    return std::nullopt;
  }
  return body;
}

size_t LimitParam(const httplib::Request& req, size_t fallback) {
  size_t limit;
  const std::string text = req.get_param_value("limit");
  if (!text.empty() && absl::SimpleAtoi(text, &limit) && limit > 0)
    return std::min<size_t>(limit, 100'000);
  return fallback;
}

}  // namespace

void HttpApi::InstallEscalationHandlers() {
  EscalationService& esc = *options_.escalation;
  RequestAuthorizer* authorizer = &authorizer_;
  // The identity of `req` with at least `role`; replies 401/403 otherwise.
  auto authorize = [authorizer](const httplib::Request& req, httplib::Response& res,
                                Role role) -> std::optional<Identity> {
    absl::StatusOr<RequestIdentity> who = authorizer->Authorize(CredentialsOf(req), role);
    if (!who.ok()) {
      ReplyStatus(res, who.status());
      return std::nullopt;
    }
    return who->who;
  };
  auto reply = [](httplib::Response& res, const absl::StatusOr<Json>& result,
                  int ok_status = 200) {
    if (!result.ok()) return ReplyStatus(res, result.status());
    Reply(res, ok_status, *result);
  };

  for (const char* verb : {"ack", "unack", "resolve"}) {
    server_->Post(absl::StrCat("/api/v1/incidents/", kId, "/", verb),
                  [this, &esc, authorize, reply, verb = std::string(verb)](
                      const httplib::Request& req, httplib::Response& res) {
      if (ForwardToShardOf(req.matches[1].str(), req, res)) return;
      std::optional<Identity> who = authorize(req, res, Role::kOperator);
      if (!who) return;
      std::optional<Json> body = BodyObject(req, res);
      if (!body) return;
      const std::string id = req.matches[1].str();
      const std::string comment = body->value("comment", "");
      if (verb == "ack") return reply(res, esc.Acknowledge(id, *who, comment));
      if (verb == "unack") return reply(res, esc.Unacknowledge(id, *who));
      reply(res, esc.Resolve(id, *who, comment));
    });
  }

  server_->Get("/api/v1/silences", [&esc](const httplib::Request&,
                                          httplib::Response& res) {
    Reply(res, 200, esc.ListSilences());
  });
  server_->Post("/api/v1/silences", [&esc, authorize, reply](
                                        const httplib::Request& req,
                                        httplib::Response& res) {
    std::optional<Identity> who = authorize(req, res, Role::kOperator);
    if (!who) return;
    std::optional<Json> body = BodyObject(req, res);
    if (!body) return;
    reply(res, esc.AddSilence(*body, *who), 201);
  });
  server_->Delete(absl::StrCat("/api/v1/silences/", kId),
                  [&esc, authorize, reply](const httplib::Request& req,
                                           httplib::Response& res) {
    std::optional<Identity> who = authorize(req, res, Role::kOperator);
    if (!who) return;
    reply(res, esc.ExpireSilence(req.matches[1].str(), *who));
  });

  // Receivers' and the actuator's raw answers are for operators only.
  auto for_caller = [authorizer](const httplib::Request& req, Json listing) {
    if (authorizer->Authorize(CredentialsOf(req), Role::kOperator).ok())
      return listing;
    return EscalationService::WithoutRawAnswers(std::move(listing));
  };
  server_->Get("/api/v1/deliveries", [this, &esc, for_caller](
                                         const httplib::Request& req,
                                         httplib::Response& res) {
    if (ForwardToShardOf(req.get_param_value("incident"), req, res)) return;
    Reply(res, 200,
          for_caller(req, esc.ListDeliveries(req.get_param_value("incident"),
                                             LimitParam(req, 1000))));
  });

  server_->Get("/api/v1/actions", [this, &esc, for_caller](const httplib::Request& req,
                                                           httplib::Response& res) {
    if (ForwardToShardOf(req.get_param_value("incident"), req, res)) return;
    Reply(res, 200, for_caller(req, esc.ListActions(req.get_param_value("incident"))));
  });
  server_->Post("/api/v1/actions", [&esc, authorize, reply](
                                       const httplib::Request& req,
                                       httplib::Response& res) {
    std::optional<Identity> who = authorize(req, res, Role::kOperator);
    if (!who) return;
    std::optional<Json> body = BodyObject(req, res);
    if (!body) return;
    reply(res, esc.RequestAction(*body, *who), 201);
  });
  server_->Post(absl::StrCat("/api/v1/actions/", kId, "/approve"),
                [this, &esc, authorize, reply](const httplib::Request& req,
                                               httplib::Response& res) {
    if (ForwardToShardOf(req.matches[1].str(), req, res)) return;
    std::optional<Identity> who = authorize(req, res, Role::kOperator);
    if (!who) return;
    reply(res, esc.ApproveAction(req.matches[1].str(), *who));
  });

  server_->Get("/api/v1/remediation", [&esc](const httplib::Request&,
                                             httplib::Response& res) {
    Reply(res, 200, esc.Remediation());
  });
  server_->Post("/api/v1/remediation/reset", [&esc, authorize](
                                                 const httplib::Request& req,
                                                 httplib::Response& res) {
    std::optional<Identity> who = authorize(req, res, Role::kAdmin);
    if (!who) return;
    Reply(res, 200, esc.ResetRemediation(*who));
  });

  // Reads the config file again (as SIGHUP does); admins only.
  if (options_.reload) {
    server_->Post("/-/reload", [this, authorize, reply](const httplib::Request& req,
                                                        httplib::Response& res) {
      std::optional<Identity> who = authorize(req, res, Role::kAdmin);
      if (!who) return;
      reply(res, options_.reload(*who));
    });
  }

  server_->Get("/api/v1/audit", [&esc](const httplib::Request& req,
                                       httplib::Response& res) {
    Reply(res, 200, esc.Audit(LimitParam(req, 200)));
  });
  server_->Get("/api/v1/oncall", [&esc](const httplib::Request&,
                                        httplib::Response& res) {
    Reply(res, 200, esc.OnCall());
  });
  server_->Get("/api/v1/whoami", [authorize](const httplib::Request& req,
                                             httplib::Response& res) {
    std::optional<Identity> who = authorize(req, res, Role::kViewer);
    if (!who) return;
    Reply(res, 200, Json{{"name", who->name},
                         {"role", std::string(RoleName(who->role))}});
  });

  server_->Post("/api/v1/callbacks/twilio/voice", [&esc](
                                                      const httplib::Request& req,
                                                      httplib::Response& res) {
    // Twilio signs the URL it called (query included) and the form fields
    // of the body, so both are passed on raw.
    const size_t q = req.target.find('?');
    const std::string query =
        q == std::string::npos ? std::string() : req.target.substr(q + 1);
    std::multimap<std::string, std::string> form;
    for (absl::string_view pair : absl::StrSplit(req.body, '&', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      form.emplace(UrlDecode(kv.first), UrlDecode(kv.second));
    }
    absl::StatusOr<std::string> twiml = esc.TwilioCallback(
        query, form, req.get_header_value("X-Twilio-Signature"));
    if (!twiml.ok()) return ReplyStatus(res, twiml.status());
    res.status = 200;
    res.set_content(*twiml, "application/xml");
  });
}

}  // namespace vigil
