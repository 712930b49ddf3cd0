// Reads typed values out of a JSON config document, collecting every error
// with its key path ("collectors.nvml.library: must be a string") instead of
// stopping at the first, so an operator fixes a config file in one go.
// Every read names what the key means; with a ConfigSchema attached the
// reader documents each key it is asked for (common/config_schema.h).
#ifndef VIGIL_COMMON_JSON_READER_H_
#define VIGIL_COMMON_JSON_READER_H_

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config_schema.h"
#include "nlohmann/json.hpp"

namespace vigil {

// Collects errors while config sections are read. Not thread-safe.
class JsonConfigReader {
 public:
  using Json = nlohmann::json;

  // A reader that only checks; with `schema` (not owned, must outlive the
  // reader) it is in describe mode: every key asked for is recorded there,
  // and Object, ObjectArray and ObjectMap stand in an empty section for an
  // absent one.
  explicit JsonConfigReader(ConfigSchema* schema = nullptr) : schema_(schema) {}

  // The schema of describe mode, or null.
  ConfigSchema* schema() const { return schema_; }

  // True if `obj` is an object; records an error for every key not in
  // `known`. False (with an error) if `obj` is not an object.
  bool CheckObject(const Json& obj, const std::string& path,
                   const std::set<std::string>& known);
  // Each reader leaves `*out` alone when `key` is absent, and records an
  // error (leaving it alone) when the value has the wrong type or range.
  // `doc` says what the key means; `*out` as it is on entry is the default.
  void String(const Json& obj, const std::string& path, const char* key,
              std::string* out, KeyDoc doc);
  void Bool(const Json& obj, const std::string& path, const char* key,
            bool* out, KeyDoc doc);
  // A finite number with 0 < value <= max, times `scale`.
  void Positive(const Json& obj, const std::string& path, const char* key,
                double scale, double max, double* out, KeyDoc doc);
  // An integer in [min, max], times `scale`.
  template <typename T>
  void Integer(const Json& obj, const std::string& path, const char* key,
               int64_t min, int64_t max, int64_t scale, T* out, KeyDoc doc) {
    if (schema_ != nullptr) {
      RecordInteger(Join(path, key), min, max,
                    static_cast<double>(*out) / static_cast<double>(scale), doc);
    }
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
                  std::vector<std::string>* out, KeyDoc doc);

  // Sections the caller reads itself: the member `key` of `obj`, or null
  // when absent (in describe mode: an empty stand-in). The caller checks
  // the member's type. Object: an object. ObjectArray: an array of
  // objects, whose absence means `default_value`. ObjectMap: an object of
  // objects under names the caller chooses (the reference calls a name
  // "<entry>").
  const Json* Object(const Json& obj, const std::string& path, const char* key,
                     KeyDoc doc);
  const Json* ObjectArray(const Json& obj, const std::string& path,
                          const char* key, Json default_value, KeyDoc doc);
  const Json* ObjectMap(const Json& obj, const std::string& path,
                        const char* key, const char* entry, KeyDoc doc);
  // Any other key the caller reads itself (a map of strings, a value of
  // several forms): the member `key` of `obj`, or null. `type` and
  // `default_value` are what the reference says of it.
  const Json* Value(const Json& obj, const std::string& path, const char* key,
                    const char* type, Json default_value, KeyDoc doc);

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
  // Describe mode: records the key at `path`.
  void Record(const std::string& path, const char* type, std::string range,
              Json default_value, KeyDoc doc);
  void RecordInteger(const std::string& path, int64_t min, int64_t max,
                     double default_value, KeyDoc doc);
  // Describe mode: records a section and returns its stand-in.
  const Json* Section(const Json& obj, const std::string& path, const char* key,
                      SectionShape shape, const char* entry, Json default_value,
                      KeyDoc doc);

  ConfigSchema* const schema_;
  std::vector<std::string> errors_;
};

// Parses `text` as JSON; kInvalidArgument naming the line and column of the
// first syntax error, prefixed with `what`.
absl::StatusOr<nlohmann::json> ParseJsonDocument(std::string_view text,
                                                 std::string_view what);

}  // namespace vigil

#endif  // VIGIL_COMMON_JSON_READER_H_
