#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "escalation/escalation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using json = nlohmann::json;

constexpr double kT0 = 1800000000;
constexpr double kDay = 86400;

// alice is the primary and carol the secondary for the whole week after
// kT0.
constexpr const char* kConfig = R"({
  "users": [{"name": "alice", "phone": "+15550001"}, {"name": "bob"},
            {"name": "carol"}, {"name": "dave"}],
  "schedules": [
    {"name": "primary", "layers": [{"rotation": "weekly",
                                    "start": 1799996400,
                                    "users": ["alice", "bob"]}]},
    {"name": "secondary", "layers": [{"start": 1799996400,
                                      "users": ["carol"]}]}]})";

EscalationConfig Config(const char* text = kConfig) {
  absl::StatusOr<EscalationConfig> config =
      ParseEscalationConfig(json::parse(text));
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : DefaultEscalationConfig();
}

Incident MakeIncident(std::string id, Severity severity,
                      std::string job = "llama") {
  Incident i;
  i.id = std::move(id);
  i.severity = severity;
  i.kind = "gpu_xid";
  i.job = std::move(job);
  i.node = "n3";
  i.gpu = 5;
  return i;
}

IncidentUpdate Update(UpdateType type, const Incident& incident) {
  IncidentUpdate u;
  u.type = type;
  u.incident = incident;
  if (type == UpdateType::kResolved) {
    u.incident.state = IncidentState::kResolved;
  }
  return u;
}

std::string Offset(double ts) { return absl::StrCat("+", ts - kT0); }

// "+300 repage inc-1/2/phone/alice" or "+300 repage inc-1/2/im [alice]".
std::vector<std::string> Pages(const EscalationOutput& out) {
  std::vector<std::string> lines;
  for (const Page& p : out.pages) {
    std::string line = absl::StrCat(
        Offset(p.ts), " ", std::string(PageEventName(p.event)), " ", p.key);
    const bool personal =
        p.channel == "phone" || p.channel == "sms" || p.channel == "email";
    if (!personal)
      absl::StrAppend(&line, " [", absl::StrJoin(p.users, ", "), "]");
    lines.push_back(line);
  }
  return lines;
}

// "+100 acknowledged by bob", "+0 silenced by ops (sil-1)"; "paged" events
// are left out (see PagedDetails).
std::vector<std::string> Events(const EscalationOutput& out) {
  std::vector<std::string> lines;
  for (const EscalationEvent& e : out.events) {
    if (e.type == "paged") continue;
    std::string line = absl::StrCat(Offset(e.ts), " ", e.type);
    if (!e.who.empty()) absl::StrAppend(&line, " by ", e.who);
    if (e.type == "silenced" || e.type == "unsilenced") {
      absl::StrAppend(&line, " (", e.detail, ")");
    }
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> PagedDetails(const EscalationOutput& out) {
  std::vector<std::string> details;
  for (const EscalationEvent& e : out.events) {
    if (e.type == "paged") details.push_back(e.detail);
  }
  return details;
}

Silence MakeSilence(std::string id, std::vector<Matcher> matchers, double start,
                    double end) {
  Silence s;
  s.id = std::move(id);
  s.matchers = std::move(matchers);
  s.start_ts = start;
  s.end_ts = end;
  s.author = "ops";
  return s;
}

class EscalatorTest : public ::testing::Test {
 protected:
  EscalationOutput Open(const Incident& incident, double ts) {
    return esc_.OnIncidentUpdate(Update(UpdateType::kOpened, incident), ts);
  }
  Lifecycle LifecycleOf(std::string_view id) {
    absl::StatusOr<Lifecycle> l = esc_.LifecycleOf(id);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.value_or(Lifecycle::kFiring);
  }

  Escalator esc_{Config()};
  const Incident p0_ = MakeIncident("inc-1", Severity::kP0);
};

TEST_F(EscalatorTest, P0DefaultTimeline) {
  EXPECT_THAT(Pages(Open(p0_, kT0)),
              ElementsAre("+0 trigger inc-1/1/phone/alice",
                          "+0 trigger inc-1/1/sms/alice",
                          "+0 trigger inc-1/1/im [alice]"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 299)), IsEmpty());
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 300)),
              ElementsAre("+300 repage inc-1/2/phone/alice",
                          "+300 repage inc-1/2/sms/alice",
                          "+300 repage inc-1/2/im [alice]"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 599)), IsEmpty());
  const EscalationOutput step1 = esc_.Tick(kT0 + 600);
  EXPECT_THAT(Pages(step1),
              ElementsAre("+600 escalate inc-1/3/phone/alice",
                          "+600 escalate inc-1/3/phone/carol",
                          "+600 escalate inc-1/3/sms/alice",
                          "+600 escalate inc-1/3/sms/carol",
                          "+600 escalate inc-1/3/im [alice, carol]"));
  EXPECT_EQ(step1.pages[0].step, 1);
  EXPECT_EQ(step1.pages[0].attempt, 1);
  EXPECT_EQ(step1.pages[0].channel, "phone");
  EXPECT_THAT(step1.pages[0].users, ElementsAre("alice"));
  EXPECT_EQ(step1.pages[0].incident_id, "inc-1");
  EXPECT_THAT(PagedDetails(step1),
              ElementsAre("escalate: step 1 attempt 1 of 3 to alice, carol on "
                          "phone, sms, im"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 1200)),
              ElementsAre("+1200 repage inc-1/4/phone/alice",
                          "+1200 repage inc-1/4/phone/carol",
                          "+1200 repage inc-1/4/sms/alice",
                          "+1200 repage inc-1/4/sms/carol",
                          "+1200 repage inc-1/4/im [alice, carol]"));
  const EscalationOutput last = esc_.Tick(kT0 + 1800);
  ASSERT_EQ(last.pages.size(), 5u);
  EXPECT_EQ(last.pages[0].key, "inc-1/5/phone/alice");
  EXPECT_EQ(last.pages[0].attempt, 3);
  EXPECT_THAT(Events(esc_.Tick(kT0 + 2399)), IsEmpty());
  const EscalationOutput done = esc_.Tick(kT0 + 2400);
  EXPECT_THAT(Pages(done), IsEmpty());
  EXPECT_THAT(Events(done), ElementsAre("+2400 escalation_exhausted"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 100000)), IsEmpty());
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kFiring);
}

