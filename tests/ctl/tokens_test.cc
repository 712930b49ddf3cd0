#include "ctl/tokens.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "ctl/ctl.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vigil::ctl {
namespace {

constexpr char kAbcSha256[] =
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs a local command; the transport must never be asked for.
Result RunLocal(const std::vector<std::string>& args, Dependencies deps = {}) {
  FakeClock clock;
  deps.clock = &clock;
  deps.connect = [](const TransportOptions&)
      -> absl::StatusOr<std::unique_ptr<HttpTransport>> {
    ADD_FAILURE() << "a local command opened a transport";
    return absl::InternalError("no transport in this test");
  };
  std::ostringstream out, err;
  Result result;
  result.exit_code = RunVigilCtl(args, {}, deps, out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

TEST(TokensTest, Sha256KnownVector) {
  EXPECT_EQ(TokenSha256Hex("abc"), kAbcSha256);
  EXPECT_EQ(TokenSha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(TokensTest, EncodeTokenIsUnpaddedBase64Url) {
  EXPECT_EQ(EncodeToken("\xfb\xff"), "-_8");
  EXPECT_EQ(EncodeToken("abc"), "YWJj");
  EXPECT_EQ(EncodeToken(std::string(kTokenBytes, '\0')).size(), 43u);
}

TEST(TokensTest, ConfigEntryEscapesItsValues) {
  EXPECT_EQ(TokenConfigEntry("bob \"b\"", "admin", "00"),
            R"({"name": "bob \"b\"", "role": "admin", "sha256": "00"})");
}

TEST(TokensTest, ReadUrandomGivesTheBytesAskedFor) {
  absl::StatusOr<std::string> bytes = ReadUrandom(kTokenBytes);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->size(), kTokenBytes);
}

TEST(HashTokenCommandTest, PrintsHashAndConfigEntry) {
  Result result = RunLocal({"hash-token", "abc"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(result.out, absl::StrCat("sha256: ", kAbcSha256,
                                     "\nconfig: {\"name\": \"NAME\", \"role\": "
                                     "\"operator\", \"sha256\": \"",
                                     kAbcSha256, "\"}\n"));
  Result json = RunLocal(
      {"hash-token", "abc", "--json", "--name", "alice", "--role", "admin"});
  ASSERT_EQ(json.exit_code, kExitOk) << json.err;
  EXPECT_EQ(
      nlohmann::json::parse(json.out, nullptr, false),
      nlohmann::json::parse(absl::StrCat(
          R"({"sha256": ")", kAbcSha256,
          R"(", "config": {"name": "alice", "role": "admin", "sha256": ")",
          kAbcSha256, R"("}})")));
}

TEST(GenTokenCommandTest, EncodesTheRandomBytesAndHashesTheToken) {
  Dependencies deps;
  deps.random_bytes = [](size_t count) -> absl::StatusOr<std::string> {
    return std::string(count, '\xff');
  };
  Result result = RunLocal({"gen-token", "--name", "alice"}, deps);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  const std::string token = EncodeToken(std::string(kTokenBytes, '\xff'));
  EXPECT_EQ(token, std::string(42, '_') + "8");
  const std::string hash = TokenSha256Hex(token);
  EXPECT_EQ(result.out,
            absl::StrCat("token:  ", token, "\nsha256: ", hash,
                         "\nconfig: {\"name\": \"alice\", \"role\": "
                         "\"operator\", \"sha256\": \"",
                         hash,
                         "\"}\nHand the token to its user; the server config "
                         "gets only the config line.\n"));
}

TEST(GenTokenCommandTest, NoRandomnessIsAnError) {
  Dependencies deps;
  deps.random_bytes = [](size_t) -> absl::StatusOr<std::string> {
    return absl::UnavailableError("cannot read /dev/urandom: gone");
  };
  Result result = RunLocal({"gen-token"}, deps);
  EXPECT_EQ(result.exit_code, kExitServerError);
  EXPECT_EQ(result.err,
            "vigilctl: gen-token: cannot read /dev/urandom: gone\n");
}

TEST(GenTokenCommandTest, TwoRealTokensDiffer) {
  Result first = RunLocal({"gen-token", "--json"});
  Result second = RunLocal({"gen-token", "--json"});
  ASSERT_EQ(first.exit_code, kExitOk) << first.err;
  ASSERT_EQ(second.exit_code, kExitOk) << second.err;
  const auto a = nlohmann::json::parse(first.out, nullptr, false);
  const auto b = nlohmann::json::parse(second.out, nullptr, false);
  ASSERT_TRUE(a.is_object() && b.is_object());
  EXPECT_NE(a["token"], b["token"]);
  EXPECT_EQ(a["sha256"], TokenSha256Hex(a["token"].get<std::string>()));
  EXPECT_EQ(a["token"].get<std::string>().size(), 43u);
}

}  // namespace
}  // namespace vigil::ctl
