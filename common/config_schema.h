// A configuration reference built from the code that reads the config, so
// that it cannot drift from it. A ConfigSchema attached to a config reader
// (JsonConfigReader, or escalation's parser) puts it in describe mode: the
// reader records every key the parser asks for, present or not, with its
// type, range, default (what the parser keeps when the key is absent) and
// meaning, plus the keys each object accepts; and it hands the parser an
// empty stand-in for every absent section, so that one pass over an empty
// document walks into all of them. CheckComplete() then fails when a key
// is accepted but not documented. `vigil-server --config-reference` and
// `vigil-agent --config-reference` print the result; docs/CONFIG.md is
// rendered from it (scripts/gen-config-doc.py).
#ifndef VIGIL_COMMON_CONFIG_SCHEMA_H_
#define VIGIL_COMMON_CONFIG_SCHEMA_H_

#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace vigil {

// The meaning of a key, written next to the code that reads it: a string
// literal, or {meaning, values} where the allowed values are more than the
// reader can tell from the type (an enumeration, HOST:PORT).
struct KeyDoc {
  KeyDoc(const char* meaning) : meaning(meaning) {}  // NOLINT: implicit
  KeyDoc(const char* meaning, const char* values)
      : meaning(meaning), values(values) {}
  // A key that must be given (in the file, or where the meaning says so by
  // a flag): it has no default.
  static KeyDoc Required(const char* meaning, const char* values = "") {
    KeyDoc doc(meaning, values);
    doc.required = true;
    return doc;
  }
  std::string_view meaning;
  std::string_view values;
  bool required = false;
};

// One documented key.
struct ConfigKey {
  // Dotted path; elements of an array are "[]" and entries of a map
  // "<name>": "auth.tokens[].role", "watchdog.headers.<name>.file".
  std::string path;
  // "string", "bool", "number", "integer", "string list", "object",
  // "array of objects", "map", or a free text for a key of several forms.
  std::string type;
  // Allowed values: "(0, 3660]", "[1, 256]", "\"none\", \"certificate\"";
  // empty: any value of the type.
  std::string range;
  // What the parser keeps when the key is absent, in the key's own units;
  // null when there is none (a required key, a section whose absence turns
  // a feature off: the meaning says which).
  nlohmann::json default_value;
  std::string meaning;
  // The key must be given (KeyDoc::Required).
  bool required = false;
};

// What an absent section is replaced by in describe mode.
enum class SectionShape {
  kObject,       // {}
  kObjectArray,  // [{}]
  kObjectMap,    // {"<entry>": {}}: an object of named objects
};

// The keys recorded while a parser ran in describe mode. Not thread-safe.
class ConfigSchema {
 public:
  // Records `key`, its path normalised ("[3]" becomes "[]"). A path seen
  // before keeps its first record (the parser may visit it twice).
  void AddKey(ConfigKey key);
  // Records `key` as a section of `shape` (type, range and default are
  // filled in from the shape when `key` leaves them empty) and returns the
  // stand-in for its absent value, owned by this schema. The object(s) in
  // it must then be visited (AddObject), or CheckComplete fails.
  const nlohmann::json* AddSection(ConfigKey key, SectionShape shape,
                                   std::string_view entry = "name");
  // Records that the object at `path` accepts the keys `known`.
  void AddObject(const std::string& path, const std::set<std::string>& known);

  // The keys in the order they were recorded (a section before its keys).
  const std::vector<ConfigKey>& keys() const { return keys_; }
  // OK when every key that a recorded object accepts is documented (a
  // typed key or a section), every section's objects were visited and every
  // key has a meaning; otherwise kInternal naming each gap.
  absl::Status CheckComplete() const;
  // {"program": program, "keys": [{"path", "type", "range", "default",
  // "required", "meaning"}, ...]}.
  nlohmann::json ToJson(std::string_view program) const;

  // A JSON number: an integral value as an integer (60, not 60.0).
  static nlohmann::json Number(double value);

 private:
  // The index of `path` in keys_, or -1.
  int Find(const std::string& path) const;

  std::vector<ConfigKey> keys_;
  std::map<std::string, size_t> index_;
  // Object path -> the keys it accepts.
  std::map<std::string, std::set<std::string>> objects_;
  // Map sections: their path -> the entry placeholder ("<name>").
  std::map<std::string, std::string> maps_;
  // Section path -> the object path that must be visited.
  std::map<std::string, std::string> sections_;
  // Stand-ins handed out; a deque keeps their addresses.
  std::deque<nlohmann::json> placeholders_;
};

}  // namespace vigil

#endif  // VIGIL_COMMON_CONFIG_SCHEMA_H_