TEST_F(EscalatorTest, P1Timeline) {
  const Incident p1 = MakeIncident("inc-2", Severity::kP1);
  EXPECT_THAT(Pages(Open(p1, kT0)),
              ElementsAre("+0 trigger inc-2/1/im [alice]"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 899)), IsEmpty());
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 900)),
              ElementsAre("+900 escalate inc-2/2/phone/alice",
                          "+900 escalate inc-2/2/im [alice]"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 1800)),
              ElementsAre("+1800 repage inc-2/3/phone/alice",
                          "+1800 repage inc-2/3/im [alice]"));
  EXPECT_THAT(Events(esc_.Tick(kT0 + 2700)),
              ElementsAre("+2700 escalation_exhausted"));
}

TEST_F(EscalatorTest, P2PagesOnceByEmailAndTicket) {
  const EscalationOutput out = Open(MakeIncident("inc-3", Severity::kP2), kT0);
  EXPECT_THAT(Pages(out), ElementsAre("+0 trigger inc-3/1/email/alice",
                                      "+0 trigger inc-3/1/ticket [alice]"));
  EXPECT_THAT(Events(out), ElementsAre("+0 escalation_exhausted"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 100000)), IsEmpty());
}

TEST_F(EscalatorTest, P3IsTrackedButNeverPaged) {
  const Incident p3 = MakeIncident("inc-4", Severity::kP3);
  const EscalationOutput out = Open(p3, kT0);
  EXPECT_THAT(Pages(out), IsEmpty());
  EXPECT_THAT(out.events, IsEmpty());
  EXPECT_EQ(LifecycleOf("inc-4"), Lifecycle::kFiring);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 100000)), IsEmpty());
  // Nobody was paged, so nobody hears that it resolved.
  EXPECT_THAT(Pages(esc_.OnIncidentUpdate(Update(UpdateType::kResolved, p3),
                                          kT0 + 100001)),
              IsEmpty());
  EXPECT_EQ(LifecycleOf("inc-4"), Lifecycle::kResolved);
}

TEST(EscalatorNobodyOnCallTest, DefaultsPageTheGroupChannelsOnly) {
  Escalator esc(DefaultEscalationConfig());
  const Incident p0 = MakeIncident("inc-1", Severity::kP0);
  const EscalationOutput out =
      esc.OnIncidentUpdate(Update(UpdateType::kOpened, p0), kT0);
  EXPECT_THAT(Pages(out), ElementsAre("+0 trigger inc-1/1/im []"));
  EXPECT_THAT(PagedDetails(out), ElementsAre(HasSubstr("nobody on call")));
  // The IM channel was paged, so it hears of the resolution.
  EXPECT_THAT(
      Pages(esc.OnIncidentUpdate(Update(UpdateType::kResolved, p0), kT0 + 10)),
      ElementsAre("+10 resolved inc-1/2/im []"));

  // A P2 (email + ticket) pages the ticket only.
  EXPECT_THAT(
      Pages(esc.OnIncidentUpdate(
          Update(UpdateType::kOpened, MakeIncident("inc-2", Severity::kP2)),
          kT0 + 20)),
      ElementsAre("+20 trigger inc-2/1/ticket []"));
}

TEST(EscalatorNobodyOnCallTest, PersonalOnlyStepSendsNothingButSaysSo) {
  EscalationConfig config = DefaultEscalationConfig();
  config.policies[static_cast<int>(Severity::kP1)].steps = {
      EscalationStep{{"schedule:primary"}, {"phone"}, 300, 1}};
  Escalator esc(config);
  const Incident p1 = MakeIncident("inc-1", Severity::kP1);
  const EscalationOutput out =
      esc.OnIncidentUpdate(Update(UpdateType::kOpened, p1), kT0);
  EXPECT_THAT(out.pages, IsEmpty());
  EXPECT_THAT(PagedDetails(out),
              ElementsAre("trigger: step 0 attempt 1 of 1: nobody on call; "
                          "nothing sent"));
  absl::StatusOr<EscalationOutput> resolved =
      esc.Resolve("inc-1", "alice", kT0 + 10);
  ASSERT_TRUE(resolved.ok());
  EXPECT_THAT(resolved->pages, IsEmpty());
}

TEST(EscalatorTargetsTest, UsersAndSchedulesOnPersonalAndGroupChannels) {
  EscalationConfig config = Config();
  config.policies[static_cast<int>(Severity::kP1)].steps = {
      EscalationStep{{"user:bob", "user:carol", "schedule:primary", "user:bob"},
                     {"sms", "webhook"},
                     60,
                     1}};
  Escalator esc(config);
  const EscalationOutput out = esc.OnIncidentUpdate(
      Update(UpdateType::kOpened, MakeIncident("inc-1", Severity::kP1)), kT0);
  EXPECT_THAT(Pages(out), ElementsAre("+0 trigger inc-1/1/sms/bob",
                                      "+0 trigger inc-1/1/sms/carol",
                                      "+0 trigger inc-1/1/sms/alice",
                                      "+0 trigger inc-1/1/webhook [bob, carol, "
                                      "alice]"));
  EXPECT_THAT(Events(esc.Tick(kT0 + 60)),
              ElementsAre("+60 escalation_exhausted"));
}

