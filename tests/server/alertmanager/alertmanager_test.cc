#include "server/alertmanager/alertmanager.h"

#include <atomic>
#include <mutex>

#include "gtest/gtest.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

class RecordingTransport : public Transport {
 public:
  TransportResult Send(const OutboundRequest& request, double) override {
    std::lock_guard<std::mutex> l(mu);
    requests.push_back(request);
    TransportResult r;
    r.http_status = status;
    return r;
  }
  std::vector<Json> Bodies() {
    std::lock_guard<std::mutex> l(mu);
    std::vector<Json> out;
    for (const OutboundRequest& r : requests) out.push_back(Json::parse(r.body));
    requests.clear();
    return out;
  }
  std::mutex mu;
  std::vector<OutboundRequest> requests;
  int status = 200;
};

Json IncidentJson(const std::string& id, const std::string& severity, const std::string& kind,
              double ts) {
  return {{"id", id},        {"severity", severity}, {"kind", kind},
          {"job", "llama"},  {"node", "n7"},         {"gpu", 3},
          {"ts", ts},        {"summary", "GPU power below its peers"},
          {"hint", "check the power cable"}};
}

TEST(AlertmanagerTest, AnIncidentIsAnAlertWithItsIdAsALabel) {
  const Json alert = IncidentAlert(IncidentJson("inc-000004", "P2", "gpu_power_low", 1800000000),
                                   1800000300, "http://vigil:8080/");
  EXPECT_EQ(alert["labels"],
            (Json{{"alertname", "gpu_power_low"}, {"severity", "P2"}, {"job", "llama"},
                  {"node", "n7"}, {"gpu", "3"}, {"vigil_incident", "inc-000004"}}));
  EXPECT_EQ(alert["startsAt"], "2027-01-15T08:00:00.000Z");
  EXPECT_EQ(alert["endsAt"], "2027-01-15T08:05:00.000Z");
  EXPECT_EQ(alert["generatorURL"], "http://vigil:8080/#/incidents/inc-000004");
  EXPECT_EQ(alert["annotations"]["summary"], "GPU power below its peers");
}

class ForwarderTest : public ::testing::Test {
 protected:
  ForwarderTest() {
    options_.forward_urls = {"http://am-1:9093", "http://am-2:9093/api/v2/alerts"};
    options_.resolve_timeout_seconds = 300;
    options_.min_severity = Severity::kP2;
  }
  std::unique_ptr<AlertForwarder> Make() {
    return std::make_unique<AlertForwarder>(options_, &transport_, &clock_, [this] {
      std::lock_guard<std::mutex> l(mu_);
      return firing_;
    });
  }
  void Fire(std::vector<Json> incidents) {
    std::lock_guard<std::mutex> l(mu_);
    firing_ = std::move(incidents);
  }

  AlertmanagerOptions options_;
  RecordingTransport transport_;
  FakeClock clock_{1800000000};
  std::mutex mu_;
  std::vector<Json> firing_;
};

TEST_F(ForwarderTest, SendsOnOpenRefreshesAtHalfTheTimeoutAndEndsOnResolve) {
  auto f = Make();
  Fire({IncidentJson("inc-1", "P1", "xid_fatal", 1800000000),
        IncidentJson("inc-2", "P3", "job_ended", 1800000000),  // below min_severity
        IncidentJson("inc-3", "P0", "alert:GpuHot", 1800000000)});  // came from Alertmanager
  f->Round();
  std::vector<Json> bodies = transport_.Bodies();
  ASSERT_EQ(bodies.size(), 2u);  // one post per Alertmanager
  ASSERT_EQ(bodies[0].size(), 1u);
  EXPECT_EQ(bodies[0][0]["labels"]["vigil_incident"], "inc-1");
  EXPECT_EQ(bodies[0][0]["endsAt"], "2027-01-15T08:05:00.000Z");
  EXPECT_EQ(transport_.requests.size(), 0u);
  // Nothing new: nothing sent until half the resolve timeout has passed.
  clock_.Advance(100);
  f->Round();
  EXPECT_TRUE(transport_.Bodies().empty());
  clock_.Advance(50);
  f->Round();
  bodies = transport_.Bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[0][0]["endsAt"], "2027-01-15T08:07:30.000Z");
  // Resolved: sent once more, ending now.
  clock_.Advance(10);
  Fire({});
  f->Round();
  bodies = transport_.Bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[0][0]["labels"]["vigil_incident"], "inc-1");
  EXPECT_EQ(bodies[0][0]["endsAt"], "2027-01-15T08:02:40.000Z");
  f->Round();
  EXPECT_TRUE(transport_.Bodies().empty());
}

