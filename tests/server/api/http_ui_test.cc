// The web UI's API through the real server: sessions with cookie and CSRF
// token, the live event stream, jobs and nodes from frames, baselines and
// the incident text search.
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "notify/signing.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

using Json = nlohmann::json;
constexpr double kT0 = 1764000000.0;  // FakeClock's default start; a multiple of 60
constexpr double kWaitSeconds = 20;    // bound on waits for the event stream

ServerOptions UiOptions(int http_threads = 8) {
  ServerOptions options = TestOptions();
  options.http_threads = http_threads;
  auto sha = [](const std::string& token) { return HexEncode(Sha256(token)); };
  options.auth.tokens = {{"vic", Role::kViewer, sha("viewer-token")},
                         {"olga", Role::kOperator, sha("operator-token")}};
  return options;
}

Json ParseOrNull(const HttpResult& r) {
  Json j = Json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.status << ": " << r.body;
  return j;
}

Json GetJson(int port, const std::string& path, int want_status = 200) {
  HttpResult r = HttpGet(port, path);
  EXPECT_EQ(r.status, want_status) << path << ": " << r.body;
  return ParseOrNull(r);
}

// Local series ids every test agent declares.
enum : uint32_t {
  kPower0 = 1, kPower1, kTemp0, kTemp1, kThrottle0, kThrottle1,
  kTokens, kMfu, kStepTime, kLoss, kDbe0
};

// One node's agent stream.
class NodeAgent {
 public:
  NodeAgent(TestServer& t, const std::string& node)
      : t_(t), client_(t.server.grpc_port()) {
    client_.Open();
    v1::FrameBatch hello = Batch(++seq_, node, "a");
    *hello.add_series() = Def(kPower0, "gpu_power_watts", {{"gpu", "0"}});
    *hello.add_series() = Def(kPower1, "gpu_power_watts", {{"gpu", "1"}});
    *hello.add_series() = Def(kTemp0, "gpu_temperature_celsius", {{"gpu", "0"}});
    *hello.add_series() = Def(kTemp1, "gpu_temperature_celsius", {{"gpu", "1"}});
    *hello.add_series() = Def(kThrottle0, "gpu_throttle_reasons", {{"gpu", "0"}});
    *hello.add_series() = Def(kThrottle1, "gpu_throttle_reasons", {{"gpu", "1"}});
    *hello.add_series() = Def(kTokens, "train_tokens_per_second", {});
    *hello.add_series() = Def(kMfu, "train_mfu_ratio", {});
    *hello.add_series() = Def(kStepTime, "train_step_time_seconds", {});
    *hello.add_series() = Def(kLoss, "train_loss", {});
    *hello.add_series() = Def(kDbe0, "gpu_ecc_dbe_total", {{"gpu", "0"}});
    EXPECT_TRUE(client_.Send(hello).has_value());
  }

  // One frame of job `job` at the server clock's time.
  void Send(const std::string& job, int64_t step, std::vector<uint32_t> ids,
            std::vector<double> values) {
    v1::FrameBatch batch = Batch(++seq_);
    v1::Frame frame = Frame(job, t_.clock.Now(), std::move(ids), std::move(values));
    frame.set_step(step);
    *batch.add_frames() = frame;
    EXPECT_TRUE(client_.Send(batch).has_value());
  }

  // Returns once the observers have run for every frame sent.
  void Sync() { EXPECT_TRUE(client_.Send(Batch(++seq_)).has_value()); }

 private:
  TestServer& t_;
  IngestClient client_;
  uint64_t seq_ = 0;
};

// A signed-in browser: the cookie header to send and the CSRF token.
struct Browser {
  std::string cookie;
  std::string csrf;
};

Browser SignIn(int port, const std::string& token) {
  std::multimap<std::string, std::string> headers;
  HttpResult r = HttpSend(port, "POST", "/api/v1/session",
                          Json{{"token", token}}.dump(), {}, &headers);
  EXPECT_EQ(r.status, 200) << r.body;
  auto it = headers.find("Set-Cookie");
  if (it == headers.end()) {
    ADD_FAILURE() << "no Set-Cookie";
    return {};
  }
  const std::string set_cookie = it->second;
  const std::string pair = set_cookie.substr(0, set_cookie.find(';'));
  return {pair, ParseOrNull(r).value("csrf", "")};
}

HttpHeaders With(const Browser& b, bool csrf) {
  HttpHeaders h = {{"Cookie", b.cookie}};
  if (csrf) h.emplace_back("X-CSRF-Token", b.csrf);
  return h;
}

