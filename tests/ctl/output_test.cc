#include "ctl/output.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vigil::ctl {
namespace {

using Json = nlohmann::json;

constexpr double kNow = 1764000000.0;

Json Parse(const char* text) {
  Json json = Json::parse(text, nullptr, false);
  EXPECT_FALSE(json.is_discarded()) << text;
  return json;
}

std::string Format(const std::string& command, const Json& body) {
  Invocation invocation;
  invocation.command = command;
  return FormatResponse(invocation, body, kNow);
}

TEST(FormatSpanTest, UsesTheLargestWholeUnit) {
  EXPECT_EQ(FormatSpan(0), "0s");
  EXPECT_EQ(FormatSpan(59.9), "59s");
  EXPECT_EQ(FormatSpan(60), "1m");
  EXPECT_EQ(FormatSpan(3599), "59m");
  EXPECT_EQ(FormatSpan(3600 * 5 + 59), "5h");
  EXPECT_EQ(FormatSpan(86400 * 2 + 7200), "2d");
}

TEST(FormatRelativeTest, SaysAgoOrIn) {
  EXPECT_EQ(FormatRelative(kNow - 180, kNow), "3m ago");
  EXPECT_EQ(FormatRelative(kNow + 7200, kNow), "in 2h");
  EXPECT_EQ(FormatRelative(kNow + 0.5, kNow), "now");
}

TEST(RenderTableTest, AlignsColumnsAndCutsLongCells) {
  EXPECT_EQ(RenderTable({"A", "LONGER"}, {{"wide cell", "x"}, {"b", "y"}}),
            "A          LONGER\n"
            "wide cell  x\n"
            "b          y\n");
  // Width counts characters, not bytes.
  EXPECT_EQ(RenderTable({"K", "V"}, {{"σσ", "1"}, {"abc", "2"}}),
            "K    V\n"
            "σσ   1\n"
            "abc  2\n");
  const std::string cut = RenderTable({}, {{std::string(100, 'x')}});
  EXPECT_EQ(cut, std::string(57, 'x') + "...\n");
}

TEST(FormatResponseTest, IncidentsMostSevereFirstThenNewest) {
  const Json body = Parse(R"({"incidents": [
    {"id": "inc-3", "severity": "P2", "kind": "slow_step", "job": "llama",
     "node": null, "gpu": null, "ts": 1763999000, "state": "firing",
     "lifecycle": "firing", "summary": "step time up 40%"},
    {"id": "inc-1", "severity": "P0", "kind": "xid", "job": "llama",
     "node": "gpu-node-17", "gpu": 3, "ts": 1763996400, "state": "firing",
     "lifecycle": "acknowledged", "summary": "XID 79: GPU fell off the bus"},
    {"id": "inc-2", "severity": "P0", "kind": "loss_nan", "job": "gpt",
     "node": "gpu-node-2", "ts": 1763999820.5, "state": "firing",
     "summary": "loss is NaN"}]})");
  EXPECT_EQ(
      Format("incidents", body),
      "SEV  ID     AGE  STATE         KIND       JOB    NODE         GPU  "
      "SUMMARY\n"
      "P0   inc-2  2m   firing        loss_nan   gpt    gpu-node-2   -    "
      "loss is NaN\n"
      "P0   inc-1  1h   acknowledged  xid        llama  gpu-node-17  3    "
      "XID 79: GPU fell off the bus\n"
      "P2   inc-3  16m  firing        slow_step  llama  -            -    "
      "step time up 40%\n");
}

TEST(FormatResponseTest, EmptyListsSaySo) {
  EXPECT_EQ(Format("incidents", Parse(R"({"incidents": []})")),
            "no incidents\n");
  EXPECT_EQ(Format("silences", Parse(R"({"silences": []})")), "no silences\n");
  EXPECT_EQ(Format("deliveries", Parse("{}")), "no deliveries\n");
  EXPECT_EQ(Format("actions", Parse(R"({"actions": null})")), "no actions\n");
  EXPECT_EQ(Format("audit", Parse(R"({"entries": []})")), "no audit entries\n");
}

TEST(FormatResponseTest, IncidentWithTimelineOldestFirst) {
  const Json body = Parse(R"({
    "id": "inc-1", "severity": "P0", "kind": "xid", "job": "llama",
    "node": "gpu-node-17", "gpu": 3, "ts": 1763996400, "state": "firing",
    "lifecycle": "acknowledged", "summary": "XID 79", "hint": "drain the node",
    "escalation": {"lifecycle": "acknowledged", "acknowledged_by": "alice",
                   "acknowledged_at": 1763999700},
    "timeline": [
      {"type": "acknowledged", "ts": 1763999700, "who": "alice",
       "detail": "on it"},
      {"type": "paged", "ts": 1763996400, "detail": "step 0 phone"}]})");
  EXPECT_EQ(Format("incident", body),
            "P0 inc-1  acknowledged  xid  job=llama node=gpu-node-17 gpu=3\n"
            "  since:       1h ago (2025-11-24T15:00:00Z)\n"
            "  summary:     XID 79\n"
            "  hint:        drain the node\n"
            "  escalation:  acknowledged_at=5m ago acknowledged_by=alice "
            "lifecycle=acknowledged\n"
            "\n"
            "timeline (oldest first):\n"
            "AGE  TYPE          WHO    DETAIL\n"
            "1h   paged         -      detail=step 0 phone\n"
            "5m   acknowledged  alice  detail=on it\n");
}

