#include "server/cluster/profile_backups.h"

#include <string>

#include "gtest/gtest.h"
#include "notify/signing.h"

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

}  // namespace
}  // namespace vigil::cluster