constexpr char kSilence[] =
    R"({"matchers":[{"name":"node","value":"n9"}],"duration_minutes":30,"comment":"swap"})";

TEST(HttpUiTest, SignInSetsAnHttpOnlyCookieAndReturnsTheCsrfToken) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  std::multimap<std::string, std::string> headers;
  HttpResult r = HttpSend(port, "POST", "/api/v1/session",
                          R"({"token":"operator-token"})", {}, &headers);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json body = ParseOrNull(r);
  EXPECT_EQ(body["name"], "olga");
  EXPECT_EQ(body["role"], "operator");
  EXPECT_EQ(body["csrf"].get<std::string>().size(), 64u);
  ASSERT_EQ(headers.count("Set-Cookie"), 1u);
  const std::string set_cookie = headers.find("Set-Cookie")->second;
  EXPECT_EQ(set_cookie.rfind("vigil_session=", 0), 0u) << set_cookie;
  for (const char* attribute : {"; Path=/", "; HttpOnly", "; SameSite=Strict",
                                "; Max-Age=604800"})
    EXPECT_NE(set_cookie.find(attribute), std::string::npos) << set_cookie;
  EXPECT_EQ(headers.find("Cache-Control")->second, "no-store");

  EXPECT_EQ(HttpSend(port, "POST", "/api/v1/session", R"({"token":"nope"})", {}).status,
            401);
  EXPECT_EQ(HttpSend(port, "POST", "/api/v1/session", R"({"token":""})", {}).status, 401);
  for (const char* bad : {"not json", "[]", "{}", R"({"token":5})"}) {
    HttpResult b = HttpSend(port, "POST", "/api/v1/session", bad, {});
    EXPECT_EQ(b.status, 400) << bad;
    EXPECT_TRUE(ParseOrNull(b).contains("error")) << b.body;
  }
}

TEST(HttpUiTest, CookieSessionReadsAndWritesWithCsrf) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  const Browser olga = SignIn(port, "operator-token");

  HttpResult me = HttpSend(port, "GET", "/api/v1/session", "", With(olga, false));
  ASSERT_EQ(me.status, 200) << me.body;
  EXPECT_EQ(ParseOrNull(me)["name"], "olga");
  EXPECT_EQ(ParseOrNull(me)["via"], "session");
  EXPECT_EQ(ParseOrNull(me)["csrf"], olga.csrf);
  Json anonymous = GetJson(port, "/api/v1/session");
  EXPECT_EQ(anonymous["via"], "anonymous");
  EXPECT_TRUE(anonymous["csrf"].is_null());
  // Reads under /api/ ride on the cookie too.
  EXPECT_EQ(HttpSend(port, "GET", "/api/v1/incidents", "", With(olga, false)).status, 200);

  HttpResult no_csrf = HttpSend(port, "POST", "/api/v1/silences", kSilence, With(olga, false));
  EXPECT_EQ(no_csrf.status, 403);
  EXPECT_NE(no_csrf.body.find("X-CSRF-Token"), std::string::npos) << no_csrf.body;
  HttpHeaders wrong = {{"Cookie", olga.cookie}, {"X-CSRF-Token", "0" + olga.csrf}};
  EXPECT_EQ(HttpSend(port, "POST", "/api/v1/silences", kSilence, wrong).status, 403);
  EXPECT_TRUE(GetJson(port, "/api/v1/silences")["silences"].empty());

  HttpResult ok = HttpSend(port, "POST", "/api/v1/silences", kSilence, With(olga, true));
  ASSERT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(ParseOrNull(ok)["author"], "olga");
  EXPECT_EQ(GetJson(port, "/api/v1/silences")["silences"].size(), 1u);
  EXPECT_EQ(HttpSend(port, "POST", "/api/v1/silences", "not json", With(olga, true)).status,
            400);
  const Json audit = GetJson(port, "/api/v1/audit");
  ASSERT_FALSE(audit["entries"].empty());
  EXPECT_EQ(audit["entries"][0]["who"], "olga");
  EXPECT_EQ(audit["entries"][0]["action"], "silence");
}

TEST(HttpUiTest, ViewerSessionCannotWrite) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  const Browser vic = SignIn(port, "viewer-token");
  HttpResult denied = HttpSend(port, "POST", "/api/v1/silences", kSilence, With(vic, true));
  EXPECT_EQ(denied.status, 403);
  EXPECT_NE(denied.body.find("needs operator"), std::string::npos) << denied.body;
  EXPECT_EQ(HttpSend(port, "GET", "/api/v1/session", "", With(vic, false)).status, 200);
}

