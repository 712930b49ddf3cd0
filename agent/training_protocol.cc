#include "agent/training_protocol.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/series_key.h"
#include "nlohmann/json.hpp"

namespace vigil::agent {
namespace {

using Json = nlohmann::json;
using namespace std::literals;

// A non-finite token and the string it is quoted as: a NUL first, which no
// client writes in a real string value.
struct NonFinite {
  std::string_view token;
  std::string_view quoted;   // JSON text, quotes included
  std::string_view decoded;  // what the parser makes of `quoted`
  double value;
};
const NonFinite kNonFinite[] = {
    {"-Infinity", R"("\u0000-Infinity")", "\0-Infinity"sv,
     -std::numeric_limits<double>::infinity()},
    {"Infinity", R"("\u0000Infinity")", "\0Infinity"sv,
     std::numeric_limits<double>::infinity()},
    {"NaN", R"("\u0000NaN")", "\0NaN"sv,
     std::numeric_limits<double>::quiet_NaN()},
};

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '+' || c == '-';
}

// Reads optional field `name` of `obj` as a number into `*out`: absent or
// null leaves it unset. An error names the field otherwise.
absl::Status GetNumber(const Json& obj, const char* name,
                       std::optional<double>* out) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number()) {
    *out = it->get<double>();
    return absl::OkStatus();
  }
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    for (const NonFinite& nf : kNonFinite) {
      if (s.size() == nf.decoded.size() && s == nf.decoded) {
        *out = nf.value;
        return absl::OkStatus();
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("field '", name, "' must be a number"));
}

// Reads optional field `name` as an integer >= 0 (1200 or 1200.0).
absl::Status GetCount(const Json& obj, const char* name,
                      std::optional<int64_t>* out) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number_unsigned()) {
    uint64_t v = it->get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *out = static_cast<int64_t>(v);
      return absl::OkStatus();
    }
  } else if (it->is_number_float()) {
    double v = it->get<double>();
    if (v >= 0 && v < 9.2e18 && v == std::floor(v)) {
      *out = static_cast<int64_t>(v);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("field '", name, "' must be an integer >= 0"));
}

absl::StatusOr<TrainingMessage> ParseHello(const Json& obj) {
  HelloMessage hello;
  if (auto it = obj.find("job"); it != obj.end() && !it->is_null()) {
    if (!it->is_string())
      return absl::InvalidArgumentError("field 'job' must be a string");
    hello.job = it->get<std::string>();
    if (hello.job.empty() || hello.job.size() > kMaxLabelValueLength ||
        hello.job.find('\0') != std::string::npos)
      return absl::InvalidArgumentError(absl::StrCat(
          "field 'job' must be 1 to ", kMaxLabelValueLength, " bytes"));
  }
  std::optional<int64_t> rank;
  for (auto [name, field] :
       {std::pair{"rank", &rank}, std::pair{"local_rank", &hello.local_rank},
        std::pair{"world_size", &hello.world_size},
        std::pair{"gpu", &hello.gpu}}) {
    if (absl::Status s = GetCount(obj, name, field); !s.ok()) return s;
  }
  hello.rank = rank.value_or(0);
  return hello;
}

absl::StatusOr<TrainingMessage> ParseStep(const Json& obj) {
  StepMessage step;
  std::optional<int64_t> number;
  if (absl::Status s = GetCount(obj, "step", &number); !s.ok()) return s;
  if (!number) return absl::InvalidArgumentError("field 'step' is required");
  step.step = *number;
  for (auto [name, field] : {
           std::pair{"loss", &step.loss},
           std::pair{"grad_norm", &step.grad_norm},
           std::pair{"tokens_per_second", &step.tokens_per_second},
           std::pair{"step_time_seconds", &step.step_time_seconds},
           std::pair{"dataloader_wait_seconds", &step.dataloader_wait_seconds},
           std::pair{"loss_scale", &step.loss_scale},
           std::pair{"mfu_ratio", &step.mfu_ratio},
           std::pair{"torch_reserved_bytes", &step.torch_reserved_bytes},
           std::pair{"torch_allocated_bytes", &step.torch_allocated_bytes},
           std::pair{"torch_alloc_retries_total",
                     &step.torch_alloc_retries_total},
       }) {
    if (absl::Status s = GetNumber(obj, name, field); !s.ok()) return s;
  }
  return step;
}

absl::StatusOr<TrainingMessage> ParsePhase(const Json& obj) {
  auto it = obj.find("phase");
  if (it == obj.end() || !it->is_string())
    return absl::InvalidArgumentError("field 'phase' must be a string");
  const std::string& phase = it->get_ref<const std::string&>();
  for (auto [name, marker] :
       {std::pair{"checkpoint_start", PhaseMarker::kCheckpointStart},
        std::pair{"checkpoint_end", PhaseMarker::kCheckpointEnd},
        std::pair{"eval_start", PhaseMarker::kEvalStart},
        std::pair{"eval_end", PhaseMarker::kEvalEnd}}) {
    if (phase == name) return PhaseMessage{marker};
  }
  return absl::InvalidArgumentError(
      "field 'phase' must be checkpoint_start, checkpoint_end, eval_start or "
      "eval_end");
}

}  // namespace

std::string QuoteNonFiniteTokens(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[i + 1]);
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out.push_back(c);
      ++i;
      continue;
    }
    const bool word_start = i == 0 || !IsWordChar(text[i - 1]);
    bool replaced = false;
    for (const NonFinite& nf : kNonFinite) {
      if (!word_start || text.substr(i, nf.token.size()) != nf.token) continue;
      size_t end = i + nf.token.size();
      if (end < text.size() && IsWordChar(text[end])) continue;
      out.append(nf.quoted);
      i = end;
      replaced = true;
      break;
    }
    if (!replaced) {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

absl::StatusOr<TrainingMessage> ParseTrainingMessage(std::string_view line) {
  const std::string quoted = QuoteNonFiniteTokens(line);
  Json obj = Json::parse(quoted, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!obj.is_object()) return absl::InvalidArgumentError("not a JSON object");
  if (auto v = obj.find("v");
      v != obj.end() && !v->is_null() && !(v->is_number_integer() && *v == 1)) {
    return absl::InvalidArgumentError(
        "unsupported protocol version (field 'v'); this agent speaks 1");
  }
  auto type = obj.find("type");
  if (type == obj.end() || !type->is_string())
    return absl::InvalidArgumentError("field 'type' must be a string");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "hello") return ParseHello(obj);
  if (t == "step") return ParseStep(obj);
  if (t == "phase") return ParsePhase(obj);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown type '", t.substr(0, 40), "' (want hello, step or phase)"));
}

}  // namespace vigil::agent