TEST_F(ForwarderTest, WhatAnAlertmanagerRefusedGoesAgainNextRound) {
  auto f = Make();
  Fire({IncidentJson("inc-1", "P1", "xid_fatal", 1800000000)});
  transport_.status = 503;
  f->Round();
  EXPECT_EQ(transport_.Bodies().size(), 2u);
  Fire({});  // resolved while the Alertmanagers were away
  clock_.Advance(5);
  f->Round();
  EXPECT_EQ(transport_.Bodies().size(), 2u);
  transport_.status = 200;
  clock_.Advance(5);
  f->Round();
  std::vector<Json> bodies = transport_.Bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[0][0]["labels"]["vigil_incident"], "inc-1");
  EXPECT_EQ(bodies[0][0]["endsAt"], "2027-01-15T08:00:05.000Z");
  f->Round();
  EXPECT_TRUE(transport_.Bodies().empty());
  EXPECT_NE(f->MetricsText().find("vigil_alertmanager_forward_failures_total 4"),
            std::string::npos)
      << f->MetricsText();
}

TEST_F(ForwarderTest, OnlyThePairsLeaderForwards) {
  std::atomic<bool> leads{false};
  AlertForwarder f(options_, &transport_, &clock_,
                   [this] {
                     std::lock_guard<std::mutex> l(mu_);
                     return firing_;
                   },
                   [&leads] { return leads.load(); });
  Fire({IncidentJson("inc-1", "P1", "xid_fatal", 1800000000)});
  f.Round();
  EXPECT_TRUE(transport_.Bodies().empty());  // the standby sends nothing
  leads = true;
  f.Round();
  std::vector<Json> bodies = transport_.Bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[0][0]["labels"]["vigil_incident"], "inc-1");
  // Leadership lost: nothing more, not even an end (the new leader sends
  // its own; this one's alert ends at its endsAt).
  leads = false;
  clock_.Advance(200);
  Fire({});
  f.Round();
  EXPECT_TRUE(transport_.Bodies().empty());
  // Leading again: what fires is sent afresh, at once.
  leads = true;
  Fire({IncidentJson("inc-1", "P1", "xid_fatal", 1800000000)});
  f.Round();
  EXPECT_EQ(transport_.Bodies().size(), 2u);
}

class IntakeTest : public ::testing::Test {
 protected:
  IntakeTest() {
    StoreOptions store_options;
    store_options.clock = &clock_;
    store_ = NewMemoryStore(store_options);
    options_.intake = true;
    options_.rules = {{"GpuFellOff", "P0", {Response::kNotifySre, Response::kCordonNode}, true}};
  }
  std::unique_ptr<AlertIntake> Make() {
    auto intake = std::make_unique<AlertIntake>(
        options_, store_.get(), &clock_, [this](IncidentUpdate update) -> absl::StatusOr<std::string> {
          if (update.type == UpdateType::kOpened) update.incident.id = "inc-" + std::to_string(++next_);
          published_.push_back(update);
          return update.incident.id;
        });
    EXPECT_TRUE(intake->Load().ok());
    return intake;
  }
  static std::string Webhook(const std::string& status, const Json& labels) {
    return Json{{"version", "4"},
                {"status", status},
                {"receiver", "vigil"},
                {"alerts",
                 {{{"status", status},
                   {"labels", labels},
                   {"annotations", {{"summary", "GPU 3 fell off the bus"}}},
                   {"startsAt", "2027-01-15T07:59:00Z"},
                   {"endsAt", "0001-01-01T00:00:00Z"},
                   {"fingerprint", "abc"}}}}}
        .dump();
  }

  AlertmanagerOptions options_;
  FakeClock clock_{1800000000};
  std::unique_ptr<SeriesStore> store_;
  std::vector<IncidentUpdate> published_;
  int next_ = 0;
};

TEST_F(IntakeTest, AFiringAlertOpensOneIncidentAndItsResolutionResolvesIt) {
  auto intake = Make();
  const Json labels = {{"alertname", "GpuFellOff"}, {"instance", "gpu-7:9400"},
                       {"gpu", "3"}, {"hpc_job", "4242"}, {"severity", "warning"}};
  absl::StatusOr<AlertIntake::Counts> c = intake->Receive(Webhook("firing", labels), true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->opened, 1);
  ASSERT_EQ(published_.size(), 1u);
  const Incident& inc = published_[0].incident;
  EXPECT_EQ(inc.kind, "alert:GpuFellOff");
  EXPECT_EQ(inc.severity, Severity::kP0);  // the rule's, not the label's
  EXPECT_EQ(inc.node, "gpu-7");
  EXPECT_EQ(inc.job, "4242");
  EXPECT_EQ(inc.gpu, 3);
  EXPECT_EQ(inc.summary, "GPU 3 fell off the bus");
  EXPECT_EQ(inc.responses, (std::vector<Response>{Response::kNotifySre, Response::kCordonNode}));
  // Alertmanager repeats it: nothing new.
  c = intake->Receive(Webhook("firing", labels), true);
  EXPECT_EQ(c->updated, 1);
  EXPECT_EQ(published_.size(), 1u);
  // A restart keeps which alert is which incident.
  intake = Make();
  c = intake->Receive(Webhook("resolved", labels), true);
  EXPECT_EQ(c->resolved, 1);
  ASSERT_EQ(published_.size(), 2u);
  EXPECT_EQ(published_[1].type, UpdateType::kResolved);
  EXPECT_EQ(published_[1].incident.id, "inc-1");
}