TEST(HttpUiTest, SignOutNeedsCsrfAndEndsTheSession) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  const Browser olga = SignIn(port, "operator-token");
  const Browser other = SignIn(port, "operator-token");
  EXPECT_EQ(HttpSend(port, "DELETE", "/api/v1/session", "", With(olga, false)).status, 403);

  std::multimap<std::string, std::string> headers;
  HttpResult out =
      HttpSend(port, "DELETE", "/api/v1/session", "", With(olga, true), &headers);
  ASSERT_EQ(out.status, 200) << out.body;
  ASSERT_EQ(headers.count("Set-Cookie"), 1u);
  EXPECT_NE(headers.find("Set-Cookie")->second.find("Max-Age=0"), std::string::npos);

  // The page still reads, anonymously (anonymous reads are on), but
  // cannot act.
  HttpResult session = HttpSend(port, "GET", "/api/v1/session", "", With(olga, false));
  ASSERT_EQ(session.status, 200);
  EXPECT_EQ(Json::parse(session.body)["via"], "anonymous");
  EXPECT_EQ(HttpSend(port, "GET", "/api/v1/incidents", "", With(olga, false)).status, 200);
  EXPECT_EQ(HttpSend(port, "POST", "/api/v1/silences", kSilence, With(olga, true)).status,
            401);
  // Other sessions live on.
  EXPECT_EQ(HttpSend(port, "GET", "/api/v1/session", "", With(other, false)).status, 200);
}

// One server-sent event.
struct Sse {
  int64_t id = -1;  // -1: no id line
  std::string event;
  Json data;
};

std::vector<Sse> ParseEvents(const std::string& text) {
  std::vector<Sse> events;
  for (absl::string_view block : absl::StrSplit(text, "\n\n", absl::SkipEmpty())) {
    Sse e;
    bool any = false;
    for (absl::string_view line : absl::StrSplit(block, '\n')) {
      if (absl::ConsumePrefix(&line, "id: ")) {
        EXPECT_TRUE(absl::SimpleAtoi(line, &e.id)) << line;
        any = true;
      } else if (absl::ConsumePrefix(&line, "event: ")) {
        e.event = std::string(line);
        any = true;
      } else if (absl::ConsumePrefix(&line, "data: ")) {
        e.data = Json::parse(std::string(line), nullptr, false);
        EXPECT_FALSE(e.data.is_discarded()) << line;
      }
    }
    if (any) events.push_back(std::move(e));
  }
  return events;
}

bool HasEvent(const std::string& text, const std::string& event,
              const std::string& field, const std::string& value) {
  for (const Sse& e : ParseEvents(text)) {
    if (e.event == event && e.data.is_object() && e.data.value(field, "") == value)
      return true;
  }
  return false;
}

// Five healthy frames on n1, then its GPU 0 reports a double-bit ECC error.
void RaiseEccFault(TestServer& t) {
  NodeAgent n1(t, "n1");
  for (int i = 0; i < 6; ++i) {
    n1.Send("llm", i, {kPower0, kDbe0}, {400, i < 5 ? 0.0 : 1.0});
    t.clock.Advance(1);
  }
  n1.Sync();
}

TEST(HttpUiTest, EventStreamCarriesIncidentAndAuditChangesInOrder) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  EventStream stream(port, "/api/v1/events");
  ASSERT_TRUE(stream.WaitUntil(
      [](const std::string& s) { return s.find("event: hello") != std::string::npos; },
      kWaitSeconds)) << stream.text();
  EXPECT_EQ(stream.status(), 200);
  const std::vector<Sse> hello = ParseEvents(stream.text());
  ASSERT_FALSE(hello.empty());
  EXPECT_EQ(hello[0].event, "hello");
  EXPECT_EQ(hello[0].data["seq"], 0);
  EXPECT_EQ(hello[0].data["ts"], kT0);

  RaiseEccFault(t);
  ASSERT_EQ(HttpCall(port, "POST", "/api/v1/silences", kSilence, "operator-token").status,
            201);
  ASSERT_TRUE(stream.WaitUntil(
      [](const std::string& s) {
        return HasEvent(s, "incident", "type", "opened") &&
               HasEvent(s, "audit", "action", "silence");
      },
      kWaitSeconds)) << stream.text();
  stream.Close();

  int64_t last = 0;
  for (const Sse& e : ParseEvents(stream.text())) {
    if (e.event == "hello") continue;
    EXPECT_GT(e.id, last) << stream.text();
    EXPECT_EQ(e.data["seq"], e.id);
    last = e.id;
    if (e.event == "incident") {
      EXPECT_EQ(e.data["id"], "inc-000001") << e.data;
    } else {
      EXPECT_EQ(e.event, "audit") << e.data;
    }
    if (e.data.value("type", "") == "opened") {
      EXPECT_EQ(e.data["severity"], "P0");
      EXPECT_EQ(e.data["state"], "firing");
    }
    if (e.event == "audit") EXPECT_EQ(e.data["target"], GetJson(port, "/api/v1/silences")["silences"][0]["id"]);
  }
  EXPECT_GE(last, 2);
}

