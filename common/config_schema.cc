#include "common/config_schema.h"

#include <cctype>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vigil {
namespace {

// `path` with every array index ("[3]") made "[]".
std::string Normalize(const std::string& path) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    out += path[i];
    if (path[i] != '[') continue;
    size_t j = i + 1;
    while (j < path.size() && std::isdigit(static_cast<unsigned char>(path[j]))) ++j;
    if (j > i + 1 && j < path.size() && path[j] == ']') i = j - 1;
  }
  return out;
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

}  // namespace

void ConfigSchema::AddKey(ConfigKey key) {
  key.path = Normalize(key.path);
  if (Find(key.path) >= 0) return;
  index_[key.path] = keys_.size();
  keys_.push_back(std::move(key));
}

const nlohmann::json* ConfigSchema::AddSection(ConfigKey key, SectionShape shape,
                                               std::string_view entry) {
  key.path = Normalize(key.path);
  const std::string placeholder = absl::StrCat("<", std::string(entry), ">");
  switch (shape) {
    case SectionShape::kObject:
      if (key.type.empty()) key.type = "object";
      sections_[key.path] = key.path;
      placeholders_.push_back(nlohmann::json::object());
      break;
    case SectionShape::kObjectArray:
      if (key.type.empty()) key.type = "array of objects";
      sections_[key.path] = key.path + "[]";
      placeholders_.push_back(nlohmann::json::array({nlohmann::json::object()}));
      break;
    case SectionShape::kObjectMap:
      if (key.type.empty()) key.type = absl::StrCat("map of ", placeholder, " to object");
      sections_[key.path] = Join(key.path, placeholder);
      maps_[key.path] = placeholder;
      placeholders_.push_back({{placeholder, nlohmann::json::object()}});
      break;
  }
  AddKey(std::move(key));
  return &placeholders_.back();
}

void ConfigSchema::AddObject(const std::string& path, const std::set<std::string>& known) {
  const std::string normal = Normalize(path);
  objects_[normal].insert(known.begin(), known.end());
  // A map whose entries are checked against a fixed list: the list is its
  // range.
  if (maps_.count(normal)) {
    if (int i = Find(normal); i >= 0 && keys_[i].range.empty())
      keys_[i].range = absl::StrCat("keys: ", absl::StrJoin(known, ", "));
  }
}

absl::Status ConfigSchema::CheckComplete() const {
  std::vector<std::string> gaps;
  for (const auto& object : objects_) {
    if (maps_.count(object.first)) continue;  // its keys are the entries' names
    for (const std::string& key : object.second) {
      if (Find(Join(object.first, key)) < 0)
        gaps.push_back(absl::StrCat(Join(object.first, key), ": accepted but not documented"));
    }
  }
  for (const auto& section : sections_) {
    if (!objects_.count(section.second))
      gaps.push_back(absl::StrCat(section.first, ": section never visited (no ",
                                  section.second, " object checked)"));
  }
  for (const ConfigKey& key : keys_) {
    if (key.meaning.empty()) gaps.push_back(absl::StrCat(key.path, ": no meaning"));
  }
  if (gaps.empty()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("config reference incomplete:\n  ", absl::StrJoin(gaps, "\n  ")));
}

nlohmann::json ConfigSchema::ToJson(std::string_view program) const {
  nlohmann::json keys = nlohmann::json::array();
  for (const ConfigKey& key : keys_) {
    keys.push_back({{"path", key.path},
                    {"type", key.type},
                    {"range", key.range},
                    {"default", key.default_value},
                    {"required", key.required},
                    {"meaning", key.meaning}});
  }
  return {{"program", std::string(program)}, {"keys", std::move(keys)}};
}

nlohmann::json ConfigSchema::Number(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 9e15)
    return static_cast<int64_t>(value);
  return value;
}

int ConfigSchema::Find(const std::string& path) const {
  auto it = index_.find(path);
  return it == index_.end() ? -1 : static_cast<int>(it->second);
}

}  // namespace vigil