TEST(EscalatorTargetsTest, SchedulesResolveWhenEachPageGoesOut) {
  // The daily primary rotation hands over from alice to bob at +450.
  EscalationConfig config = Config();
  config.schedules[0].layers[0].start_ts = kT0 + 450 - kDay;
  config.schedules[0].layers[0].period_seconds = kDay;
  Escalator esc(config);
  EXPECT_THAT(
      Pages(esc.OnIncidentUpdate(
          Update(UpdateType::kOpened, MakeIncident("inc-1", Severity::kP0)),
          kT0)),
      ElementsAre("+0 trigger inc-1/1/phone/alice",
                  "+0 trigger inc-1/1/sms/alice",
                  "+0 trigger inc-1/1/im [alice]"));
  EXPECT_THAT(
      Pages(esc.Tick(kT0 + 600)),
      ElementsAre(
          "+300 repage inc-1/2/phone/alice", "+300 repage inc-1/2/sms/alice",
          "+300 repage inc-1/2/im [alice]", "+600 escalate inc-1/3/phone/bob",
          "+600 escalate inc-1/3/phone/carol", "+600 escalate inc-1/3/sms/bob",
          "+600 escalate inc-1/3/sms/carol",
          "+600 escalate inc-1/3/im [bob, carol]"));
  // Both alice and bob were paged: both hear of the resolution.
  EXPECT_THAT(
      Pages(esc.OnIncidentUpdate(
          Update(UpdateType::kResolved, MakeIncident("inc-1", Severity::kP0)),
          kT0 + 700)),
      ElementsAre("+700 resolved inc-1/4/im [alice, bob, carol]",
                  "+700 resolved inc-1/4/email/alice",
                  "+700 resolved inc-1/4/email/bob",
                  "+700 resolved inc-1/4/email/carol"));
}

// A reload mid-escalation: the next page goes to whoever the new schedule
// puts on call; an incident of a policy that had no steps starts the new
// one; a run past the last step of a shorter policy pages that step again.
TEST_F(EscalatorTest, ReconfigureAppliesToIncidentsAlreadyEscalating) {
  const Incident p3 = MakeIncident("inc-3", Severity::kP3);
  Open(p0_, kT0);
  EXPECT_THAT(Pages(Open(p3, kT0)), IsEmpty());
  EscalationConfig next = Config();
  next.schedules[0].overrides = {ScheduleOverride{"dave", kT0 + 100, kT0 + kDay}};
  next.policies[static_cast<int>(Severity::kP3)].steps = {
      EscalationStep{{"user:bob"}, {"email"}, 3600, 1}};
  esc_.Reconfigure(next, kT0 + 100);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 300)),
              ElementsAre("+100 trigger inc-3/1/email/bob",
                          "+300 repage inc-1/2/phone/dave", "+300 repage inc-1/2/sms/dave",
                          "+300 repage inc-1/2/im [dave]"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 600)),
              ElementsAre("+600 escalate inc-1/3/phone/dave", "+600 escalate inc-1/3/phone/carol",
                          "+600 escalate inc-1/3/sms/dave", "+600 escalate inc-1/3/sms/carol",
                          "+600 escalate inc-1/3/im [dave, carol]"));

  next.policies[static_cast<int>(Severity::kP0)].steps = {
      EscalationStep{{"user:alice"}, {"im"}, 60, 1}};
  next.policies[static_cast<int>(Severity::kP3)].steps.clear();
  esc_.Reconfigure(next, kT0 + 650);
  // Its run was due again at +1200 (step 1 waits 10 min).
  const EscalationOutput out = esc_.Tick(kT0 + 1300);
  EXPECT_THAT(Pages(out), ElementsAre("+1200 trigger inc-1/4/im [alice]"));
  EXPECT_THAT(Events(out), ElementsAre("+1260 escalation_exhausted"));
  EXPECT_FALSE(esc_.StatusOf("inc-3")->contains("next_page_at"))
      << "a policy without steps pages no more";
}

TEST_F(EscalatorTest, AcknowledgeStopsRepagingAndTellsWhoWasPaged) {
  Open(p0_, kT0);
  absl::StatusOr<EscalationOutput> ack =
      esc_.Acknowledge("inc-1", "bob", kT0 + 100);
  ASSERT_TRUE(ack.ok()) << ack.status();
  // Group channels and email; never phone or sms.
  EXPECT_THAT(Pages(*ack),
              ElementsAre("+100 acknowledged inc-1/2/im [alice]",
                          "+100 acknowledged inc-1/2/email/alice"));
  EXPECT_THAT(Events(*ack), ElementsAre("+100 acknowledged by bob"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kAcknowledged);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 300)), IsEmpty());
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 3699)), IsEmpty());
}

