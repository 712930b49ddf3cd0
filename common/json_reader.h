// Reads typed values out of a JSON config document, collecting every error
// with its key path ("collectors.nvml.library: must be a string") instead of
// stopping at the first, so an operator fixes a config file in one go.
#ifndef VIGIL_COMMON_JSON_READER_H_
#define VIGIL_COMMON_JSON_READER_H_

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vigil {

// Collects errors while config sections are read. Not thread-safe.
class JsonConfigReader {
 public:
  using Json = nlohmann::json;

  // True if `obj` is an object; records an error for every key not in
  // `known`. False (with an error) if `obj` is not an object.
  bool CheckObject(const Json& obj, const std::string& path,
                   const std::set<std::string>& known);
  // Each reader leaves `*out` alone when `key` is absent, and records an
  // error (leaving it alone) when the value has the wrong type or range.
  void String(const Json& obj, const std::string& path, const char* key,
              std::string* out);
  void Bool(const Json& obj, const std::string& path, const char* key,
            bool* out);
  // A finite number with 0 < value <= max, times `scale`.
  void Positive(const Json& obj, const std::string& path, const char* key,
                double scale, double max, double* out);
  // An integer in [min, max], times `scale`.
  template <typename T>
  void Integer(const Json& obj, const std::string& path, const char* key,
               int64_t min, int64_t max, int64_t scale, T* out) {
    const Json* v = Find(obj, key);
    if (v == nullptr) return;
    if (!v->is_number_integer() || v->get<int64_t>() < min ||
        v->get<int64_t>() > max) {
      return IntegerRangeError(Join(path, key), min, max);
    }
    *out = static_cast<T>(v->get<int64_t>() * scale);
  }
  // An array of strings.
  void StringList(const Json& obj, const std::string& path, const char* key,
                  std::vector<std::string>* out);

  // Records "path: what".
  void Error(const std::string& path, const std::string& what);
  const std::vector<std::string>& errors() const { return errors_; }
  // OK when no error was recorded, else kInvalidArgument listing them all,
  // one per line, after `what` (e.g. "agent config /etc/vigil/agent.json").
  absl::Status Result(std::string_view what) const;

  // "path.key", or "key" at the top level.
  static std::string Join(const std::string& path, const std::string& key);

 private:
  static const Json* Find(const Json& obj, const char* key);
  void IntegerRangeError(const std::string& path, int64_t min, int64_t max);

  std::vector<std::string> errors_;
};

// Parses `text` as JSON; kInvalidArgument naming the line and column of the
// first syntax error, prefixed with `what`.
absl::StatusOr<nlohmann::json> ParseJsonDocument(std::string_view text,
                                                 std::string_view what);

}  // namespace vigil

#endif  // VIGIL_COMMON_JSON_READER_H_
