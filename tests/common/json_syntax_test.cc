#include "common/json_syntax.h"

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(JsonSyntaxErrorTest, EmptyForValidJson) {
  EXPECT_EQ(JsonSyntaxError(R"({"a": [1, 2, {"b": null}]})"), "");
}

TEST(JsonSyntaxErrorTest, PointsAtLineAndColumn) {
  std::string error = JsonSyntaxError("{\n  \"a\": 1,\n  \"b\": tru\n}");
  EXPECT_EQ(error.rfind("line 3, column ", 0), 0u) << error;
  EXPECT_NE(error.find("(byte "), std::string::npos) << error;
}

TEST(JsonSyntaxErrorTest, TruncatedDocument) {
  EXPECT_NE(JsonSyntaxError("{\"a\": [1, 2"), "");
  EXPECT_NE(JsonSyntaxError(""), "");
}

}  // namespace
}  // namespace vigil
