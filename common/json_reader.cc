#include "common/json_reader.h"

#include <utility>

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
  if (schema_ != nullptr) schema_->AddObject(path, known);
  for (const auto& [key, value] : obj.items()) {
    if (!known.count(key)) Error(Join(path, key), "unknown key");
  }
  return true;
}

void JsonConfigReader::String(const Json& obj, const std::string& path,
                              const char* key, std::string* out, KeyDoc doc) {
  if (schema_ != nullptr) Record(Join(path, key), "string", "", *out, doc);
  const Json* v = Find(obj, key);
  if (v == nullptr) return;
  if (!v->is_string()) return Error(Join(path, key), "must be a string");
  *out = v->get<std::string>();
}

void JsonConfigReader::Bool(const Json& obj, const std::string& path,
                            const char* key, bool* out, KeyDoc doc) {
  if (schema_ != nullptr) Record(Join(path, key), "bool", "", *out, doc);
  const Json* v = Find(obj, key);
  if (v == nullptr) return;
  if (!v->is_boolean()) return Error(Join(path, key), "must be true or false");
  *out = v->get<bool>();
}

void JsonConfigReader::Positive(const Json& obj, const std::string& path,
                                const char* key, double scale, double max,
                                double* out, KeyDoc doc) {
  if (schema_ != nullptr) {
    Record(Join(path, key), "number",
           absl::StrCat("(0, ", ConfigSchema::Number(max).dump(), "]"),
           ConfigSchema::Number(*out / scale), doc);
  }
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
                                  std::vector<std::string>* out,
                                  KeyDoc doc) {
  if (schema_ != nullptr) Record(Join(path, key), "string list", "", *out, doc);
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

const JsonConfigReader::Json* JsonConfigReader::Object(const Json& obj,
                                                       const std::string& path,
                                                       const char* key, KeyDoc doc) {
  return Section(obj, path, key, SectionShape::kObject, "", nullptr, doc);
}

const JsonConfigReader::Json* JsonConfigReader::ObjectArray(
    const Json& obj, const std::string& path, const char* key,
    Json default_value, KeyDoc doc) {
  return Section(obj, path, key, SectionShape::kObjectArray, "",
                 std::move(default_value), doc);
}

const JsonConfigReader::Json* JsonConfigReader::ObjectMap(
    const Json& obj, const std::string& path, const char* key,
    const char* entry, KeyDoc doc) {
  return Section(obj, path, key, SectionShape::kObjectMap, entry, nullptr, doc);
}

const JsonConfigReader::Json* JsonConfigReader::Value(
    const Json& obj, const std::string& path, const char* key,
    const char* type, Json default_value, KeyDoc doc) {
  if (schema_ != nullptr)
    Record(Join(path, key), type, "", std::move(default_value), doc);
  return Find(obj, key);
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

void JsonConfigReader::Record(const std::string& path, const char* type,
                              std::string range, Json default_value,
                              KeyDoc doc) {
  if (!doc.values.empty()) range = std::string(doc.values);
  if (doc.required) default_value = nullptr;
  schema_->AddKey({path, type, std::move(range), std::move(default_value),
                   std::string(doc.meaning), doc.required});
}

void JsonConfigReader::RecordInteger(const std::string& path, int64_t min,
                                     int64_t max, double default_value,
                                     KeyDoc doc) {
  Record(path, "integer", absl::StrCat("[", min, ", ", max, "]"),
         ConfigSchema::Number(default_value), doc);
}

const JsonConfigReader::Json* JsonConfigReader::Section(
    const Json& obj, const std::string& path, const char* key,
    SectionShape shape, const char* entry, Json default_value, KeyDoc doc) {
  const Json* v = Find(obj, key);
  if (schema_ == nullptr) return v;
  const Json* placeholder = schema_->AddSection(
      {Join(path, key), "", std::string(doc.values),
       doc.required ? nullptr : std::move(default_value), std::string(doc.meaning),
       doc.required},
      shape, entry);
  return v != nullptr ? v : placeholder;
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