TEST_F(EscalatorTest, AcknowledgementLapsesWhileStillFiring) {
  Open(p0_, kT0);
  ASSERT_TRUE(esc_.Acknowledge("inc-1", "bob", kT0 + 100).ok());
  const EscalationOutput lapse = esc_.Tick(kT0 + 3700);
  EXPECT_THAT(Events(lapse), ElementsAre("+3700 ack_expired"));
  EXPECT_THAT(Pages(lapse), ElementsAre("+3700 trigger inc-1/3/phone/alice",
                                        "+3700 trigger inc-1/3/sms/alice",
                                        "+3700 trigger inc-1/3/im [alice]"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kFiring);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 4000)),
              ElementsAre("+4000 repage inc-1/4/phone/alice",
                          "+4000 repage inc-1/4/sms/alice",
                          "+4000 repage inc-1/4/im [alice]"));
}

TEST_F(EscalatorTest, AcknowledgementWithoutTimeoutNeverLapses) {
  EscalationConfig config = Config();
  config.policies[0].ack_timeout_seconds = 0;
  Escalator esc(config);
  esc.OnIncidentUpdate(Update(UpdateType::kOpened, p0_), kT0);
  ASSERT_TRUE(esc.Acknowledge("inc-1", "bob", kT0 + 100).ok());
  EXPECT_THAT(Pages(esc.Tick(kT0 + 30 * kDay)), IsEmpty());
}

TEST_F(EscalatorTest, UnacknowledgeStartsAgainFromStepZero) {
  Open(p0_, kT0);
  esc_.Tick(kT0 + 600);  // rounds 2 and 3
  ASSERT_TRUE(esc_.Acknowledge("inc-1", "bob", kT0 + 700).ok());  // round 4
  absl::StatusOr<EscalationOutput> unack =
      esc_.Unacknowledge("inc-1", "bob", kT0 + 800);
  ASSERT_TRUE(unack.ok()) << unack.status();
  EXPECT_THAT(Events(*unack), ElementsAre("+800 unacknowledged by bob"));
  EXPECT_THAT(Pages(*unack), ElementsAre("+800 trigger inc-1/5/phone/alice",
                                         "+800 trigger inc-1/5/sms/alice",
                                         "+800 trigger inc-1/5/im [alice]"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kFiring);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 1100)),
              ElementsAre("+1100 repage inc-1/6/phone/alice",
                          "+1100 repage inc-1/6/sms/alice",
                          "+1100 repage inc-1/6/im [alice]"));
}

