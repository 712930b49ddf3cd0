#include "notify/signing.h"

#include <string>

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(SigningTest, HmacSha256MatchesRfc4231TestCase2) {
  EXPECT_EQ(HexEncode(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(SigningTest, HmacSha1MatchesRfc2202) {
  EXPECT_EQ(HexEncode(HmacSha1(std::string(20, '\x0b'), "Hi There")),
            "b617318655057264e28bc0b6fb378c8ef146be00");
  EXPECT_EQ(HexEncode(HmacSha1("Jefe", "what do ya want for nothing?")),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
}

TEST(SigningTest, Sha256OfAbc) {
  EXPECT_EQ(HexEncode(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256("").size(), 32u);
}

TEST(SigningTest, Base64MatchesRfc4648Vectors) {
  struct Case {
    const char* in;
    const char* out;
  };
  for (const Case& c :
       {Case{"", ""}, Case{"f", "Zg=="}, Case{"fo", "Zm8="},
        Case{"foo", "Zm9v"}, Case{"foob", "Zm9vYg=="},
        Case{"fooba", "Zm9vYmE="}, Case{"foobar", "Zm9vYmFy"}}) {
    EXPECT_EQ(Base64Encode(c.in), c.out) << c.in;
  }
  EXPECT_EQ(Base64Encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(SigningTest, HexEncodeIsLowerCase) {
  EXPECT_EQ(HexEncode(std::string("\x00\xab\xff", 3)), "00abff");
  EXPECT_EQ(HexEncode(""), "");
}

TEST(SigningTest, UrlEncodeFollowsRfc3986) {
  EXPECT_EQ(UrlEncode("AZaz09-_.~"), "AZaz09-_.~");
  EXPECT_EQ(UrlEncode("a b+c/d=e&f*"), "a%20b%2Bc%2Fd%3De%26f%2A");
  EXPECT_EQ(UrlEncode("\xe4\xb8\xad"), "%E4%B8%AD");
  EXPECT_EQ(UrlEncode("O/Dxk+W6=="), "O%2FDxk%2BW6%3D%3D");
}

TEST(SigningTest, UrlDecodeHandlesPlusEscapesAndMalformedInput) {
  EXPECT_EQ(UrlDecode("a+b%20c%2Fd"), "a b c/d");
  EXPECT_EQ(UrlDecode("%E4%b8%AD"), "\xe4\xb8\xad");
  EXPECT_EQ(UrlDecode("100%"), "100%");
  EXPECT_EQ(UrlDecode("%zz%4"), "%zz%4");
  EXPECT_EQ(UrlDecode(UrlEncode("x y/\xff")), "x y/\xff");
}

TEST(SigningTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
}

// Expected value computed once with
//   python3 -c 'import hmac,hashlib; print(hmac.new(b"whsecret",
//     b"1764000000.{\"a\":1}", hashlib.sha256).hexdigest())'
constexpr char kWebhookSignature[] =
    "v1=499c95b7326bc43968948642c4d234596f1014784355db7f452e47fa71760108";

TEST(SigningTest, SignWebhookSignsTimestampDotBody) {
  EXPECT_EQ(SignWebhook("whsecret", 1764000000, R"({"a":1})"),
            kWebhookSignature);
}

TEST(SigningTest, VerifyWebhookAcceptsAFreshMatchingSignature) {
  EXPECT_TRUE(VerifyWebhook("whsecret", "1764000000", kWebhookSignature,
                            R"({"a":1})", 1764000100, 300)
                  .ok());
}

TEST(SigningTest, VerifyWebhookRejectsBadSignatures) {
  const std::string body = R"({"a":1})";
  for (const char* signature :
       {"", "v1=", "v2=499c", "499c95b7326bc439", kWebhookSignature + 1}) {
    EXPECT_EQ(VerifyWebhook("whsecret", "1764000000", signature, body,
                            1764000000, 300)
                  .code(),
              absl::StatusCode::kUnauthenticated)
        << signature;
  }
  EXPECT_EQ(VerifyWebhook("other", "1764000000", kWebhookSignature, body,
                          1764000000, 300)
                .code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(VerifyWebhook("whsecret", "1764000000", kWebhookSignature,
                          R"({"a":2})", 1764000000, 300)
                .code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(SigningTest, VerifyWebhookRejectsStaleOrMalformedTimestamps) {
  const std::string body = R"({"a":1})";
  for (const char* timestamp : {"", "abc", "1764000000.5", " 1764000000"}) {
    EXPECT_EQ(VerifyWebhook("whsecret", timestamp, kWebhookSignature, body,
                            1764000000, 300)
                  .code(),
              absl::StatusCode::kDeadlineExceeded)
        << timestamp;
  }
  EXPECT_EQ(VerifyWebhook("whsecret", "1764000000", kWebhookSignature, body,
                          1764000301, 300)
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(VerifyWebhook("whsecret", "1764000000", kWebhookSignature, body,
                          1763999699, 300)
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace vigil