TEST(HttpUiTest, LastEventIdResumesAfterIt) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(HttpCall(port, "POST", "/api/v1/silences", kSilence, "operator-token").status,
              201);
  // Audit notices 1..3 are out; a page that saw 1 gets 2 and 3.
  EventStream stream(port, "/api/v1/events", {{"Last-Event-ID", "1"}});
  ASSERT_TRUE(stream.WaitUntil(
      [](const std::string& s) { return s.find("id: 3\n") != std::string::npos; },
      kWaitSeconds)) << stream.text();
  stream.Close();
  std::vector<int64_t> ids;
  for (const Sse& e : ParseEvents(stream.text())) {
    if (e.id >= 0) ids.push_back(e.id);
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{2, 3})) << stream.text();
  const std::vector<Sse> events = ParseEvents(stream.text());
  EXPECT_EQ(events[0].event, "hello");
  EXPECT_EQ(events[0].data["seq"], 1);

  // Without Last-Event-ID a stream starts at the newest notice.
  EventStream fresh(port, "/api/v1/events");
  ASSERT_TRUE(fresh.WaitUntil(
      [](const std::string& s) { return s.find("event: hello") != std::string::npos; },
      kWaitSeconds));
  ASSERT_EQ(HttpCall(port, "POST", "/api/v1/silences", kSilence, "operator-token").status,
            201);
  ASSERT_TRUE(fresh.WaitUntil(
      [](const std::string& s) { return s.find("id: 4\n") != std::string::npos; },
      kWaitSeconds)) << fresh.text();
  fresh.Close();
  EXPECT_EQ(fresh.text().find("id: 3\n"), std::string::npos) << fresh.text();
}

TEST(HttpUiTest, EventStreamsAreLimitedToHalfTheThreads) {
  TestServer t(UiOptions(/*http_threads=*/2));
  const int port = t.server.http_port();
  EventStream first(port, "/api/v1/events");
  ASSERT_TRUE(first.WaitUntil(
      [](const std::string& s) { return s.find("event: hello") != std::string::npos; },
      kWaitSeconds));
  EventStream second(port, "/api/v1/events");
  second.WaitUntil([](const std::string& s) { return !s.empty(); }, kWaitSeconds);
  EXPECT_EQ(second.status(), 503) << second.text();
  EXPECT_NE(second.text().find("poll instead"), std::string::npos) << second.text();
  // The other thread still answers.
  EXPECT_EQ(HttpGet(port, "/api/v1/incidents").status, 200);
}

TEST(HttpUiTest, ClosedStreamFreesItsSlot) {
  TestServer t(UiOptions(/*http_threads=*/2));
  const int port = t.server.http_port();
  auto hello = [](const std::string& s) { return s.find("event: hello") != std::string::npos; };
  {
    EventStream first(port, "/api/v1/events");
    ASSERT_TRUE(first.WaitUntil(hello, kWaitSeconds));
  }
  // A page reload: the browser closed the old stream and opens a new one.
  EventStream again(port, "/api/v1/events");
  EXPECT_TRUE(again.WaitUntil(hello, kWaitSeconds)) << again.status() << " " << again.text();
  EXPECT_EQ(again.status(), 200);
}

// A live-event stream is re-checked before every write: signing out ends
// the streams the session opened (reads need a session or token here).
TEST(HttpUiTest, SigningOutEndsTheSessionsEventStreams) {
  ServerOptions options = UiOptions();
  options.auth.anonymous_read = false;
  TestServer t(options);
  const int port = t.server.http_port();
  const Browser vic = SignIn(port, "viewer-token");
  EventStream stream(port, "/api/v1/events", With(vic, false));
  ASSERT_TRUE(stream.WaitUntil(
      [](const std::string& s) { return s.find("event: hello") != std::string::npos; },
      kWaitSeconds));
  ASSERT_EQ(HttpSend(port, "DELETE", "/api/v1/session", "", With(vic, true)).status, 200);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(stream.WaitUntil([](const std::string&) { return false; }, 20));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15))
      << "the stream should have ended, not timed out";
}

