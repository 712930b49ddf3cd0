#include "server/cluster/shard_map.h"
#include "server/cluster/ownership.h"
#include "server/cluster/fanout.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace vigil::cluster {
namespace {

Member M(std::string shard, std::string replica) {
  return Member{shard, replica, absl::StrCat(shard, replica, ":50051"),
                absl::StrCat("http://", shard, replica, ":8080")};
}

std::vector<std::string> Families(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(absl::StrCat("llama-", i, "b"));
  return out;
}

// Incident and action ids of cluster mode name their shard (the API sends
// a request about one to that shard); other ids name none.
TEST(ShardNamedByTest, IdsOfClusterModeNameTheirShard) {
  EXPECT_EQ(ShardNamedBy("inc-s0-000042"), "s0");
  EXPECT_EQ(ShardNamedBy("act-rack-7.b-000001"), "rack-7.b");
  EXPECT_EQ(ShardNamedBy("act-s1~b-000007"), "s1");
  EXPECT_EQ(ShardNamedBy("act-rack-7.b~a-000001"), "rack-7.b");
  EXPECT_EQ(ShardNamedBy("inc-000042"), "");
  EXPECT_EQ(ShardNamedBy("inc-s0-"), "");
  EXPECT_EQ(ShardNamedBy("inc-s0-12x"), "");
  EXPECT_EQ(ShardNamedBy("sil-s0~a-000001"), "");
  EXPECT_EQ(ShardNamedBy(""), "");
}

TEST(ShardMapTest, EmptyMapOwnsNothing) {
  ShardMap map;
  EXPECT_EQ(map.OwnerOfFamily("llama"), "");
  EXPECT_EQ(map.OwnerOfIdleNode("n001"), "");
  EXPECT_TRUE(map.shards().empty());
}

TEST(ShardMapTest, SameMembersSameMapWhateverTheOrder) {
  ShardMap a({M("s0", "a"), M("s1", "a"), M("s0", "b"), M("s1", "b")});
  ShardMap b({M("s1", "b"), M("s0", "b"), M("s1", "a"), M("s0", "a"), M("s0", "a")});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.shards(), (std::vector<std::string>{"s0", "s1"}));
  ASSERT_EQ(a.MembersOf("s0").size(), 2u);
  EXPECT_EQ(a.MembersOf("s0")[1].replica, "b");
  for (const std::string& family : Families(200)) {
    EXPECT_EQ(a.OwnerOfFamily(family), b.OwnerOfFamily(family));
  }
}

TEST(ShardMapTest, ReplicasDoNotChangeOwnership) {
  ShardMap one({M("s0", "a"), M("s1", "a")});
  ShardMap both({M("s0", "a"), M("s0", "b"), M("s1", "a"), M("s1", "b")});
  for (const std::string& family : Families(500)) {
    EXPECT_EQ(one.OwnerOfFamily(family), both.OwnerOfFamily(family)) << family;
  }
}

TEST(ShardMapTest, FamiliesSpreadEvenly) {
  ShardMap map({M("s0", "a"), M("s1", "a"), M("s2", "a"), M("s3", "a")});
  std::map<std::string, int> count;
  for (const std::string& family : Families(8000)) ++count[map.OwnerOfFamily(family)];
  ASSERT_EQ(count.size(), 4u);
  for (const auto& [shard, n] : count) {
    EXPECT_GT(n, 1700) << shard;
    EXPECT_LT(n, 2300) << shard;
  }
}

TEST(ShardMapTest, AJoiningShardTakesOnlyWhatItWins) {
  ShardMap before({M("s0", "a"), M("s1", "a")});
  ShardMap after({M("s0", "a"), M("s1", "a"), M("s2", "a")});
  int moved = 0;
  for (const std::string& family : Families(3000)) {
    const std::string old_owner = before.OwnerOfFamily(family);
    const std::string new_owner = after.OwnerOfFamily(family);
    if (old_owner != new_owner) {
      EXPECT_EQ(new_owner, "s2") << family << " moved between old shards";
      ++moved;
    }
  }
  EXPECT_GT(moved, 800);   // about a third
  EXPECT_LT(moved, 1200);
}

TEST(ShardMapTest, ALeavingShardGivesAwayOnlyItsOwn) {
  ShardMap before({M("s0", "a"), M("s1", "a"), M("s2", "a")});
  ShardMap after({M("s0", "a"), M("s2", "a")});
  for (const std::string& family : Families(3000)) {
    const std::string old_owner = before.OwnerOfFamily(family);
    if (old_owner != "s1") EXPECT_EQ(after.OwnerOfFamily(family), old_owner) << family;
    EXPECT_NE(after.OwnerOfFamily(family), "s1");
  }
  EXPECT_NE(after.OwnerOfIdleNode("n001"), "s1");
}

TEST(ShardMapTest, MemberRecordsRoundTripAndBadOnesAreRefused) {
  const Member member = M("s0", "vigil-s0-1");
  absl::StatusOr<Member> back = DecodeMember(EncodeMember(member));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, member);
  EXPECT_FALSE(DecodeMember("not json").ok());
  EXPECT_FALSE(DecodeMember(R"({"shard": "s0", "replica": "a", "grpc": 5, "http": ""})").ok());
  EXPECT_FALSE(DecodeMember(R"({"shard": "", "replica": "a", "grpc": "", "http": ""})").ok());
}

}  // namespace
}  // namespace vigil::cluster

