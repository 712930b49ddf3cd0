#include "escalation/json_checker.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace vigil::escalation_internal {
namespace {

using json = nlohmann::json;

std::string TypeError(std::string_view want, const json& got) {
  return absl::StrCat("must be ", std::string(want), ", not ", got.type_name());
}

// Unix seconds of an RFC 3339 time with an explicit offset, or nullopt.
std::optional<double> ParseRfc3339(std::string_view text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &err)) {
    return std::nullopt;
  }
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

}  // namespace

std::string Member(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key)
                      : absl::StrCat(std::string(path), ".", std::string(key));
}

std::string Element(std::string_view path, size_t i) {
  return absl::StrCat(std::string(path), "[", i, "]");
}

void JsonChecker::Error(std::string_view path, std::string_view message) {
  errors_.push_back(
      absl::StrCat(std::string(path), ": ", std::string(message)));
}

void JsonChecker::CheckKeys(const json& obj, std::string_view path,
                            std::initializer_list<std::string_view> known) {
  std::string list;
  for (std::string_view k : known) {
    absl::StrAppend(&list, list.empty() ? "" : ", ", std::string(k));
  }
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      Error(Member(path, key), absl::StrCat("unknown key (known: ", list, ")"));
    }
  }
}

bool JsonChecker::Object(const json& v, std::string_view path) {
  if (v.is_object()) return true;
  Error(path, TypeError("an object", v));
  return false;
}

bool JsonChecker::Array(const json& v, std::string_view path) {
  if (v.is_array()) return true;
  Error(path, TypeError("an array", v));
  return false;
}

std::optional<std::string> JsonChecker::String(const json& v,
                                               std::string_view path) {
  if (!v.is_string() || v.get<std::string>().empty()) {
    Error(path, TypeError("a non-empty string", v));
    return std::nullopt;
  }
  return v.get<std::string>();
}

std::optional<std::string> JsonChecker::Text(const json& v,
                                             std::string_view path) {
  if (!v.is_string()) {
    Error(path, TypeError("a string", v));
    return std::nullopt;
  }
  return v.get<std::string>();
}

std::optional<bool> JsonChecker::Bool(const json& v, std::string_view path) {
  if (!v.is_boolean()) {
    Error(path, TypeError("a boolean", v));
    return std::nullopt;
  }
  return v.get<bool>();
}

std::optional<double> JsonChecker::Number(const json& v, std::string_view path,
                                          double min) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    Error(path, TypeError("a number", v));
    return std::nullopt;
  }
  if (v.get<double>() < min) {
    Error(path, absl::StrCat("must be at least ", min, ", not ", v.dump()));
    return std::nullopt;
  }
  return v.get<double>();
}

std::optional<int64_t> JsonChecker::Integer(const json& v,
                                            std::string_view path, int64_t min,
                                            int64_t max) {
  if (!v.is_number_integer() || v.get<int64_t>() < min ||
      v.get<int64_t>() > max) {
    Error(path, absl::StrCat("must be an integer in [", min, ", ", max,
                             "], not ", v.dump()));
    return std::nullopt;
  }
  return v.get<int64_t>();
}

std::optional<double> JsonChecker::Time(const json& v, std::string_view path) {
  if (v.is_number() && std::isfinite(v.get<double>())) return v.get<double>();
  if (v.is_string()) {
    if (std::optional<double> t = ParseRfc3339(v.get<std::string>())) return t;
  }
  Error(path, absl::StrCat("must be unix seconds or an RFC 3339 time with an "
                           "offset (\"2026-11-30T09:00:00Z\"), not ",
                           v.dump()));
  return std::nullopt;
}

absl::Status JsonChecker::ToStatus() const {
  if (errors_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
}

}  // namespace vigil::escalation_internal
