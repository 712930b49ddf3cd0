// RequestAuthorizer: sign-in, bearer tokens, session cookies with CSRF,
// anonymous reads, expiry on a fake clock, eviction, identities vouched
// for by another server of the fleet; and CookieValue.
#include "server/api/web_sessions.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "notify/signing.h"

namespace vigil {
namespace {

constexpr char kViewerToken[] = "viewer-token";
constexpr char kOperatorToken[] = "operator-token";

AuthOptions TwoTokens(bool anonymous_read = true) {
  AuthOptions options;
  options.tokens = {{"vic", Role::kViewer, HexEncode(Sha256(kViewerToken))},
                    {"olga", Role::kOperator, HexEncode(Sha256(kOperatorToken))}};
  options.anonymous_read = anonymous_read;
  return options;
}

std::string Cookie(const NewSession& s) {
  return std::string(kSessionCookie) + "=" + s.id;
}

class WebSessionsTest : public ::testing::Test {
 protected:
  explicit WebSessionsTest(WebSessionOptions options = WebSessionOptions(),
                           bool anonymous_read = true)
      : auth_(TwoTokens(anonymous_read)), authorizer_(&auth_, &clock_, options) {}

  NewSession MustSignIn(const std::string& token) {
    absl::StatusOr<NewSession> s = authorizer_.SignIn(token);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.value_or(NewSession{});
  }

  // A request riding on session cookie `cookie`.
  absl::StatusOr<RequestIdentity> WithCookie(const std::string& method,
                                             const std::string& cookie,
                                             const std::string& csrf, Role needed) {
    return authorizer_.Authorize({method, "", cookie, csrf}, needed);
  }

  // How a GET riding on `cookie` is let in: "session", "anonymous" (an
  // ended session still reads anonymously when that is allowed) or the
  // error code.
  std::string Via(const std::string& cookie) {
    absl::StatusOr<RequestIdentity> who = WithCookie("GET", cookie, "", Role::kViewer);
    return who.ok() ? who->via : absl::StatusCodeToString(who.status().code());
  }

