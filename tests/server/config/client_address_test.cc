#include "server/config/client_address.h"

#include <gtest/gtest.h>

namespace vigil {
namespace {

TrustedProxies Trust(const std::vector<std::string>& entries) {
  absl::StatusOr<TrustedProxies> p = TrustedProxies::Parse(entries);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : TrustedProxies();
}

TEST(TrustedProxiesTest, MatchesAddressesAndNetworksOfBothFamilies) {
  TrustedProxies p = Trust({"10.0.0.0/8", "192.0.2.7", "fd00::/8", "::1"});
  EXPECT_TRUE(p.Contains("10.200.3.4"));
  EXPECT_TRUE(p.Contains("::ffff:10.1.2.3"));  // a dual-stack socket's spelling
  EXPECT_TRUE(p.Contains("192.0.2.7"));
  EXPECT_FALSE(p.Contains("192.0.2.8"));
  EXPECT_FALSE(p.Contains("11.0.0.1"));
  EXPECT_TRUE(p.Contains("fd12:3456::1"));
  EXPECT_TRUE(p.Contains("::1"));
  EXPECT_FALSE(p.Contains("fe80::1"));
  EXPECT_FALSE(p.Contains("not-an-address"));
  EXPECT_FALSE(p.Contains(""));
  EXPECT_FALSE(TrustedProxies().Contains("127.0.0.1"));
  // Prefix lengths that are not whole bytes.
  TrustedProxies odd = Trust({"172.16.0.0/12"});
  EXPECT_TRUE(odd.Contains("172.31.255.255"));
  EXPECT_FALSE(odd.Contains("172.32.0.0"));
}

TEST(TrustedProxiesTest, BadEntriesAreRefusedByName) {
  for (const std::string bad : {"10.0.0.0/33", "::/129", "10.0.0.0/x", "host.example",
                                "10.0.0.1:80", "[::1]", "", "10.0.0.0/-1"}) {
    absl::StatusOr<TrustedProxies> p = TrustedProxies::Parse({"127.0.0.1", bad});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
    EXPECT_NE(p.status().message().find("\"" + bad + "\""), std::string::npos)
        << p.status();
  }
}

TEST(TrustedProxiesTest, TheClientIsTheFirstUntrustedHopFromTheRight) {
  TrustedProxies p = Trust({"10.0.0.0/8"});
  // One proxy: the header's only entry.
  EXPECT_EQ(p.ClientOf("10.0.0.5", "192.0.2.1"), "192.0.2.1");
  // Two proxies, and whatever the client itself wrote first is not believed.
  EXPECT_EQ(p.ClientOf("10.0.0.5", "6.6.6.6, 192.0.2.1, 10.0.0.9"), "192.0.2.1");
  // Ports and brackets as some proxies write them; canonical spelling.
  EXPECT_EQ(p.ClientOf("10.0.0.5", "192.0.2.1:5555"), "192.0.2.1");
  EXPECT_EQ(p.ClientOf("10.0.0.5", "[2001:DB8:0::1]:443"), "2001:db8::1");
  // Every hop a proxy: the leftmost.
  EXPECT_EQ(p.ClientOf("10.0.0.5", "10.1.1.1, 10.2.2.2"), "10.1.1.1");
}

TEST(TrustedProxiesTest, AnyoneElsesHeaderIsIgnored) {
  TrustedProxies p = Trust({"10.0.0.0/8"});
  EXPECT_EQ(p.ClientOf("192.0.2.50", "10.0.0.1"), "192.0.2.50");
  EXPECT_EQ(p.ClientOf("10.0.0.5", ""), "10.0.0.5");
  EXPECT_EQ(TrustedProxies().ClientOf("127.0.0.1", "192.0.2.1"), "127.0.0.1");
  // A malformed hop: the nearest trusted proxy stands for the client.
  EXPECT_EQ(p.ClientOf("10.0.0.5", "garbage"), "10.0.0.5");
  EXPECT_EQ(p.ClientOf("10.0.0.5", "192.0.2.1, junk, 10.0.0.7"), "10.0.0.7");
}

}  // namespace
}  // namespace vigil
