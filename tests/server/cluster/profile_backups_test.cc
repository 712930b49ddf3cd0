#include "server/cluster/profile_backups.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "notify/signing.h"
#include "server/cluster/ownership.h"
#include "server/cluster/shard_map.h"

namespace vigil::cluster {
namespace {

// The latest copy of a job is kept; past the byte budget the copies
// received longest ago go first; one larger than the budget is refused.
TEST(ProfileBackupsTest, KeepsTheLatestCopiesWithinItsBudget) {
  ProfileBackups backups(/*max_bytes=*/100);
  ASSERT_TRUE(backups.Hold("a", std::string(40, 'a')).ok());
  ASSERT_TRUE(backups.Hold("b", std::string(40, 'b')).ok());
  ASSERT_TRUE(backups.Hold("a", std::string(30, 'A')).ok());  // a is now the newest
  EXPECT_EQ(backups.Find("a"), std::string(30, 'A'));
  EXPECT_EQ(backups.bytes(), 70u);
  ASSERT_TRUE(backups.Hold("c", std::string(50, 'c')).ok());  // b goes
  EXPECT_FALSE(backups.Find("b").has_value());
  EXPECT_TRUE(backups.Find("a").has_value());
  EXPECT_TRUE(backups.Find("c").has_value());
  EXPECT_EQ(backups.jobs(), 2u);
  EXPECT_EQ(backups.bytes(), 80u);
  EXPECT_EQ(backups.Hold("d", std::string(101, 'd')).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(backups.jobs(), 2u) << "nothing dropped for a refused copy";
  EXPECT_FALSE(backups.Find("nobody").has_value());
}

// A peer request is accepted only signed with the fleet's secret, for the
// same method, target and body, within the window; a server without a
// secret takes none.
TEST(ProfileBackupsTest, PeerRequestsMustBeSignedForWhatTheyCarry) {
  const std::string secret = "fleet-secret";
  const double now = 1'800'000'000;
  const std::string ts = "1800000000";
  const std::string target = "/api/v1/cluster/profiles?job=j1";
  const std::string sig =
      SignWebhook(secret, 1'800'000'000, PeerRequestMessage("POST", target, "body"));
  EXPECT_TRUE(VerifyPeerRequest(secret, ts, sig, "POST", target, "body", now).ok());
  EXPECT_TRUE(VerifyPeerRequest(secret, ts, sig, "POST", target, "body", now + 59).ok());
  EXPECT_EQ(VerifyPeerRequest(secret, ts, sig, "POST", target, "body", now + 61).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(VerifyPeerRequest(secret, ts, sig, "POST", target, "bodY", now).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyPeerRequest(secret, ts, sig, "POST", target + "2", "body", now).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyPeerRequest(secret, ts, sig, "GET", target, "body", now).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyPeerRequest("other", ts, sig, "POST", target, "body", now).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyPeerRequest("", ts, sig, "POST", target, "body", now).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyPeerRequest(secret, ts, "", "POST", target, "body", now).code(),
            absl::StatusCode::kUnauthenticated);
}

// Records what is sent; answers 200 unless the URL is in `refuse`.
class RecordingTransport : public Transport {
 public:
  TransportResult Send(const OutboundRequest& request, double) override {
    sent.push_back(request);
    TransportResult result;
    result.http_status = refuse.count(request.url) > 0 ? 503 : 200;
    return result;
  }
  std::vector<OutboundRequest> sent;
  std::map<std::string, bool> refuse;
};

std::string Header(const OutboundRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

// The sender gives each job's export to both members of its successor,
// signed; sends it again only when it changed, when a successor did not
// take it, or every resend_every_calls calls; skips jobs of other shards
// and exports that hold no profile.
TEST(ProfileSenderTest, SendsWhatChangedToTheSuccessorsSigned) {
  const std::string kFamily = R"(^(.*[^-_.])[-_.](?:r|run|attempt|retry|restart)\d+$)";
  Ownership own("s0", kFamily);
  own.SetMap(ShardMap({Member{"s0", "a", "s0a:1", "http://s0a"},
                       Member{"s1", "a", "s1a:1", "http://s1a"},
                       Member{"s1", "b", "s1b:1", "http://s1b"}}));
  std::vector<std::string> ours, theirs;
  for (int i = 0; i < 40 && (ours.size() < 3 || theirs.empty()); ++i) {
    const std::string job = absl::StrCat("job", i, "-r1");
    (own.Owner(job, "").ours ? ours : theirs).push_back(job);
  }
  ASSERT_GE(ours.size(), 3u);
  ASSERT_FALSE(theirs.empty());
  std::map<std::string, std::string> exports;
  for (const std::string& job : ours) exports[job] = "profiles of " + job;
  exports[ours[2]] = "e";  // holds no profile
  exports[theirs[0]] = "profiles of someone else's job";
  RecordingTransport transport;
  ProfileSender sender(ProfileSenderOptions{
      .ownership = &own,
      .transport = &transport,
      .peer_secret = "fleet-secret",
      .export_profiles = [&](const std::string& job) { return exports[job]; },
      .empty_bytes = 1,
      .resend_every_calls = 4});
  std::vector<std::string> jobs = ours;
  jobs.push_back(theirs[0]);
  const double now = 1'800'000'000;

  EXPECT_EQ(sender.SendChanged(jobs, now), 4);  // 2 jobs x 2 members
  ASSERT_EQ(transport.sent.size(), 4u);
  for (const OutboundRequest& r : transport.sent) {
    EXPECT_EQ(r.method, "POST");
    EXPECT_TRUE(r.url.starts_with("http://s1a/api/v1/cluster/profiles?job=") ||
                r.url.starts_with("http://s1b/api/v1/cluster/profiles?job="))
        << r.url;
    const std::string job = r.url.substr(r.url.find("job=") + 4);
    EXPECT_EQ(r.body, exports[job]);
    EXPECT_TRUE(VerifyPeerRequest("fleet-secret", Header(r, kPeerTimestampHeader),
                                  Header(r, kPeerSignatureHeader), "POST",
                                  ProfilesTarget(job), r.body, now)
                    .ok())
        << r.url;
  }
  transport.sent.clear();
  EXPECT_EQ(sender.SendChanged(jobs, now + 60), 0) << "nothing changed";

  exports[ours[0]] = "more learned of " + ours[0];
  exports[ours[1]] = "more learned of " + ours[1];
  transport.refuse["http://s1b/api/v1/cluster/profiles?job=" + ours[0]] = true;
  transport.sent.clear();
  std::vector<std::string> errors;
  // s1a takes both; s1b refuses the first and is not asked again this round.
  EXPECT_EQ(sender.SendChanged(jobs, now + 120, &errors), 2);
  EXPECT_EQ(transport.sent.size(), 3u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("HTTP 503"), std::string::npos) << errors[0];
  transport.refuse.clear();
  transport.sent.clear();
  // The fourth call sends everything again, the refused copy included.
  EXPECT_EQ(sender.SendChanged(jobs, now + 180), 4);
  EXPECT_EQ(transport.sent.size(), 4u);
}

}  // namespace
}  // namespace vigil::cluster
