// Reading JSON documents that an operator wrote: every problem is
// collected with its JSON path ("policies.P0.steps[1].repeat: ...")
// instead of stopping at the first. Private to escalation/.
#ifndef VIGIL_ESCALATION_JSON_CHECKER_H_
#define VIGIL_ESCALATION_JSON_CHECKER_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace vigil::escalation_internal {

// Collects errors; the typed readers report a wrong type or range and
// return nullopt. Not thread-safe.
class JsonChecker {
 public:
  // "path: message".
  void Error(std::string_view path, std::string_view message);
  // Reports every member of the object `obj` whose key is not in `known`.
  void CheckKeys(const nlohmann::json& obj, std::string_view path,
                 std::initializer_list<std::string_view> known);

  // False (reported) unless `v` is an object.
  bool Object(const nlohmann::json& v, std::string_view path);
  // False (reported) unless `v` is an array.
  bool Array(const nlohmann::json& v, std::string_view path);
  // A non-empty string.
  std::optional<std::string> String(const nlohmann::json& v,
                                    std::string_view path);
  // Any string, empty included.
  std::optional<std::string> Text(const nlohmann::json& v,
                                  std::string_view path);
  std::optional<bool> Bool(const nlohmann::json& v, std::string_view path);
  // A number >= `min`.
  std::optional<double> Number(const nlohmann::json& v, std::string_view path,
                               double min);
  // An integer in [min, max].
  std::optional<int64_t> Integer(const nlohmann::json& v, std::string_view path,
                                 int64_t min, int64_t max);
  // A time: unix seconds, or an RFC 3339 string with an explicit offset
  // ("2026-11-30T09:00:00Z", "2026-11-30T17:00:00+08:00").
  std::optional<double> Time(const nlohmann::json& v, std::string_view path);

  bool ok() const { return errors_.empty(); }
  // OK, or kInvalidArgument listing every error, one per line.
  absl::Status ToStatus() const;

 private:
  std::vector<std::string> errors_;
};

// "path.key" ("key" at the top).
std::string Member(std::string_view path, std::string_view key);
// "path[i]".
std::string Element(std::string_view path, size_t i);

}  // namespace vigil::escalation_internal

#endif  // VIGIL_ESCALATION_JSON_CHECKER_H_