  FakeClock clock_;
  Authenticator auth_;
  RequestAuthorizer authorizer_;
};

TEST_F(WebSessionsTest, SignInGivesRandomIdAndCsrf) {
  NewSession a = MustSignIn(kOperatorToken);
  EXPECT_EQ(a.who.name, "olga");
  EXPECT_EQ(a.who.role, Role::kOperator);
  EXPECT_EQ(a.id.size(), 64u);  // 32 random bytes, hex
  EXPECT_EQ(a.csrf.size(), 64u);
  EXPECT_NE(a.id, a.csrf);
  NewSession b = MustSignIn(kOperatorToken);
  EXPECT_NE(a.id, b.id);
  EXPECT_NE(a.csrf, b.csrf);
  EXPECT_EQ(authorizer_.session_count(), 2u);

  EXPECT_EQ(authorizer_.SignIn("nope").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(authorizer_.SignIn("").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(authorizer_.session_count(), 2u);
}

TEST_F(WebSessionsTest, BearerTokenNeedsNoCsrfAndWinsOverTheCookie) {
  NewSession viewer = MustSignIn(kViewerToken);
  absl::StatusOr<RequestIdentity> who = authorizer_.Authorize(
      {"POST", "Bearer operator-token", Cookie(viewer), ""}, Role::kOperator);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->who.name, "olga");
  EXPECT_EQ(who->via, "token");
  EXPECT_EQ(who->csrf, "");

  EXPECT_EQ(authorizer_.Authorize({"POST", "Bearer viewer-token", "", ""},
                                  Role::kOperator).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(authorizer_.Authorize({"GET", "Bearer wrong", "", ""}, Role::kViewer)
                .status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(WebSessionsTest, CookieReadsWithoutCsrfButWritesNeedIt) {
  NewSession s = MustSignIn(kOperatorToken);
  absl::StatusOr<RequestIdentity> read = WithCookie("GET", Cookie(s), "", Role::kViewer);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->who.name, "olga");
  EXPECT_EQ(read->via, "session");
  EXPECT_EQ(read->csrf, s.csrf);
  EXPECT_TRUE(WithCookie("HEAD", Cookie(s), "", Role::kOperator).ok());

  for (const char* method : {"POST", "DELETE", "PUT"}) {
    EXPECT_EQ(WithCookie(method, Cookie(s), "", Role::kOperator).status().code(),
              absl::StatusCode::kPermissionDenied) << method;
    EXPECT_EQ(WithCookie(method, Cookie(s), s.csrf + "0", Role::kOperator)
                  .status().code(),
              absl::StatusCode::kPermissionDenied) << method;
    absl::StatusOr<RequestIdentity> ok =
        WithCookie(method, Cookie(s), s.csrf, Role::kOperator);
    ASSERT_TRUE(ok.ok()) << method << ": " << ok.status();
    EXPECT_EQ(ok->who.name, "olga");
  }
  // Another session's CSRF token does not do.
  NewSession other = MustSignIn(kOperatorToken);
  EXPECT_EQ(WithCookie("POST", Cookie(s), other.csrf, Role::kOperator).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Nor an unknown session id.
  EXPECT_EQ(Via("vigil_session=abc"), "anonymous");
}

TEST_F(WebSessionsTest, SessionRoleIsChecked) {
  NewSession viewer = MustSignIn(kViewerToken);
  EXPECT_TRUE(WithCookie("GET", Cookie(viewer), "", Role::kViewer).ok());
  absl::Status denied =
      WithCookie("POST", Cookie(viewer), viewer.csrf, Role::kOperator).status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("needs operator"), std::string::npos) << denied;
  EXPECT_EQ(WithCookie("GET", Cookie(viewer), "", Role::kAdmin).status().code(),
            absl::StatusCode::kPermissionDenied);
}

// A reload that removes the token a session signed in with ends the
// session (reads fall back to anonymous, writes are refused); one that
// changes the token's role gives the session the new role; bearer tokens
// follow the new list at once.
TEST_F(WebSessionsTest, ReloadedTokensApplyToOpenSessions) {
  NewSession olga = MustSignIn(kOperatorToken);
  NewSession vic = MustSignIn(kViewerToken);
  AuthOptions next;
  next.tokens = {{"vic", Role::kOperator, HexEncode(Sha256(kViewerToken))}};
  auth_.Replace(next);

  absl::Status revoked =
      WithCookie("POST", Cookie(olga), olga.csrf, Role::kOperator).status();
  EXPECT_EQ(revoked.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(revoked.message().find("no longer configured"), std::string::npos) << revoked;
  EXPECT_EQ(Via(Cookie(olga)), "anonymous");
  EXPECT_EQ(authorizer_.Authorize({"GET", std::string("Bearer ") + kOperatorToken, "", ""},
                                  Role::kViewer)
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);

  absl::StatusOr<RequestIdentity> promoted =
      WithCookie("POST", Cookie(vic), vic.csrf, Role::kOperator);
  ASSERT_TRUE(promoted.ok()) << promoted.status();
  EXPECT_EQ(promoted->who.name, "vic");
  EXPECT_EQ(promoted->who.role, Role::kOperator);

  next.anonymous_read = false;
  auth_.Replace(next);
  EXPECT_EQ(authorizer_.Authorize({"GET", "", "", ""}, Role::kViewer).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth_.Holder(HexEncode(Sha256(kViewerToken)))->role, Role::kOperator);
  EXPECT_FALSE(auth_.Holder(HexEncode(Sha256(kOperatorToken))).has_value());
}

TEST_F(WebSessionsTest, AnonymousReadsWhenAllowed) {
  absl::StatusOr<RequestIdentity> who =
      authorizer_.Authorize({"GET", "", "", ""}, Role::kViewer);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->via, "anonymous");
  EXPECT_EQ(who->who.name, "anonymous");
  // A cookie header without the session cookie is no session.
  EXPECT_EQ(authorizer_.Authorize({"GET", "", "theme=dark", ""}, Role::kViewer)->via,
            "anonymous");
  EXPECT_EQ(authorizer_.Authorize({"POST", "", "", ""}, Role::kOperator).status().code(),
            absl::StatusCode::kUnauthenticated);
}

class NoAnonymousTest : public WebSessionsTest {
 protected:
  NoAnonymousTest() : WebSessionsTest(WebSessionOptions(), false) {}
};

TEST_F(NoAnonymousTest, ReadsNeedATokenOrSession) {
  EXPECT_EQ(authorizer_.Authorize({"GET", "", "", ""}, Role::kViewer).status().code(),
            absl::StatusCode::kUnauthenticated);
  NewSession s = MustSignIn(kViewerToken);
  EXPECT_TRUE(WithCookie("GET", Cookie(s), "", Role::kViewer).ok());
  // An ended session reads nothing here.
  authorizer_.SignOut(Cookie(s));
  EXPECT_EQ(Via(Cookie(s)), "UNAUTHENTICATED");
}

TEST_F(WebSessionsTest, EndedSessionCannotWrite) {
  NewSession s = MustSignIn(kOperatorToken);
  authorizer_.SignOut(Cookie(s));
  EXPECT_EQ(WithCookie("POST", Cookie(s), s.csrf, Role::kOperator).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(WithCookie("POST", Cookie(s), s.csrf, Role::kViewer).status().code(),
            absl::StatusCode::kUnauthenticated);
}

class ExpiryTest : public WebSessionsTest {
 protected:
  static WebSessionOptions Short() {
    WebSessionOptions o;
    o.idle_seconds = 100;
    o.max_seconds = 250;
    return o;
  }
  ExpiryTest() : WebSessionsTest(Short()) {}
};

TEST_F(ExpiryTest, IdleSessionEnds) {
  NewSession s = MustSignIn(kViewerToken);
  clock_.Advance(100);  // exactly the idle time: still alive
  EXPECT_TRUE(WithCookie("GET", Cookie(s), "", Role::kViewer).ok());
  clock_.Advance(101);  // the use above restarted the idle time
  EXPECT_EQ(Via(Cookie(s)), "anonymous");
  EXPECT_EQ(authorizer_.session_count(), 0u);
}

TEST_F(ExpiryTest, FailedWriteDoesNotKeepTheSessionAlive) {
  NewSession s = MustSignIn(kOperatorToken);
  clock_.Advance(90);
  EXPECT_FALSE(WithCookie("POST", Cookie(s), "", Role::kOperator).ok());
  clock_.Advance(20);
  EXPECT_EQ(Via(Cookie(s)), "anonymous");
}

TEST_F(ExpiryTest, SessionEndsAtMaxAgeEvenWhenUsed) {
  NewSession s = MustSignIn(kViewerToken);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(50);  // 50 .. 250: used every 50 s
    EXPECT_TRUE(WithCookie("GET", Cookie(s), "", Role::kViewer).ok()) << i;
  }
  clock_.Advance(1);  // 251 s after sign-in
  EXPECT_EQ(Via(Cookie(s)), "anonymous");
}

TEST_F(ExpiryTest, SignInDropsExpiredSessions) {
  MustSignIn(kViewerToken);
  MustSignIn(kViewerToken);
  clock_.Advance(101);
  EXPECT_EQ(authorizer_.session_count(), 2u);  // dropped lazily
  MustSignIn(kViewerToken);
  EXPECT_EQ(authorizer_.session_count(), 1u);
}

TEST_F(WebSessionsTest, SignOutEndsOnlyThatSession) {
  NewSession a = MustSignIn(kViewerToken);
  NewSession b = MustSignIn(kViewerToken);
  authorizer_.SignOut("theme=dark; " + Cookie(a));
  EXPECT_EQ(Via(Cookie(a)), "anonymous");
  EXPECT_TRUE(WithCookie("GET", Cookie(b), "", Role::kViewer).ok());
  authorizer_.SignOut("");             // no cookie: no-op
  authorizer_.SignOut("vigil_session=unknown");
  EXPECT_EQ(authorizer_.session_count(), 1u);
}

class EvictionTest : public WebSessionsTest {
 protected:
  static WebSessionOptions Two() {
    WebSessionOptions o;
    o.max_sessions = 2;
    return o;
  }
  EvictionTest() : WebSessionsTest(Two()) {}
};

TEST_F(EvictionTest, FullTableEndsTheLeastRecentlyUsed) {
  NewSession a = MustSignIn(kViewerToken);
  clock_.Advance(1);
  NewSession b = MustSignIn(kViewerToken);
  clock_.Advance(1);
  ASSERT_TRUE(WithCookie("GET", Cookie(a), "", Role::kViewer).ok());  // a is newer now
  clock_.Advance(1);
  NewSession c = MustSignIn(kViewerToken);
  EXPECT_EQ(authorizer_.session_count(), 2u);
  EXPECT_TRUE(WithCookie("GET", Cookie(a), "", Role::kViewer).ok());
  EXPECT_EQ(Via(Cookie(b)), "anonymous");
  EXPECT_TRUE(WithCookie("GET", Cookie(c), "", Role::kViewer).ok());
}

TEST(AuthorizerWithoutAuthTest, EveryoneIsLocalAdminAndSignInFails) {
  FakeClock clock;
  RequestAuthorizer authorizer(nullptr, &clock);
  absl::StatusOr<RequestIdentity> who =
      authorizer.Authorize({"POST", "", "", ""}, Role::kAdmin);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->who.role, Role::kAdmin);
  EXPECT_EQ(authorizer.SignIn("x").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CookieValueTest, FindsTheNamedCookie) {
  EXPECT_EQ(CookieValue("vigil_session=abc", "vigil_session"), "abc");
  EXPECT_EQ(CookieValue("a=1; vigil_session=abc; b=2", "vigil_session"), "abc");
  EXPECT_EQ(CookieValue("a=1;vigil_session=abc", "vigil_session"), "abc");
  EXPECT_EQ(CookieValue("a=1;   vigil_session=abc;", "vigil_session"), "abc");
  EXPECT_EQ(CookieValue("a=1; b=2", "vigil_session"), "");
  EXPECT_EQ(CookieValue("", "vigil_session"), "");
  EXPECT_EQ(CookieValue("vigil_session", "vigil_session"), "");
  EXPECT_EQ(CookieValue("vigil_session=", "vigil_session"), "");
  // Names that merely contain or start with it are other cookies.
  EXPECT_EQ(CookieValue("xvigil_session=bad; vigil_session=good", "vigil_session"),
            "good");
  EXPECT_EQ(CookieValue("vigil_session_old=bad", "vigil_session"), "");
  EXPECT_EQ(CookieValue("xvigil_session=bad", "vigil_session"), "");
  // The value may hold '='.
  EXPECT_EQ(CookieValue("t=a=b; vigil_session=c", "t"), "a=b");
}

}  // namespace
}  // namespace vigil

namespace vigil {
namespace {

// Tokens cannot be guessed at speed: after 10 failures in a minute an
// address is refused (429) before its token is checked, even a right one;
// other addresses still sign in, until everyone together failed 1,000 times.
TEST_F(WebSessionsTest, FailedSignInsAreRateLimited) {
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(absl::IsUnauthenticated(
        authorizer_.SignIn("guess-" + std::to_string(i), "10.0.0.9").status()));
  }
  absl::StatusOr<NewSession> refused = authorizer_.SignIn(kOperatorToken, "10.0.0.9");
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("from this address"), std::string::npos);
  EXPECT_TRUE(authorizer_.SignIn(kOperatorToken, "10.0.0.10").ok());
  clock_.Advance(61);
  EXPECT_TRUE(authorizer_.SignIn(kOperatorToken, "10.0.0.9").ok());
  // Many addresses together.
  for (int i = 0; i < 1000; ++i)
    (void)authorizer_.SignIn("guess", "10.1." + std::to_string(i / 8) + "." +
                                          std::to_string(i % 8));
  EXPECT_TRUE(absl::IsResourceExhausted(
      authorizer_.SignIn(kOperatorToken, "10.2.0.1").status()));
}

// Two servers of a fleet sharing a peer secret: a session's holder on one
// is vouched for on the other (a request passed on to another shard).
class DelegationTest : public ::testing::Test {
 protected:
  static WebSessionOptions WithSecret(const std::string& secret) {
    WebSessionOptions options;
    options.peer_secret = secret;
    return options;
  }
  DelegationTest()
      : auth_(TwoTokens(/*anonymous_read=*/false)),
        here_(&auth_, &clock_, WithSecret("fleet-secret")),
        there_(&auth_, &clock_, WithSecret("fleet-secret")),
        stranger_(&auth_, &clock_, WithSecret("another-secret")),
        no_secret_(&auth_, &clock_) {}

  // What server `to` makes of a POST carrying `vouched`.
  absl::StatusOr<RequestIdentity> Receive(RequestAuthorizer& to, const std::string& vouched,
                                          Role needed) {
    return to.Authorize({"POST", "", "", "", vouched}, needed);
  }

  FakeClock clock_;
  Authenticator auth_;
  RequestAuthorizer here_, there_, stranger_, no_secret_;
};

TEST_F(DelegationTest, ASessionHolderIsVouchedForOnAnotherServer) {
  const std::string vouched = here_.Delegate({"olga", Role::kOperator}, "s0/a");
  ASSERT_FALSE(vouched.empty());
  absl::StatusOr<RequestIdentity> who = Receive(there_, vouched, Role::kOperator);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->via, "delegated");
  EXPECT_EQ(who->who.name, "olga (via s0/a)");
  EXPECT_EQ(who->who.role, Role::kOperator);
  // The role travels with it and is checked: no CSRF token is needed (the
  // first server checked the session's).
  EXPECT_EQ(Receive(there_, vouched, Role::kAdmin).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A bearer token still wins.
  absl::StatusOr<RequestIdentity> token =
      there_.Authorize({"GET", std::string("Bearer ") + kViewerToken, "", "", vouched},
                       Role::kViewer);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->who.name, "vic");
}

TEST_F(DelegationTest, ForgedStaleOrUncheckableIdentitiesAreRefused) {
  const std::string vouched = here_.Delegate({"vic", Role::kViewer}, "s0/a");
  auto code = [&](RequestAuthorizer& to, const std::string& header) {
    return Receive(to, header, Role::kViewer).status().code();
  };
  EXPECT_EQ(code(stranger_, vouched), absl::StatusCode::kUnauthenticated) << "another fleet";
  EXPECT_EQ(code(no_secret_, vouched), absl::StatusCode::kUnauthenticated) << "no secret here";
  EXPECT_TRUE(no_secret_.Delegate({"vic", Role::kViewer}, "s0/a").empty());
  // The viewer made admin, or renamed: the signature no longer matches.
  std::string promoted = vouched;
  promoted.replace(promoted.find(".viewer."), 8, ".admin.");
  EXPECT_EQ(code(there_, promoted), absl::StatusCode::kUnauthenticated);
  for (const std::string& junk : {std::string("v1"), std::string("v2.1.viewer.a.b.c"),
                                  std::string("v1.x.viewer.dmlj.czA.00"), vouched + ".more"}) {
    EXPECT_EQ(code(there_, junk), absl::StatusCode::kUnauthenticated) << junk;
  }
  // A minute later it is stale.
  EXPECT_TRUE(Receive(there_, vouched, Role::kViewer).ok());
  clock_.Advance(61);
  absl::Status stale = Receive(there_, vouched, Role::kViewer).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(stale.message().find("expired"), std::string::npos) << stale;
}


// Cluster mode: two servers share their sessions through a store (etcd in
// the server; a map here, handed over whole as a watch does).
class SharedSessionsTest : public ::testing::Test {
 protected:
  WebSessionOptions Sharing() {
    WebSessionOptions options;
    options.idle_seconds = 3600;
    options.max_seconds = 86400;
    options.share = [this](const std::string& key, const std::string& record, double keep) {
      store_[key] = record;
      keep_ = keep;
    };
    return options;
  }
  SharedSessionsTest()
      : auth_(TwoTokens(/*anonymous_read=*/false)),
        a_(&auth_, &clock_, Sharing()),
        b_(&auth_, &clock_, Sharing()) {}