namespace vigil::cluster {
namespace {

constexpr char kFamilyPattern[] = R"(^(.*[^-_.])[-_.](?:r|run|attempt|retry|restart)\d+$)";

TEST(OwnershipTest, EverythingIsOursUntilWeAreInTheMap) {
  Ownership ownership("s0", kFamilyPattern);
  EXPECT_TRUE(ownership.Owner("llama-r1", "n1").ours);
  ownership.SetMap(ShardMap({M("s1", "a")}));  // we are not registered (yet)
  EXPECT_TRUE(ownership.Owner("llama-r1", "n1").ours);
}

TEST(OwnershipTest, AResumedJobStaysWithItsFamilyAndOwnersAreThePair) {
  Ownership ownership("s0", kFamilyPattern);
  const uint64_t before = ownership.version();
  ShardMap map({M("s0", "a"), M("s0", "b"), M("s1", "a"), M("s1", "b")});
  ownership.SetMap(map);
  EXPECT_NE(ownership.version(), before);
  int ours = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string family = absl::StrCat("gpt-", i);
    Ownership::Answer first = ownership.Owner(absl::StrCat(family, "-r1"), "n1");
    Ownership::Answer resumed = ownership.Owner(absl::StrCat(family, "-r2"), "n1");
    EXPECT_EQ(first.shard, resumed.shard) << family;
    EXPECT_EQ(first.shard, map.OwnerOfFamily(family));
    EXPECT_EQ(first.ours, first.shard == "s0");
    ASSERT_EQ(first.owners.size(), 2u);
    EXPECT_EQ(first.owners[0], absl::StrCat(first.shard, "a:50051"));
    ours += first.ours;
  }
  EXPECT_GT(ours, 25);
  EXPECT_LT(ours, 75);
  EXPECT_EQ(ownership.OwnMembers(), (std::vector<std::string>{"s0a:50051", "s0b:50051"}));
  // Idle nodes are placed by name.
  EXPECT_EQ(ownership.Owner("", "n7").shard, map.OwnerOfIdleNode("n7"));
}

TEST(OwnershipTest, AMovedJobsPreviousOwnersAreFound) {
  // s2 joins s0 and s1: the jobs it wins were s0's or s1's.
  Ownership newcomer("s2", kFamilyPattern);
  ShardMap before({M("s0", "a"), M("s0", "b"), M("s1", "a")});
  ShardMap after({M("s0", "a"), M("s0", "b"), M("s1", "a"), M("s2", "a")});
  newcomer.SetMap(after);
  int moved = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string job = absl::StrCat("job", i, "-r1");
    if (!newcomer.Owner(job, "n").ours) continue;
    ++moved;
    const std::vector<std::string> from = newcomer.PreviousOwnersHttp(job);
    const std::string old_shard = before.OwnerOfFamily(absl::StrCat("job", i));
    ASSERT_FALSE(from.empty()) << job;
    EXPECT_EQ(from.front(), absl::StrCat("http://", old_shard, "a:8080")) << job;
    if (old_shard == "s0") EXPECT_EQ(from.size(), 2u) << "both members of the pair";
  }
  EXPECT_GT(moved, 5);
  // A whole pair lost: its jobs have no previous owner left to ask.
  Ownership survivor("s0", kFamilyPattern);
  survivor.SetMap(ShardMap({M("s0", "a"), M("s1", "a")}));
  survivor.SetMap(ShardMap({M("s0", "a")}));
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(survivor.PreviousOwnersHttp(absl::StrCat("job", i, "-r1")).empty());
  }
}

// A job's successors are the members of the shard it moves to when its
// owner's pair is lost: where the owner keeps copies of its baselines.
TEST(OwnershipTest, AJobsSuccessorsAreWhereItGoesWhenItsPairIsLost) {
  const std::vector<Member> all = {M("s0", "a"), M("s0", "b"), M("s1", "a"), M("s1", "b"),
                                   M("s2", "a")};
  Ownership s0("s0", kFamilyPattern);
  s0.SetMap(ShardMap(all));
  Ownership s1("s1", kFamilyPattern);
  s1.SetMap(ShardMap(all));
  std::vector<Member> without_s0;
  for (const Member& m : all) {
    if (m.shard != "s0") without_s0.push_back(m);
  }
  Ownership survivor("s1", kFamilyPattern);
  survivor.SetMap(ShardMap(without_s0));
  int checked = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string job = absl::StrCat("job", i, "-r1");
    if (!s0.Owner(job, "n").ours) continue;
    ++checked;
    const std::vector<std::string> successors = s0.SuccessorsHttp(job);
    const std::string after = survivor.Owner(job, "n").shard;
    ASSERT_FALSE(successors.empty()) << job;
    EXPECT_EQ(successors.front(), absl::StrCat("http://", after, "a:8080")) << job;
    EXPECT_EQ(successors.size(), after == "s1" ? 2u : 1u) << "every member of the pair";
    // Another incarnation of the family has the same successors.
    EXPECT_EQ(s0.SuccessorsHttp(absl::StrCat("job", i, "-r2")), successors);
  }
  EXPECT_GT(checked, 5);
  Ownership alone("s0", kFamilyPattern);
  alone.SetMap(ShardMap({M("s0", "a"), M("s0", "b")}));
  EXPECT_TRUE(alone.SuccessorsHttp("job1-r1").empty());
}

TEST(OwnershipTest, ANewMapInvalidatesCachedAnswers) {
  Ownership ownership("s0", kFamilyPattern);
  ownership.SetMap(ShardMap({M("s0", "a")}));
  EXPECT_TRUE(ownership.Owner("job-x", "n1").ours);
  ShardMap bigger({M("s0", "a"), M("s1", "a"), M("s2", "a")});
  ownership.SetMap(bigger);
  EXPECT_EQ(ownership.Owner("job-x", "n1").shard, bigger.OwnerOfFamily("job-x"));
}

}  // namespace
}  // namespace vigil::cluster