// Behind a TLS-terminating proxy the session cookie is Secure.
TEST(HttpUiTest, TheSessionCookieIsSecureOverTls) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  std::multimap<std::string, std::string> headers;
  HttpSend(port, "POST", "/api/v1/session", Json{{"token", "viewer-token"}}.dump(), {},
           &headers);
  ASSERT_EQ(headers.count("Set-Cookie"), 1u);
  EXPECT_EQ(headers.find("Set-Cookie")->second.find("Secure"), std::string::npos);
  headers.clear();
  HttpSend(port, "POST", "/api/v1/session", Json{{"token", "viewer-token"}}.dump(),
           {{"X-Forwarded-Proto", "https"}}, &headers);
  ASSERT_EQ(headers.count("Set-Cookie"), 1u);
  EXPECT_NE(headers.find("Set-Cookie")->second.find("; Secure"), std::string::npos);
}

// One client address cannot take every thread: past its cap of requests
// in flight (a live-event stream counts) it gets 429 while others are
// served; the slot comes back when its stream closes.
TEST(HttpUiTest, RequestsInFlightAreCappedPerClient) {
  ServerOptions options = UiOptions(/*http_threads=*/4);
  options.http_max_requests_per_client = 1;
  TestServer t(options);
  const int port = t.server.http_port();
  auto hello = [](const std::string& s) { return s.find("event: hello") != std::string::npos; };
  {
    EventStream stream(port, "/api/v1/events");
    ASSERT_TRUE(stream.WaitUntil(hello, kWaitSeconds));
    HttpResult refused = HttpGet(port, "/api/v1/incidents");
    EXPECT_EQ(refused.status, 429);
    EXPECT_NE(refused.body.find("requests in flight from"), std::string::npos) << refused.body;
  }
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = HttpGet(port, "/api/v1/incidents").status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200);
}

// Behind a trusted reverse proxy the cap counts the clients the proxy
// names in X-Forwarded-For, not the proxy; anyone else's header is ignored,
// so a client cannot escape its cap by inventing addresses.
TEST(HttpUiTest, TheCapCountsTheClientsATrustedProxyNames) {
  auto hello = [](const std::string& s) { return s.find("event: hello") != std::string::npos; };
  for (bool trusted : {true, false}) {
    SCOPED_TRACE(trusted ? "proxy trusted" : "no proxy trusted");
    ServerOptions options = UiOptions(/*http_threads=*/4);
    options.http_max_requests_per_client = 1;
    if (trusted) options.http_trusted_proxies = {"10.9.0.0/16", "127.0.0.1"};
    TestServer t(options);
    const int port = t.server.http_port();
    EventStream stream(port, "/api/v1/events", {{"X-Forwarded-For", "192.0.2.1, 10.9.0.4"}});
    ASSERT_TRUE(stream.WaitUntil(hello, kWaitSeconds));
    HttpResult other = HttpSend(port, "GET", "/api/v1/incidents", "",
                                {{"X-Forwarded-For", "192.0.2.2"}});
    HttpResult same = HttpSend(port, "GET", "/api/v1/incidents", "",
                               {{"X-Forwarded-For", "192.0.2.1"}});
    EXPECT_EQ(other.status, trusted ? 200 : 429) << other.body;
    EXPECT_EQ(same.status, 429) << same.body;
    EXPECT_NE(same.body.find(trusted ? "from 192.0.2.1" : "from 127.0.0.1"), std::string::npos)
        << same.body;
  }
}

// Failed sign-ins are limited per client behind a trusted proxy: one
// guesser is refused, a colleague behind the same proxy still signs in.
TEST(HttpUiTest, SignInLimitsCountTheClientsATrustedProxyNames) {
  ServerOptions options = UiOptions();
  options.http_trusted_proxies = {"127.0.0.1"};
  TestServer t(options);
  const int port = t.server.http_port();
  const HttpHeaders guesser = {{"X-Forwarded-For", "198.51.100.7"}};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(HttpSend(port, "POST", "/api/v1/session",
                       Json{{"token", "guess-" + std::to_string(i)}}.dump(), guesser)
                  .status,
              401);
  }
  EXPECT_EQ(HttpSend(port, "POST", "/api/v1/session", Json{{"token", "viewer-token"}}.dump(),
                     guesser)
                .status,
            429);
  EXPECT_EQ(HttpSend(port, "POST", "/api/v1/session", Json{{"token", "viewer-token"}}.dump(),
                     {{"X-Forwarded-For", "198.51.100.8"}})
                .status,
            200);
}

