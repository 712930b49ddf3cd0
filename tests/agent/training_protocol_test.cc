#include "agent/training_protocol.h"

#include <cmath>
#include <string>
#include <string_view>
#include <variant>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

using ::testing::HasSubstr;

TEST(TrainingProtocolTest, ParsesHello) {
  absl::StatusOr<TrainingMessage> m = ParseTrainingMessage(
      R"({"v":1,"type":"hello","job":"llama-70b","rank":3,"local_rank":3,)"
      R"("world_size":64,"gpu":5,"future_field":{"x":[1,2]}})");
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& hello = std::get<HelloMessage>(*m);
  EXPECT_EQ(hello.job, "llama-70b");
  EXPECT_EQ(hello.rank, 3);
  EXPECT_EQ(hello.local_rank, 3);
  EXPECT_EQ(hello.world_size, 64);
  EXPECT_EQ(hello.gpu, 5);
}

TEST(TrainingProtocolTest, HelloFieldsAreOptional) {
  absl::StatusOr<TrainingMessage> m =
      ParseTrainingMessage(R"({"type":"hello","gpu":null})");
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& hello = std::get<HelloMessage>(*m);
  EXPECT_EQ(hello.job, "");
  EXPECT_EQ(hello.rank, 0);
  EXPECT_FALSE(hello.local_rank.has_value());
  EXPECT_FALSE(hello.gpu.has_value());
}

TEST(TrainingProtocolTest, ParsesStep) {
  absl::StatusOr<TrainingMessage> m = ParseTrainingMessage(
      R"({"type":"step","step":1200.0,"loss":2.31,"grad_norm":0.9,)"
      R"("tokens_per_second":5120,"step_time_seconds":1.7,)"
      R"("dataloader_wait_seconds":0.01,"loss_scale":65536,"mfu_ratio":0.41,)"
      R"("torch_reserved_bytes":6e10,"torch_allocated_bytes":5e10,)"
      R"("torch_alloc_retries_total":2,"mfu_note":"ignored"})");
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& step = std::get<StepMessage>(*m);
  EXPECT_EQ(step.step, 1200);
  EXPECT_EQ(step.loss, 2.31);
  EXPECT_EQ(step.grad_norm, 0.9);
  EXPECT_EQ(step.tokens_per_second, 5120);
  EXPECT_EQ(step.step_time_seconds, 1.7);
  EXPECT_EQ(step.dataloader_wait_seconds, 0.01);
  EXPECT_EQ(step.loss_scale, 65536);
  EXPECT_EQ(step.mfu_ratio, 0.41);
  EXPECT_EQ(step.torch_reserved_bytes, 6e10);
  EXPECT_EQ(step.torch_allocated_bytes, 5e10);
  EXPECT_EQ(step.torch_alloc_retries_total, 2);
}

TEST(TrainingProtocolTest, AcceptsPythonNonFiniteTokens) {
  // What json.dumps({"loss": float("nan"), ...}) writes.
  absl::StatusOr<TrainingMessage> m = ParseTrainingMessage(
      R"({"type": "step", "step": 7, "loss": NaN, "grad_norm": Infinity, )"
      R"("loss_scale": -Infinity, "note": "NaN Infinity stay text"})");
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& step = std::get<StepMessage>(*m);
  EXPECT_TRUE(std::isnan(*step.loss));
  EXPECT_EQ(*step.grad_norm, INFINITY);
  EXPECT_EQ(*step.loss_scale, -INFINITY);
}

TEST(TrainingProtocolTest, QuotesOnlyBareTokens) {
  EXPECT_EQ(QuoteNonFiniteTokens(R"({"a":NaN,"b":[Infinity,-Infinity]})"),
            R"({"a":"\u0000NaN","b":["\u0000Infinity","\u0000-Infinity"]})");
  EXPECT_EQ(QuoteNonFiniteTokens(R"({"a":"NaN \"NaN\" x","b":NaNa})"),
            R"({"a":"NaN \"NaN\" x","b":NaNa})");
}

TEST(TrainingProtocolTest, ParsesPhases) {
  for (auto [text, marker] :
       {std::pair{"checkpoint_start", PhaseMarker::kCheckpointStart},
        std::pair{"checkpoint_end", PhaseMarker::kCheckpointEnd},
        std::pair{"eval_start", PhaseMarker::kEvalStart},
        std::pair{"eval_end", PhaseMarker::kEvalEnd}}) {
    absl::StatusOr<TrainingMessage> m = ParseTrainingMessage(
        std::string(R"({"type":"phase","phase":")") + text + "\"}");
    ASSERT_TRUE(m.ok()) << text << ": " << m.status();
    EXPECT_EQ(std::get<PhaseMessage>(*m).marker, marker) << text;
  }
}

struct BadLine {
  std::string_view line;
  const char* reason;
};

class TrainingProtocolBadLineTest : public ::testing::TestWithParam<BadLine> {};

TEST_P(TrainingProtocolBadLineTest, IsRejectedWithReason) {
  absl::StatusOr<TrainingMessage> m = ParseTrainingMessage(GetParam().line);
  ASSERT_FALSE(m.ok()) << GetParam().line;
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr(GetParam().reason));
}

INSTANTIATE_TEST_SUITE_P(
    Lines, TrainingProtocolBadLineTest,
    ::testing::Values(
        BadLine{R"({"type":"step","step":1)", "not valid JSON"},
        BadLine{"NaN", "not a JSON object"},
        BadLine{R"([{"type":"step"}])", "not a JSON object"},
        BadLine{std::string_view("{\"type\":\"st\0ep\"}", 16),
                "not valid JSON"},
        BadLine{R"({"step":1})", "field 'type'"},
        BadLine{R"({"type":7})", "field 'type'"},
        BadLine{R"({"type":"metrics"})", "unknown type 'metrics'"},
        BadLine{R"({"v":2,"type":"step","step":1})", "protocol version"},
        BadLine{R"({"type":"step"})", "field 'step' is required"},
        BadLine{R"({"type":"step","step":-1})", "'step' must be an integer"},
        BadLine{R"({"type":"step","step":1.5})", "'step' must be an integer"},
        BadLine{R"({"type":"step","step":"1"})", "'step' must be an integer"},
        BadLine{R"({"type":"step","step":1,"loss":"2.3"})",
                "field 'loss' must be a number"},
        BadLine{R"({"type":"step","step":1,"loss":NaNx})", "not valid JSON"},
        BadLine{R"({"type":"step","step":1,"mfu_ratio":true})",
                "field 'mfu_ratio' must be a number"},
        BadLine{R"({"type":"hello","job":""})", "field 'job'"},
        BadLine{R"({"type":"hello","job":5})", "field 'job' must be a string"},
        BadLine{R"({"type":"hello","rank":-3})", "'rank' must be an integer"},
        BadLine{R"({"type":"phase","phase":"lunch"})", "field 'phase' must be"},
        BadLine{R"({"type":"phase"})", "field 'phase' must be a string"}));

TEST(TrainingProtocolTest, RefusesOverlongJobName) {
  std::string line =
      R"({"type":"hello","job":")" + std::string(300, 'j') + "\"}";
  absl::StatusOr<TrainingMessage> m = ParseTrainingMessage(line);
  EXPECT_THAT(m.status().message(), HasSubstr("field 'job' must be 1 to 256"));
}

}  // namespace
}  // namespace vigil::agent