TEST_F(IntakeTest, VigilsOwnAlertsComingBackAreDropped) {
  auto intake = Make();
  absl::StatusOr<AlertIntake::Counts> c = intake->Receive(
      Webhook("firing", {{"alertname", "xid_fatal"}, {"vigil_incident", "inc-000009"}}), true);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->looped, 1);
  EXPECT_TRUE(published_.empty());
}

TEST_F(IntakeTest, WithoutARuleSeverityComesFromTheLabelAndNothingActs) {
  auto intake = Make();
  const Json v2 = Json::array({{{"labels", {{"alertname", "DiskFull"}, {"severity", "critical"},
                                            {"node", "gpu-2"}}},
                                {"annotations", {{"summary", "disk full"}}},
                                {"startsAt", "2027-01-15T07:59:00Z"},
                                {"endsAt", "2027-01-15T08:04:00Z"}}});
  ASSERT_TRUE(intake->Receive(v2.dump(), false).ok());
  ASSERT_EQ(published_.size(), 1u);
  EXPECT_EQ(published_[0].incident.severity, Severity::kP1);
  EXPECT_EQ(published_[0].incident.job, "cluster");
  EXPECT_EQ(published_[0].incident.responses, (std::vector<Response>{Response::kNotifySre}));
  // Not renewed before its endsAt: resolved.
  clock_.Advance(200);
  intake->Expire();
  EXPECT_EQ(published_.size(), 1u);
  clock_.Advance(100);
  intake->Expire();
  ASSERT_EQ(published_.size(), 2u);
  EXPECT_EQ(published_[1].type, UpdateType::kResolved);
}

TEST_F(IntakeTest, BadBodiesAreRefusedWholeWithTheReason) {
  auto intake = Make();
  EXPECT_EQ(intake->Receive("nope", true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(intake->Receive("[]", true).status().message().find("webhook"), std::string::npos);
  const Json two = Json::array({{{"labels", {{"alertname", "A"}}}},
                                {{"labels", {{"alertname", "B"}}}, {"startsAt", "yesterday"}}});
  absl::StatusOr<AlertIntake::Counts> c = intake->Receive(two.dump(), false);
  EXPECT_NE(c.status().message().find("alert 1: startsAt"), std::string::npos) << c.status();
  EXPECT_TRUE(published_.empty());  // the good first alert was not taken either

  // Annotations and a webhook alert's status are strings; anything else is
  // refused before any alert of the request is taken (found by
  // tests/fuzz/alert_intake_fuzz.cc).
  const Json summary = Json::array({{{"labels", {{"alertname", "A"}}}},
                                    {{"labels", {{"alertname", "B"}}},
                                     {"annotations", {{"summary", 1}}}}});
  c = intake->Receive(summary.dump(), false);
  EXPECT_NE(c.status().message().find("alert 1: annotation \"summary\" must be a string"),
            std::string::npos)
      << c.status();
  const Json status = {{"version", "4"},
                       {"alerts", Json::array({{{"labels", {{"alertname", "A"}}}},
                                               {{"labels", {{"alertname", "B"}}},
                                                {"status", 2}}})}};
  c = intake->Receive(status.dump(), true);
  EXPECT_NE(c.status().message().find("alert 1: status must be a string"), std::string::npos)
      << c.status();
  EXPECT_TRUE(published_.empty());
  // The same first alert alone is then new: nothing of the refused
  // requests was kept.
  c = intake->Receive(Json::array({{{"labels", {{"alertname", "A"}}}}}).dump(), false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->opened, 1);
}

TEST(AlertmanagerConfigTest, ActionsNeedAnExplicitAllowance) {
  JsonConfigReader r;
  AlertmanagerOptions o;
  ParseAlertmanagerSection(Json::parse(R"({"forward_urls": ["http://am:9093", "am:9093"],
      "min_severity": "P1",
      "intake": {"rules": [{"alertname": "A", "responses": ["cordon_node"]},
                           {"alertname": "B", "responses": ["cordon_node"], "allow_actions": true,
                            "severity": "P0"}]}})"),
                           r, &o);
  ASSERT_EQ(r.errors().size(), 2u);
  EXPECT_NE(r.errors()[0].find("alertmanager.forward_urls"), std::string::npos) << r.errors()[0];
  EXPECT_NE(r.errors()[1].find("alertmanager.intake.rules[0].responses"), std::string::npos)
      << r.errors()[1];
  EXPECT_TRUE(o.intake);
  EXPECT_EQ(o.min_severity, Severity::kP1);
  ASSERT_EQ(o.rules.size(), 2u);
  EXPECT_EQ(o.rules[1].responses, (std::vector<Response>{Response::kCordonNode}));
}

}  // namespace
}  // namespace vigil
