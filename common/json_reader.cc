#include "common/json_reader.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_syntax.h"

namespace vigil {

bool JsonConfigReader::CheckObject(const Json& obj, const std::string& path,
                                   const std::set<std::string>& known) {
  if (!obj.is_object()) {
    Error(path.empty() ? "(top level)" : path, "must be a JSON object");
    return false;
  }
  for (const auto& [key, value] : obj.items()) {
    if (!known.count(key)) Error(Join(path, key), "unknown key");
  }
  return true;
}

void JsonConfigReader::String(const Json& obj, const std::string& path,
                              const char* key, std::string* out) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return;
  if (!v->is_string()) return Error(Join(path, key), "must be a string");
  *out = v->get<std::string>();
}

void JsonConfigReader::Bool(const Json& obj, const std::string& path,
                            const char* key, bool* out) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return;
  if (!v->is_boolean()) return Error(Join(path, key), "must be true or false");
  *out = v->get<bool>();
}

void JsonConfigReader::Positive(const Json& obj, const std::string& path,
                                const char* key, double scale, double max,
                                double* out) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return;
  if (!v->is_number() || !(v->get<double>() > 0) || v->get<double>() > max) {
    return Error(Join(path, key),
                 absl::StrCat("must be a number > 0 and <= ", max));
  }
  *out = v->get<double>() * scale;
}

void JsonConfigReader::StringList(const Json& obj, const std::string& path,
                                  const char* key,
                                  std::vector<std::string>* out) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return;
  std::vector<std::string> list;
  if (v->is_array()) {
    for (const Json& item : *v) {
      if (!item.is_string()) break;
      list.push_back(item.get<std::string>());
    }
  }
  if (!v->is_array() || list.size() != v->size()) {
    return Error(Join(path, key), "must be an array of strings");
  }
  *out = std::move(list);
}

void JsonConfigReader::Error(const std::string& path, const std::string& what) {
  errors_.push_back(absl::StrCat(path, ": ", what));
}

absl::Status JsonConfigReader::Result(std::string_view what) const {
  if (errors_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(what), ":\n  ", absl::StrJoin(errors_, "\n  ")));
}

std::string JsonConfigReader::Join(const std::string& path,
                                   const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

const JsonConfigReader::Json* JsonConfigReader::Find(const Json& obj,
                                                     const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

void JsonConfigReader::IntegerRangeError(const std::string& path, int64_t min,
                                         int64_t max) {
  Error(path, absl::StrCat("must be an integer in [", min, ", ", max, "]"));
}

absl::StatusOr<nlohmann::json> ParseJsonDocument(std::string_view text,
                                                 std::string_view what) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": ", JsonSyntaxError(text)));
  }
  return doc;
}

}  // namespace vigil