TEST(HttpUiTest, NodesAndJobsFromFrames) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  NodeAgent n1(t, "n1");
  NodeAgent n2(t, "n2");
  const std::vector<uint32_t> all = {kPower0, kPower1, kTemp0, kTemp1, kThrottle0,
                                     kThrottle1, kTokens, kMfu, kStepTime, kLoss};
  for (int step = 0; step < 6; ++step) {
    // n1's GPU 1 is power-capped (SW thermal slowdown, 0x20); n2's is hot.
    n1.Send("llm", step, all, {400, 300, 60, 70, 0, 32, 1000, 0.4, 0.5, 2.5});
    n2.Send("llm", step, all, {400, 400, 60, 88, 0, 0, 3000, 0.6, 0.5, 2.5});
    t.clock.Advance(1);
  }
  n1.Sync();
  n2.Sync();

  Json nodes = GetJson(port, "/api/v1/nodes");
  EXPECT_EQ(nodes["now"], kT0 + 6);
  ASSERT_EQ(nodes["nodes"].size(), 2u) << nodes.dump(1);
  const Json& a = nodes["nodes"][0];
  const Json& b = nodes["nodes"][1];
  EXPECT_EQ(a["node"], "n1");
  EXPECT_EQ(b["node"], "n2");
  EXPECT_EQ(a["job"], "llm");
  EXPECT_EQ(a["gpus"], 2);
  EXPECT_EQ(a["gpu_state"], (Json{{"ok", 1}, {"throttled", 1}, {"hot", 0}, {"missing", 0}}));
  EXPECT_EQ(b["gpu_state"], (Json{{"ok", 1}, {"throttled", 0}, {"hot", 1}, {"missing", 0}}));
  EXPECT_EQ(a["last_frame_ts"], kT0 + 5);
  EXPECT_EQ(a["age_seconds"], 1);
  EXPECT_EQ(a["cordoned"], false);
  EXPECT_TRUE(a["incidents"].contains("P0"));

  Json jobs = GetJson(port, "/api/v1/jobs");
  ASSERT_EQ(jobs["jobs"].size(), 1u) << jobs.dump(1);
  const Json& job = jobs["jobs"][0];
  EXPECT_EQ(job["job"], "llm");
  EXPECT_EQ(job["nodes"], (Json{"n1", "n2"}));
  EXPECT_EQ(job["gpus"], 4);
  EXPECT_EQ(job["step"], 5);
  EXPECT_EQ(job["last_frame_ts"], kT0 + 5);
  const Json& m = job["metrics"];
  EXPECT_DOUBLE_EQ(m["tokens_per_second"]["last"].get<double>(), 4000);
  EXPECT_DOUBLE_EQ(m["mfu"]["last"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(m["step_rate"]["last"].get<double>(), 1.0);
  ASSERT_EQ(m["tokens_per_second"]["spark"].size(), 1u);
  EXPECT_EQ(m["tokens_per_second"]["spark"][0][0], kT0);
  // Six steps are in the job's warm-up: no baseline yet, learning.
  EXPECT_TRUE(m["tokens_per_second"]["baseline"].is_null());
  EXPECT_TRUE(m["step_rate"]["sigma"].is_null());
  EXPECT_EQ(m["tokens_per_second"]["learning"], true);
  EXPECT_EQ(m["tokens_per_second"]["learning_progress"]["step"], 0);
  EXPECT_EQ(m["tokens_per_second"]["learning_progress"]["of_steps"], 1000);
  EXPECT_TRUE(m["tokens_per_second"]["learning_progress"]["band"].is_null());

  Json detail = GetJson(port, "/api/v1/jobs/llm");
  EXPECT_EQ(detail["job"], "llm");
  EXPECT_EQ(detail["now"], kT0 + 6);
  ASSERT_EQ(detail["gpus"].size(), 4u) << detail.dump(1);
  EXPECT_EQ(detail["gpus"][0]["node"], "n1");
  EXPECT_EQ(detail["gpus"][0]["gpu"], 0);
  EXPECT_EQ(detail["gpus"][1]["throttle_reasons"], 32);
  EXPECT_EQ(detail["gpus"][3]["node"], "n2");
  EXPECT_EQ(detail["gpus"][3]["temperature_celsius"], 88);
  EXPECT_EQ(detail["gpus"][3]["power_watts"], 400);
  EXPECT_EQ(GetJson(port, "/api/v1/jobs/nope", 404)["error"], "job 'nope' not seen");

  // 40 s later n1 reports GPU 0 only: GPU 1 counts as missing.
  t.clock.Advance(40);
  n1.Send("llm", 6, {kPower0, kTemp0, kThrottle0}, {400, 60, 0});
  n1.Sync();
  nodes = GetJson(port, "/api/v1/nodes");
  EXPECT_EQ(nodes["nodes"][0]["gpu_state"],
            (Json{{"ok", 1}, {"throttled", 0}, {"hot", 0}, {"missing", 1}}));
  EXPECT_EQ(nodes["nodes"][1]["age_seconds"], 41);
}

TEST(HttpUiTest, JobHealthFollowsIncidents) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  NodeAgent n1(t, "n1");
  NodeAgent n2(t, "n2");
  const std::vector<uint32_t> ids = {kPower0, kTokens, kLoss, kDbe0};
  for (int step = 0; step < 5; ++step) {
    n1.Send("llm", step, ids, {400, 1000, 2.5, 0});
    n2.Send("llm", step, ids, {400, 1000, 2.5, 0});
    t.clock.Advance(1);
  }
  n1.Sync();
  n2.Sync();
  Json job = GetJson(port, "/api/v1/jobs")["jobs"][0];
  EXPECT_EQ(job["health"], "ok") << job.dump(1);
  EXPECT_EQ(job["incidents"], (Json{{"P0", 0}, {"P1", 0}, {"P2", 0}, {"P3", 0}}));

  // A NaN loss on n2 is a P0 at once (of the job: it names no node).
  n2.Send("llm", 5, ids, {400, 1000, NAN, 0});
  n2.Sync();
  job = GetJson(port, "/api/v1/jobs")["jobs"][0];
  EXPECT_EQ(job["health"], "critical") << job.dump(1);
  EXPECT_EQ(job["incidents"]["P0"], 1);
  EXPECT_EQ(GetJson(port, "/api/v1/jobs/llm")["health"], "critical");
  // A double-bit ECC error on n1 is a P0 of n1.
  n1.Send("llm", 5, ids, {400, 1000, 2.5, 1});
  n1.Sync();
  EXPECT_EQ(GetJson(port, "/api/v1/jobs")["jobs"][0]["incidents"]["P0"], 2);
  const Json nodes = GetJson(port, "/api/v1/nodes")["nodes"];
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]["incidents"]["P0"], 1) << GetJson(port, "/api/v1/incidents").dump(1);
  EXPECT_EQ(nodes[1]["incidents"]["P0"], 0);
}