TEST_F(EscalatorTest, AcknowledgeErrors) {
  EXPECT_EQ(esc_.Acknowledge("inc-9", "bob", kT0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(esc_.Unacknowledge("inc-9", "bob", kT0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(esc_.Resolve("inc-9", "bob", kT0).status().code(),
            absl::StatusCode::kNotFound);
  Open(p0_, kT0);
  EXPECT_EQ(esc_.Unacknowledge("inc-1", "bob", kT0 + 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(esc_.Acknowledge("inc-1", "bob", kT0 + 2).ok());
  absl::StatusOr<EscalationOutput> again =
      esc_.Acknowledge("inc-1", "carol", kT0 + 3);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("bob"));
  // Once the acknowledgement has lapsed it can be taken again.
  EXPECT_TRUE(esc_.Acknowledge("inc-1", "carol", kT0 + 2 + 3600).ok());
  ASSERT_TRUE(esc_.Resolve("inc-1", "carol", kT0 + 4000).ok());
  EXPECT_EQ(esc_.Acknowledge("inc-1", "bob", kT0 + 4001).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(esc_.Unacknowledge("inc-1", "bob", kT0 + 4001).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(esc_.Resolve("inc-1", "bob", kT0 + 4001).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(EscalatorTest, OperatorResolveNotifiesAndTheEngineMayReopen) {
  Open(p0_, kT0);
  esc_.Tick(kT0 + 300);
  absl::StatusOr<EscalationOutput> resolved =
      esc_.Resolve("inc-1", "carol", kT0 + 400);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_THAT(Events(*resolved),
              ElementsAre("+400 resolved_by_operator by carol"));
  EXPECT_THAT(Pages(*resolved),
              ElementsAre("+400 resolved inc-1/3/im [alice]",
                          "+400 resolved inc-1/3/email/alice"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kResolved);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 5000)), IsEmpty());
  // The engine catches up: nothing more to say.
  EXPECT_THAT(Pages(esc_.OnIncidentUpdate(Update(UpdateType::kResolved, p0_),
                                          kT0 + 5000)),
              IsEmpty());
  // The fault comes back: escalation starts over, keys keep counting.
  EXPECT_THAT(Pages(esc_.OnIncidentUpdate(Update(UpdateType::kReopened, p0_),
                                          kT0 + 6000)),
              ElementsAre("+6000 trigger inc-1/4/phone/alice",
                          "+6000 trigger inc-1/4/sms/alice",
                          "+6000 trigger inc-1/4/im [alice]"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kFiring);
}

TEST_F(EscalatorTest, OperatorResolveHoldsUntilTheEngineReopens) {
  Open(p0_, kT0);
  ASSERT_TRUE(esc_.Resolve("inc-1", "carol", kT0 + 10).ok());
  // More evidence of the still-firing incident does not page again.
  EXPECT_THAT(Pages(esc_.OnIncidentUpdate(
                  Update(UpdateType::kEvidenceAdded, p0_), kT0 + 20)),
              IsEmpty());
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kResolved);
}

TEST_F(EscalatorTest, EngineResolveNotifiesOnGroupChannelsAndEmailOnly) {
  Open(p0_, kT0);
  esc_.Tick(kT0 + 600);
  const EscalationOutput out =
      esc_.OnIncidentUpdate(Update(UpdateType::kResolved, p0_), kT0 + 700);
  EXPECT_THAT(Pages(out), ElementsAre("+700 resolved inc-1/4/im [alice, carol]",
                                      "+700 resolved inc-1/4/email/alice",
                                      "+700 resolved inc-1/4/email/carol"));
  EXPECT_THAT(Events(out), IsEmpty());
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kResolved);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 5000)), IsEmpty());
}

TEST_F(EscalatorTest, NotifyResolvedOffSendsNothing) {
  EscalationConfig config = Config();
  config.policies[0].notify_resolved = false;
  Escalator esc(config);
  esc.OnIncidentUpdate(Update(UpdateType::kOpened, p0_), kT0);
  EXPECT_THAT(
      esc.OnIncidentUpdate(Update(UpdateType::kResolved, p0_), kT0 + 10).pages,
      IsEmpty());
  EXPECT_THAT(esc.Resolve("inc-1", "bob", kT0 + 20).status().code(),
              absl::StatusCode::kFailedPrecondition);
}

TEST_F(EscalatorTest, SeverityRaiseStartsTheMoreSeverePolicy) {
  Incident incident = MakeIncident("inc-1", Severity::kP1);
  EXPECT_THAT(Pages(Open(incident, kT0)),
              ElementsAre("+0 trigger inc-1/1/im [alice]"));
  incident.severity = Severity::kP0;
  EXPECT_THAT(Pages(esc_.OnIncidentUpdate(
                  Update(UpdateType::kSeverityRaised, incident), kT0 + 100)),
              ElementsAre("+100 trigger inc-1/2/phone/alice",
                          "+100 trigger inc-1/2/sms/alice",
                          "+100 trigger inc-1/2/im [alice]"));
  // More evidence at the same severity changes nothing.
  EXPECT_THAT(Pages(esc_.OnIncidentUpdate(
                  Update(UpdateType::kEvidenceAdded, incident), kT0 + 200)),
              IsEmpty());
  EXPECT_THAT(
      Pages(esc_.Tick(kT0 + 700)),
      ElementsAre(
          "+400 repage inc-1/3/phone/alice", "+400 repage inc-1/3/sms/alice",
          "+400 repage inc-1/3/im [alice]", "+700 escalate inc-1/4/phone/alice",
          "+700 escalate inc-1/4/phone/carol",
          "+700 escalate inc-1/4/sms/alice", "+700 escalate inc-1/4/sms/carol",
          "+700 escalate inc-1/4/im [alice, carol]"));
  absl::StatusOr<json> status = esc_.StatusOf("inc-1");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)["policy"], "P0");
}

TEST_F(EscalatorTest, SilenceBeforeOpenThenItsEndPages) {
  absl::StatusOr<EscalationOutput> added = esc_.AddSilence(
      MakeSilence("sil-1", {{"job", "llama"}}, kT0 - 10, kT0 + 1000), kT0 - 5);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_THAT(added->events, IsEmpty());
  const EscalationOutput opened = Open(p0_, kT0);
  EXPECT_THAT(opened.pages, IsEmpty());
  EXPECT_THAT(Events(opened), ElementsAre("+0 silenced by ops (sil-1)"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kSilenced);
  absl::StatusOr<json> status = esc_.StatusOf("inc-1");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)["silenced_by"], "sil-1");
  EXPECT_FALSE(status->contains("next_page_at"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 999)), IsEmpty());
  // Alertmanager #3367: still firing when the silence ends, so it pages.
  const EscalationOutput ended = esc_.Tick(kT0 + 1000);
  EXPECT_THAT(Events(ended), ElementsAre("+1000 unsilenced (sil-1)"));
  EXPECT_THAT(Pages(ended), ElementsAre("+1000 trigger inc-1/1/phone/alice",
                                        "+1000 trigger inc-1/1/sms/alice",
                                        "+1000 trigger inc-1/1/im [alice]"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kFiring);
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 1300)),
              ElementsAre("+1300 repage inc-1/2/phone/alice",
                          "+1300 repage inc-1/2/sms/alice",
                          "+1300 repage inc-1/2/im [alice]"));
}