  // The watch: every server reads every record.
  void Sync() {
    std::vector<std::pair<std::string, std::string>> all(store_.begin(), store_.end());
    EXPECT_EQ(a_.AdoptSharedSessions(all), 0);
    EXPECT_EQ(b_.AdoptSharedSessions(all), 0);
  }

  FakeClock clock_;
  Authenticator auth_;
  std::map<std::string, std::string> store_;
  double keep_ = 0;
  RequestAuthorizer a_, b_;
};

// A session opened on one server holds on the other (a load balancer, or
// its server died), with its role and its CSRF token; signing out on
// either ends it on both.
TEST_F(SharedSessionsTest, ASessionOpenedOnOneServerHoldsOnTheOther) {
  absl::StatusOr<NewSession> s = a_.SignIn(kOperatorToken);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(store_.size(), 1u);
  EXPECT_EQ(keep_, 86400);
  EXPECT_EQ(store_.begin()->first, HexEncode(Sha256(s->id))) << "the id itself is not shared";
  EXPECT_EQ(store_.begin()->second.find(s->id), std::string::npos);
  const std::string cookie = Cookie(*s);
  EXPECT_EQ(b_.Authorize({"GET", "", cookie, ""}, Role::kViewer).status().code(),
            absl::StatusCode::kUnauthenticated)
      << "unknown before the watch delivers it";
  Sync();
  absl::StatusOr<RequestIdentity> who = b_.Authorize({"POST", "", cookie, s->csrf}, Role::kOperator);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->via, "session");
  EXPECT_EQ(who->who.name, "olga");
  EXPECT_EQ(b_.Authorize({"POST", "", cookie, "wrong"}, Role::kOperator).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(b_.Authorize({"POST", "", cookie, s->csrf}, Role::kAdmin).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Signed out on b: a forgets it at the next watch.
  b_.SignOut(cookie);
  EXPECT_FALSE(b_.Authorize({"GET", "", cookie, ""}, Role::kViewer).ok());
  Sync();
  EXPECT_FALSE(a_.Authorize({"GET", "", cookie, ""}, Role::kViewer).ok());
}

// A shared session still ends at its maximum age from sign-in, and idles
// out on each server on its own.
TEST_F(SharedSessionsTest, SharedSessionsExpireAsTheirOwn) {
  absl::StatusOr<NewSession> s = a_.SignIn(kViewerToken);
  ASSERT_TRUE(s.ok());
  Sync();
  clock_.Advance(86400 + 1);
  EXPECT_FALSE(b_.Authorize({"GET", "", Cookie(*s), ""}, Role::kViewer).ok());
}

// Records that are not sessions are skipped and counted; the others still
// count.
TEST_F(SharedSessionsTest, MalformedRecordsAreSkipped) {
  absl::StatusOr<NewSession> s = a_.SignIn(kViewerToken);
  ASSERT_TRUE(s.ok());
  std::vector<std::pair<std::string, std::string>> records(store_.begin(), store_.end());
  const std::string key(64, 'a');
  records.push_back({"not-a-key", store_.begin()->second});
  records.push_back({key, "not json"});
  records.push_back({key, R"({"name":"eve","role":"root","csrf":"00","created":1})"});
  records.push_back({key, R"({"name":"","role":"admin","csrf":"00","created":1})"});
  records.push_back(
      {key, R"({"name":"eve","role":"admin","csrf":")" + std::string(64, '0') +
                R"(","created":1,"token":"not-a-hash"})"});
  EXPECT_EQ(b_.AdoptSharedSessions(records), 5);
  EXPECT_TRUE(b_.Authorize({"GET", "", Cookie(*s), ""}, Role::kViewer).ok());
}

// The shared record names the token that signed in, so a session adopted
// by another server ends there too once a reload removed the token.
TEST_F(SharedSessionsTest, AReloadThatRemovesTheTokenEndsTheSessionOnEveryServer) {
  absl::StatusOr<NewSession> s = a_.SignIn(kOperatorToken);
  ASSERT_TRUE(s.ok());
  EXPECT_NE(store_.begin()->second.find(HexEncode(Sha256(kOperatorToken))), std::string::npos);
  Sync();
  ASSERT_TRUE(b_.Authorize({"POST", "", Cookie(*s), s->csrf}, Role::kOperator).ok());
  AuthOptions next = TwoTokens(/*anonymous_read=*/false);
  next.tokens.pop_back();  // olga's
  auth_.Replace(next);
  EXPECT_EQ(b_.Authorize({"POST", "", Cookie(*s), s->csrf}, Role::kOperator).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a_.Authorize({"GET", "", Cookie(*s), ""}, Role::kViewer).status().code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace vigil