TEST(FormatResponseTest, SilencesShowMatchersAndWindow) {
  const Json body = Parse(R"({"silences": [
    {"id": "s-1", "matchers": [{"name": "job", "value": "llama"},
                               {"name": "node", "value": "gpu-node-1*"}],
     "starts_at": 1763999400, "ends_at": 1764007200, "author": "alice",
     "comment": "NCCL upgrade"}]})");
  EXPECT_EQ(Format("silences", body),
            "ID   MATCHERS                    STARTS   ENDS   AUTHOR  COMMENT\n"
            "s-1  job=llama,node=gpu-node-1*  10m ago  in 2h  alice   NCCL "
            "upgrade\n");
  const Json created = body["silences"][0];
  EXPECT_EQ(Format("silence add", created),
            "silence s-1 created: job=llama,node=gpu-node-1*; starts 10m ago, "
            "ends in 2h\n");
  EXPECT_EQ(Format("silence expire", created), "silence s-1 expired\n");
}

TEST(FormatResponseTest, DeliveriesNewestFirst) {
  const Json body = Parse(R"({"deliveries": [
    {"key": "inc-1/1/phone/alice", "incident_id": "inc-1", "kind": "phone",
     "description": "call alice", "state": "failed", "receiver": "alice",
     "attempts": 3, "last_detail": "HTTP 503", "created_ts": 1763999000,
     "updated_ts": 1763999900, "next_attempt_ts": 0},
    {"key": "inc-1/2/im", "incident_id": "inc-1", "kind": "im",
     "description": "post to #oncall", "state": "pending", "receiver": "slack",
     "attempts": 1, "last_detail": "", "created_ts": 1763999900,
     "updated_ts": 1763999900, "next_attempt_ts": 1764000030}]})");
  EXPECT_EQ(
      Format("deliveries", body),
      "AGE  STATE    KIND   RECEIVER  INCIDENT  TRIES  NEXT    DETAIL\n"
      "1m   pending  im     slack     inc-1     1      in 30s  post to "
      "#oncall\n"
      "16m  failed   phone  alice     inc-1     3      -       HTTP 503\n");
}

TEST(FormatResponseTest, ActionsAndOneAction) {
  const Json action = Parse(R"({"id": "act-7", "incident_id": "inc-1",
    "action": "cordon_node", "job": "llama", "node": "gpu-node-17",
    "state": "pending", "verdict": "needs_approval", "reason": "XID 79",
    "requested_by": "engine", "approved_by": "", "created_ts": 1763999940,
    "updated_ts": 1763999940, "detail": ""})");
  EXPECT_EQ(Format("actions", Json{{"actions", {action}}}),
            "ID     AGE  STATE    VERDICT         ACTION       JOB    NODE"
            "         INCIDENT  BY      APPROVED  REASON\n"
            "act-7  1m   pending  needs_approval  cordon_node  llama  "
            "gpu-node-17  inc-1     engine  -         XID 79\n");
  EXPECT_EQ(Format("approve", action),
            "action act-7 cordon_node job=llama node=gpu-node-17: state "
            "pending, verdict needs_approval\n"
            "  reason: XID 79\n");
}

TEST(FormatResponseTest, RemediationWarnsWhenTripped) {
  const std::string text = Format(
      "remediation",
      Parse(
          R"({"tripped": true, "dry_run": false, "tripped_at": 1763999400})"));
  EXPECT_EQ(text,
            "dry_run:     no\n"
            "tripped:     yes\n"
            "tripped_at:  10m ago\n"
            "\n"
            "The circuit breaker is TRIPPED: automatic cordons and pauses are "
            "halted.\n"
            "Once the storm is understood: vigilctl remediation reset\n");
  EXPECT_EQ(Format("remediation", Parse(R"({"tripped": false})")),
            "tripped:  no\n");
}

TEST(FormatResponseTest, SmallAnswers) {
  EXPECT_EQ(Format("ack", Parse(R"({"id": "inc-1", "lifecycle":
                                    "acknowledged"})")),
            "incident inc-1: acknowledged\n");
  EXPECT_EQ(Format("whoami", Parse(R"({"name": "alice", "role": "admin"})")),
            "alice (admin)\n");
  EXPECT_EQ(Format("oncall", Parse(R"({"schedules": [
                       {"name": "primary", "user": "alice"},
                       {"name": "secondary", "user": null}]})")),
            "SCHEDULE   ON CALL\n"
            "primary    alice\n"
            "secondary  (nobody)\n");
  EXPECT_EQ(Format("reload", Parse(R"({"applied": ["escalation.schedules", "auth.tokens"],
                                       "restart_required": ["storage"]})")),
            "config reloaded; in force now: escalation.schedules, auth.tokens\n"
            "changed, in force after a restart: storage\n");
  EXPECT_EQ(Format("reload", Parse(R"({"applied": [], "restart_required": []})")),
            "config reloaded; in force now: no change\n");
  EXPECT_EQ(Format("audit", Parse(R"({"entries": [
                       {"ts": 1763999990, "who": "alice", "role": "operator",
                        "action": "ack", "target": "inc-1", "detail": "",
                        "result": "ok"}]})")),
            "AGE  WHO    ROLE      ACTION  TARGET  RESULT  DETAIL\n"
            "10s  alice  operator  ack     inc-1   ok      -\n");
}

TEST(FormatResponseTest, ToleratesOddShapes) {
  // Not an object, wrong field types: no crash, "-" where unknown.
  EXPECT_EQ(Format("incidents", Parse(R"({"incidents": [17]})")),
            "SEV  ID  AGE  STATE  KIND  JOB  NODE  GPU  SUMMARY\n"
            "-    -   -    -      -     -    -     -    -\n");
  EXPECT_EQ(Format("whoami", Parse("[]")), "- (-)\n");
}

}  // namespace
}  // namespace vigil::ctl