TEST_F(EscalatorTest, SilenceDuringEscalationAndEarlyExpiry) {
  Open(p0_, kT0);
  absl::StatusOr<EscalationOutput> added = esc_.AddSilence(
      MakeSilence("sil-1", {{"node", "n*"}}, kT0 + 100, kT0 + 5000), kT0 + 100);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_THAT(Events(*added), ElementsAre("+100 silenced by ops (sil-1)"));
  EXPECT_THAT(Pages(esc_.Tick(kT0 + 300)), IsEmpty());
  ASSERT_EQ(esc_.ActiveSilences(kT0 + 300).size(), 1u);
  absl::StatusOr<EscalationOutput> expired =
      esc_.ExpireSilence("sil-1", "dave", kT0 + 500);
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_THAT(Events(*expired), ElementsAre("+500 unsilenced by dave (sil-1)"));
  EXPECT_THAT(Pages(*expired), ElementsAre("+500 trigger inc-1/2/phone/alice",
                                           "+500 trigger inc-1/2/sms/alice",
                                           "+500 trigger inc-1/2/im [alice]"));
  EXPECT_THAT(esc_.ActiveSilences(kT0 + 500), IsEmpty());
  EXPECT_EQ(esc_.ExpireSilence("sil-1", "dave", kT0 + 600).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(EscalatorTest, MaintenanceWindowInTheFuture) {
  ASSERT_TRUE(esc_.AddSilence(MakeSilence("mw", {{"job", "llama"}}, kT0 + 1000,
                                          kT0 + 2000),
                              kT0)
                  .ok());
  ASSERT_EQ(esc_.ActiveSilences(kT0).size(), 1u);
  EXPECT_EQ(esc_.ActiveSilences(kT0)[0].id, "mw");
  EXPECT_EQ(Open(p0_, kT0).pages.size(), 3u);
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kFiring);
  const EscalationOutput before = esc_.Tick(kT0 + 1100);
  EXPECT_EQ(before.pages.size(), 8u);  // +300 (3) and +600 (5)
  EXPECT_EQ(before.pages.back().ts, kT0 + 600);
  EXPECT_THAT(Events(before), ElementsAre("+1000 silenced by ops (mw)"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kSilenced);
  const EscalationOutput after = esc_.Tick(kT0 + 2000);
  EXPECT_THAT(Events(after), ElementsAre("+2000 unsilenced (mw)"));
  EXPECT_THAT(Pages(after), ElementsAre("+2000 trigger inc-1/4/phone/alice",
                                        "+2000 trigger inc-1/4/sms/alice",
                                        "+2000 trigger inc-1/4/im [alice]"));
  EXPECT_THAT(esc_.ActiveSilences(kT0 + 2000), IsEmpty());
}

TEST_F(EscalatorTest, ResolvedWhileSilencedStillTellsWhoWasPaged) {
  Open(p0_, kT0);
  ASSERT_TRUE(esc_.AddSilence(MakeSilence("sil-1", {{"job", "llama"}},
                                          kT0 + 100, kT0 + 1000),
                              kT0 + 100)
                  .ok());
  const EscalationOutput out =
      esc_.OnIncidentUpdate(Update(UpdateType::kResolved, p0_), kT0 + 200);
  EXPECT_THAT(Pages(out), ElementsAre("+200 resolved inc-1/2/im [alice]",
                                      "+200 resolved inc-1/2/email/alice"));
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kResolved);
  const EscalationOutput later = esc_.Tick(kT0 + 2000);
  EXPECT_THAT(later.pages, IsEmpty());
  EXPECT_THAT(later.events, IsEmpty());
}

TEST_F(EscalatorTest, AcknowledgedIncidentStaysQuietWhenItsSilenceEnds) {
  Open(p0_, kT0);
  ASSERT_TRUE(esc_.Acknowledge("inc-1", "bob", kT0 + 50).ok());
  ASSERT_TRUE(esc_.AddSilence(MakeSilence("sil-1", {{"job", "llama"}},
                                          kT0 + 100, kT0 + 500),
                              kT0 + 100)
                  .ok());
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kAcknowledged);
  const EscalationOutput out = esc_.Tick(kT0 + 500);
  EXPECT_THAT(Events(out), ElementsAre("+500 unsilenced (sil-1)"));
  EXPECT_THAT(out.pages, IsEmpty());
  EXPECT_EQ(LifecycleOf("inc-1"), Lifecycle::kAcknowledged);
}

TEST_F(EscalatorTest, SilenceOfAnotherJobDoesNotApply) {
  ASSERT_TRUE(
      esc_.AddSilence(MakeSilence("sil-1", {{"job", "gpt"}}, kT0, kT0 + 1000),
                      kT0)
          .ok());
  EXPECT_EQ(Open(p0_, kT0).pages.size(), 3u);
}

TEST_F(EscalatorTest, RaisedSeverityLeavesASeveritySilence) {
  ASSERT_TRUE(
      esc_.AddSilence(
              MakeSilence("sil-1", {{"severity", "P1"}}, kT0, kT0 + 10000), kT0)
          .ok());
  Incident incident = MakeIncident("inc-1", Severity::kP1);
  EXPECT_THAT(Open(incident, kT0).pages, IsEmpty());
  incident.severity = Severity::kP0;
  const EscalationOutput out = esc_.OnIncidentUpdate(
      Update(UpdateType::kSeverityRaised, incident), kT0 + 100);
  EXPECT_THAT(Events(out), ElementsAre("+100 unsilenced (sil-1)"));
  EXPECT_THAT(Pages(out), ElementsAre("+100 trigger inc-1/1/phone/alice",
                                      "+100 trigger inc-1/1/sms/alice",
                                      "+100 trigger inc-1/1/im [alice]"));
}