TEST(HttpUiTest, SilentJobWithoutIncidents) {
  ServerOptions options = UiOptions();
  options.detection_enabled = false;
  TestServer t(options);
  const int port = t.server.http_port();
  NodeAgent n1(t, "n1");
  n1.Send("llm", 0, {kTokens}, {1000});
  n1.Sync();
  EXPECT_EQ(GetJson(port, "/api/v1/jobs")["jobs"][0]["health"], "ok");
  t.clock.Advance(61);
  EXPECT_EQ(GetJson(port, "/api/v1/jobs")["jobs"][0]["health"], "silent");
}

TEST(HttpUiTest, JobFiguresCarryTheLearnedBaselines) {
  ServerOptions options = UiOptions();
  options.detector.baseline.learn_steps = 5;
  options.detector.lifecycle.rewarm_s = 0;
  TestServer t(options);
  const int port = t.server.http_port();
  NodeAgent n1(t, "n1");
  NodeAgent n2(t, "n2");
  const std::vector<uint32_t> ids = {kTokens, kStepTime, kMfu};
  // Past the detector's warm-up steps; a little noise so sigma is learned.
  auto send = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      const double wobble = (i % 2 ? 1 : -1);
      n1.Send("llm", 1000 + i, ids, {1000 + 10 * wobble, 0.5 + 0.01 * wobble, 0.4});
      n2.Send("llm", 1000 + i, ids, {3000 - 10 * wobble, 0.5 - 0.01 * wobble, 0.6});
      t.clock.Advance(1);
    }
    n1.Sync();
    n2.Sync();
  };
  send(0, 10);
  Json young = GetJson(port, "/api/v1/jobs")["jobs"][0]["metrics"];
  EXPECT_TRUE(young["tokens_per_second"]["baseline"].is_null());
  EXPECT_EQ(young["tokens_per_second"]["learning"], true);
  EXPECT_EQ(young["step_rate"]["learning"], true);
  // "learning baseline (step n of N)": the steps learned so far.
  EXPECT_EQ(young["step_rate"]["learning_progress"]["of_steps"], 5);
  EXPECT_GE(young["step_rate"]["learning_progress"]["step"].get<int>(), 1);
  EXPECT_LE(young["step_rate"]["learning_progress"]["step"].get<int>(), 5);
  EXPECT_EQ(young["mfu"]["learning"], false);  // a fixed threshold, never learned
  EXPECT_TRUE(young["mfu"]["learning_progress"].is_null());

  send(10, 60);
  const Json m = GetJson(port, "/api/v1/jobs")["jobs"][0]["metrics"];
  // Tokens/s: the nodes' levels summed; step rate: one over the step time.
  EXPECT_NEAR(m["tokens_per_second"]["baseline"].get<double>(), 4000, 40) << m.dump(1);
  EXPECT_GT(m["tokens_per_second"]["sigma"].get<double>(), 0);
  EXPECT_EQ(m["tokens_per_second"]["learning"], false);
  EXPECT_NEAR(m["step_rate"]["baseline"].get<double>(), 2.0, 0.05);
  EXPECT_EQ(m["step_rate"]["learning"], false);
  EXPECT_TRUE(m["step_rate"]["learning_progress"].is_null());
}