TEST_F(EscalatorTest, AddSilenceErrors) {
  const Silence s = MakeSilence("sil-1", {{"job", "llama"}}, kT0, kT0 + 100);
  ASSERT_TRUE(esc_.AddSilence(s, kT0).ok());
  EXPECT_EQ(esc_.AddSilence(s, kT0 + 1).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(
      esc_.AddSilence(MakeSilence("sil-2", {{"job", "a"}}, kT0 - 100, kT0 - 50),
                      kT0)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(esc_.AddSilence(MakeSilence("sil-3", {}, kT0, kT0 + 100), kT0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      esc_.AddSilence(MakeSilence("", {{"job", "a"}}, kT0, kT0 + 100), kT0)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  // Once it has ended, its id may be used again.
  EXPECT_TRUE(esc_.AddSilence(MakeSilence("sil-1", {{"job", "b"}}, kT0 + 100,
                                          kT0 + 200),
                              kT0 + 100)
                  .ok());
}

TEST_F(EscalatorTest, BigTimeJumpEmitsEveryDuePageAtItsOwnTime) {
  Open(p0_, kT0);
  const EscalationOutput out = esc_.Tick(kT0 + 5000);
  ASSERT_EQ(out.pages.size(), 18u);  // 3 + 5 + 5 + 5
  std::vector<std::string> rounds;
  for (const Page& p : out.pages) {
    if (p.channel == "im") {
      rounds.push_back(absl::StrCat(Offset(p.ts), " ", p.key, " ",
                                    std::string(PageEventName(p.event))));
    }
  }
  EXPECT_THAT(
      rounds,
      ElementsAre("+300 inc-1/2/im repage", "+600 inc-1/3/im escalate",
                  "+1200 inc-1/4/im repage", "+1800 inc-1/5/im repage"));
  EXPECT_THAT(Events(out), ElementsAre("+2400 escalation_exhausted"));
  const EscalationOutput again = esc_.Tick(kT0 + 5000);
  EXPECT_THAT(again.pages, IsEmpty());
  EXPECT_THAT(again.events, IsEmpty());
}

TEST_F(EscalatorTest, TickIsIdempotentForTheSameTime) {
  Open(p0_, kT0);
  EXPECT_EQ(esc_.Tick(kT0 + 300).pages.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const EscalationOutput again = esc_.Tick(kT0 + 300);
    EXPECT_THAT(again.pages, IsEmpty());
    EXPECT_THAT(again.events, IsEmpty());
  }
}

TEST_F(EscalatorTest, TimeNeverGoesBackwards) {
  esc_.Tick(kT0 + 500);
  // An update stamped earlier than what was seen is taken as of +500.
  EXPECT_THAT(Pages(Open(p0_, kT0 + 100)),
              ElementsAre("+500 trigger inc-1/1/phone/alice",
                          "+500 trigger inc-1/1/sms/alice",
                          "+500 trigger inc-1/1/im [alice]"));
  EXPECT_EQ(esc_.Tick(kT0 + 799).pages.size(), 0u);
  EXPECT_EQ(esc_.Tick(kT0 + 800).pages.size(), 3u);
}

TEST_F(EscalatorTest, PagesOfSeveralIncidentsComeInTimeOrder) {
  Open(p0_, kT0);
  Open(MakeIncident("inc-2", Severity::kP0, "gpt"), kT0 + 100);
  const EscalationOutput out = esc_.Tick(kT0 + 1000);
  std::vector<std::string> im;
  for (const Page& p : out.pages) {
    if (p.channel == "im") im.push_back(absl::StrCat(Offset(p.ts), " ", p.key));
  }
  EXPECT_THAT(im, ElementsAre("+300 inc-1/2/im", "+400 inc-2/2/im",
                              "+600 inc-1/3/im", "+700 inc-2/3/im"));
}

TEST_F(EscalatorTest, StatusOfReportsWhereTheEscalationIs) {
  EXPECT_EQ(esc_.StatusOf("inc-1").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(esc_.LifecycleOf("inc-1").status().code(),
            absl::StatusCode::kNotFound);
  Open(p0_, kT0);
  EXPECT_EQ(*esc_.StatusOf("inc-1"), json({{"lifecycle", "firing"},
                                           {"policy", "P0"},
                                           {"step", 0},
                                           {"attempt", 1},
                                           {"next_page_at", kT0 + 300}}));
  esc_.Tick(kT0 + 600);
  EXPECT_EQ(*esc_.StatusOf("inc-1"), json({{"lifecycle", "firing"},
                                           {"policy", "P0"},
                                           {"step", 1},
                                           {"attempt", 1},
                                           {"next_page_at", kT0 + 1200}}));
  ASSERT_TRUE(esc_.Acknowledge("inc-1", "bob", kT0 + 700).ok());
  EXPECT_EQ(*esc_.StatusOf("inc-1"), json({{"lifecycle", "acknowledged"},
                                           {"policy", "P0"},
                                           {"acknowledged_by", "bob"},
                                           {"acknowledged_at", kT0 + 700},
                                           {"step", 1},
                                           {"attempt", 1}}));
  const Incident other = MakeIncident("inc-2", Severity::kP1, "gpt");
  Open(other, kT0 + 700);
  esc_.Tick(kT0 + 5000);
  EXPECT_EQ(*esc_.StatusOf("inc-2"), json({{"lifecycle", "firing"},
                                           {"policy", "P1"},
                                           {"step", 1},
                                           {"attempt", 2},
                                           {"exhausted", true}}));
  esc_.OnIncidentUpdate(Update(UpdateType::kResolved, other), kT0 + 5001);
  EXPECT_EQ((*esc_.StatusOf("inc-2"))["lifecycle"], "resolved");
  EXPECT_EQ((*esc_.StatusOf("inc-2"))["resolved_at"], kT0 + 5001);
}

TEST_F(EscalatorTest, ForgetsResolvedIncidentsAfterSevenDays) {
  Open(p0_, kT0);
  ASSERT_TRUE(esc_.Resolve("inc-1", "bob", kT0 + 100).ok());
  esc_.Tick(kT0 + 100 + Escalator::kForgetResolvedAfterSeconds - 1);
  EXPECT_TRUE(esc_.LifecycleOf("inc-1").ok());
  esc_.Tick(kT0 + 100 + Escalator::kForgetResolvedAfterSeconds);
  EXPECT_EQ(esc_.LifecycleOf("inc-1").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(esc_.Export()["incidents"], IsEmpty());
}

// One call of a scripted run.
using Action = std::function<EscalationOutput(Escalator&)>;

EscalationOutput OrDie(absl::StatusOr<EscalationOutput> out) {
  EXPECT_TRUE(out.ok()) << out.status();
  return out.value_or(EscalationOutput());
}

std::vector<Action> Script() {
  const Incident a = MakeIncident("inc-1", Severity::kP1);
  Incident a_raised = a;
  a_raised.severity = Severity::kP0;
  const Incident b = MakeIncident("inc-2", Severity::kP0, "gpt");
  const Incident c = MakeIncident("inc-3", Severity::kP2, "bert");
  return {
      [=](Escalator& e) {
        return e.OnIncidentUpdate(Update(UpdateType::kOpened, a), kT0);
      },
      [=](Escalator& e) {
        return e.OnIncidentUpdate(Update(UpdateType::kOpened, b), kT0 + 30);
      },
      [](Escalator& e) {
        return OrDie(e.AddSilence(
            MakeSilence("mw", {{"job", "gpt"}}, kT0 + 400, kT0 + 1500),
            kT0 + 60));
      },
      [](Escalator& e) { return e.Tick(kT0 + 350); },
      [=](Escalator& e) {
        return e.OnIncidentUpdate(Update(UpdateType::kSeverityRaised, a_raised),
                                  kT0 + 500);
      },
      [](Escalator& e) { return e.Tick(kT0 + 900); },
      [](Escalator& e) {
        return OrDie(e.Acknowledge("inc-1", "bob", kT0 + 950));
      },
      [=](Escalator& e) {
        return e.OnIncidentUpdate(Update(UpdateType::kOpened, c), kT0 + 1000);
      },
      [](Escalator& e) { return e.Tick(kT0 + 1400); },
      [](Escalator& e) { return e.Tick(kT0 + 2000); },
      [](Escalator& e) {
        return OrDie(e.Unacknowledge("inc-1", "bob", kT0 + 2100));
      },
      [](Escalator& e) { return e.Tick(kT0 + 3000); },
      [=](Escalator& e) {
        return e.OnIncidentUpdate(Update(UpdateType::kResolved, b), kT0 + 3100);
      },
      [](Escalator& e) {
        return OrDie(e.Resolve("inc-1", "carol", kT0 + 3200));
      },
      [=](Escalator& e) {
        return e.OnIncidentUpdate(Update(UpdateType::kReopened, b), kT0 + 3300);
      },
      [](Escalator& e) { return e.Tick(kT0 + 9000); },
  };
}

std::vector<std::string> Transcript(const EscalationOutput& out) {
  std::vector<std::string> lines = Pages(out);
  for (const EscalationEvent& e : out.events) {
    lines.push_back(absl::StrCat(Offset(e.ts), " ", e.incident_id, " ", e.type,
                                 " ", e.who, " ", e.detail));
  }
  return lines;
}

TEST(EscalatorStateTest, ExportImportContinuesTheSameEscalation) {
  const std::vector<Action> script = Script();
  Escalator uninterrupted(Config());
  std::vector<std::string> want;
  for (const Action& action : script) {
    for (std::string& line : Transcript(action(uninterrupted))) {
      want.push_back(std::move(line));
    }
  }
  ASSERT_GT(want.size(), 40u);
  // Restart after every step of the script.
  for (size_t cut = 0; cut <= script.size(); ++cut) {
    Escalator before(Config());
    std::vector<std::string> got;
    for (size_t i = 0; i < cut; ++i) {
      for (std::string& line : Transcript(script[i](before))) {
        got.push_back(std::move(line));
      }
    }
    Escalator after(Config());
    ASSERT_TRUE(after.Import(json::parse(before.Export().dump())).ok());
    EXPECT_EQ(after.Export(), before.Export());
    for (size_t i = cut; i < script.size(); ++i) {
      for (std::string& line : Transcript(script[i](after))) {
        got.push_back(std::move(line));
      }
    }
    EXPECT_EQ(got, want) << "restarted after step " << cut;
  }
}

TEST(EscalatorStateTest, ImportRejectsForeignDocuments) {
  Escalator esc(Config());
  esc.OnIncidentUpdate(
      Update(UpdateType::kOpened, MakeIncident("inc-1", Severity::kP0)), kT0);
  const json good = esc.Export();
  json wrong_version = good;
  wrong_version["version"] = 2;
  json bad_step = good;
  bad_step["incidents"][0]["step"] = "one";
  json missing = good;
  missing.erase("silences");
  json bad_silence = good;
  bad_silence["silences"] = json::array({{{"id", "s"}}});
  json extra = good;
  extra["incidents"][0]["color"] = "red";
  for (const json& doc : {json::array(), json::object(), wrong_version,
                          bad_step, missing, bad_silence, extra}) {
    Escalator fresh(Config());
    const absl::Status s = fresh.Import(doc);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << doc.dump();
  }
  // A failed import leaves the state as it was.
  EXPECT_FALSE(esc.Import(bad_step).ok());
  EXPECT_EQ(esc.Export(), good);
}

TEST(NamesTest, LifecycleAndPageEvent) {
  EXPECT_EQ(LifecycleName(Lifecycle::kFiring), "firing");
  EXPECT_EQ(LifecycleName(Lifecycle::kAcknowledged), "acknowledged");
  EXPECT_EQ(LifecycleName(Lifecycle::kSilenced), "silenced");
  EXPECT_EQ(LifecycleName(Lifecycle::kResolved), "resolved");
  EXPECT_EQ(PageEventName(PageEvent::kTrigger), "trigger");
  EXPECT_EQ(PageEventName(PageEvent::kRepage), "repage");
  EXPECT_EQ(PageEventName(PageEvent::kEscalate), "escalate");
  EXPECT_EQ(PageEventName(PageEvent::kAcknowledged), "acknowledged");
  EXPECT_EQ(PageEventName(PageEvent::kResolved), "resolved");
}

}  // namespace
}  // namespace vigil