TEST(HttpUiTest, BaselineOfASeries) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  RaiseEccFault(t);
  std::vector<SeriesInfo> power = t.server.store()->ListSeries({"llm", "n1", "gpu_power_watts"});
  std::vector<SeriesInfo> dbe = t.server.store()->ListSeries({"llm", "n1", "gpu_ecc_dbe_total"});
  ASSERT_EQ(power.size(), 1u);
  ASSERT_EQ(dbe.size(), 1u);

  Json b = GetJson(port, "/api/v1/baseline?series=" + std::to_string(power[0].id));
  EXPECT_EQ(b["series"], power[0].id);
  EXPECT_EQ(b["learned"], false);
  EXPECT_TRUE(b["mean"].is_null());
  EXPECT_TRUE(b["sigma"].is_null());
  EXPECT_EQ(b["k_sigma"], 3);
  EXPECT_EQ(b["rate"], false);
  EXPECT_EQ(GetJson(port, "/api/v1/baseline?series=" + std::to_string(dbe[0].id))["rate"],
            true);

  for (const char* bad : {"", "?series=", "?series=abc", "?series=-1", "?series=1.5",
                          "?series=99999999999"})
    EXPECT_TRUE(GetJson(port, std::string("/api/v1/baseline") + bad, 400).contains("error"))
        << bad;
  EXPECT_TRUE(GetJson(port, "/api/v1/baseline?series=4242", 404).contains("error"));
}

TEST(HttpUiTest, IncidentTextSearch) {
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  RaiseEccFault(t);  // inc-000001: ecc_double_bit on n1
  NodeAgent n2(t, "n2");
  n2.Send("llm", 10, {kLoss}, {NAN});  // inc-000002: loss_nan
  n2.Sync();
  auto ids = [port](const std::string& query) {
    std::vector<std::string> out;
    const Json list = GetJson(port, "/api/v1/incidents" + query);
    for (const Json& i : list["incidents"]) out.push_back(i["id"].get<std::string>());
    return out;
  };
  ASSERT_EQ(ids(""), (std::vector<std::string>{"inc-000002", "inc-000001"}))
      << GetJson(port, "/api/v1/incidents").dump(1);
  EXPECT_EQ(ids("?q=ECC_Double"), std::vector<std::string>{"inc-000001"});
  EXPECT_EQ(ids("?q=LOSS_NAN"), std::vector<std::string>{"inc-000002"});
  EXPECT_EQ(ids("?q=INC-000002"), std::vector<std::string>{"inc-000002"});
  EXPECT_EQ(ids("?q=LLM"), (std::vector<std::string>{"inc-000002", "inc-000001"}));
  EXPECT_TRUE(ids("?q=no-such-text").empty());
  EXPECT_TRUE(ids("?q=ecc_double&node=n2").empty());
}

TEST(HttpUiTest, AnswersAreGzippedEvenWhenBrotliIsOffered) {
  // Brotli at httplib's quality 11 made a large incident list take seconds.
  TestServer t(UiOptions());
  const int port = t.server.http_port();
  for (const char* offer : {"gzip, deflate, br", "br;q=1.0, gzip;q=0.8", "br"}) {
    std::multimap<std::string, std::string> headers;
    HttpResult r = HttpSend(port, "GET", "/api/v1/incidents?state=all", "",
                            {{"Accept-Encoding", offer}}, &headers);
    ASSERT_EQ(r.status, 200) << offer;
    EXPECT_TRUE(ParseOrNull(r).contains("incidents")) << offer << ": " << r.body;
    auto encoding = headers.find("Content-Encoding");
    const std::string got = encoding == headers.end() ? "" : encoding->second;
    EXPECT_EQ(got, std::string(offer) == "br" ? "" : "gzip") << offer;
  }
}

}  // namespace
}  // namespace vigil::testing
