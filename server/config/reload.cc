#include "server/config/reload.h"

#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "notify/signing.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

// The keys a running server applies at once; a change below one of them
// counts as that key's.
constexpr std::string_view kReloadableKeys[] = {
    "auth", "escalation", "notifications.receivers", "notifications.channels",
    "detection.rules_file"};

// Appends to `changed` the paths below `path` whose values differ.
void Compare(const Json& before, const Json& after, const std::string& path,
             std::vector<std::string>* changed) {
  if (before == after) return;
  // A section added or removed counts as its keys added or removed.
  const Json empty = Json::object();
  const Json& from = before.is_null() && after.is_object() ? empty : before;
  const Json& to = after.is_null() && before.is_object() ? empty : after;
  if (!from.is_object() || !to.is_object()) {
    changed->push_back(path.empty() ? "(top level)" : path);
    return;
  }
  std::set<std::string> keys;
  for (const auto& [key, value] : from.items()) keys.insert(key);
  for (const auto& [key, value] : to.items()) keys.insert(key);
  for (const std::string& key : keys) {
    const Json none;
    Compare(from.contains(key) ? from[key] : none, to.contains(key) ? to[key] : none,
            path.empty() ? key : absl::StrCat(path, ".", key), changed);
  }
}

// Adds an error for every file named below `path` of `node` that cannot be
// read (the rules file is checked by parsing it).
void CheckFiles(const Json& node, const std::string& path, std::vector<std::string>* errors) {
  if (!node.is_object()) return;
  for (const auto& [key, value] : node.items()) {
    const std::string at = path.empty() ? key : absl::StrCat(path, ".", key);
    if (value.is_object()) {
      CheckFiles(value, at, errors);
    } else if (value.is_string() && (key == "file" || absl::EndsWith(key, "_file")) &&
               at != "detection.rules_file" && !value.get<std::string>().empty()) {
      if (std::ifstream in(value.get<std::string>()); !in)
        errors->push_back(absl::StrCat(at, ": cannot read ", value.get<std::string>()));
    }
  }
}

}  // namespace

absl::StatusOr<LoadedConfig> LoadConfig(const ConfigSource& source) {
  LoadedConfig loaded;
  loaded.options = source.base;
  if (!source.file.empty()) {
    absl::StatusOr<std::string> text = ReadConfigFile(source.file);
    if (!text.ok()) return text.status();
    VIGIL_RETURN_IF_ERROR(ParseServerConfigFile(source.file, *text, &loaded.options));
    loaded.document = Json::parse(*text, nullptr, false);
  }
  if (source.overrides) source.overrides(&loaded.options);
  if (absl::Status s = ValidateServerOptions(loaded.options); !s.ok()) return s;
  if (const std::string& path = loaded.options.rules_file; !path.empty()) {
    absl::StatusOr<std::string> text = ReadConfigFile(path);
    if (text.ok()) {
      loaded.rules_sha256 = HexEncode(Sha256(*text));
      loaded.rules = ParseServerRules(path, *text);
    } else {
      loaded.rules = text.status();
    }
  }
  return loaded;
}

absl::Status CheckConfigFiles(const LoadedConfig& config) {
  std::vector<std::string> errors;
  CheckFiles(config.document, "", &errors);
  if (!config.rules.ok())
    errors.push_back(absl::StrCat("detection.rules_file: ", config.rules.status().message()));
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

bool ReloadableKey(std::string_view path) {
  const absl::string_view at(path.data(), path.size());
  for (std::string_view key : kReloadableKeys) {
    const absl::string_view prefix(key.data(), key.size());
    // The key itself, a key below it, or a note on it ("... (content)").
    if (absl::StartsWith(at, prefix) &&
        (at.size() == prefix.size() || at[prefix.size()] == '.' || at[prefix.size()] == ' '))
      return true;
  }
  return false;
}

std::vector<std::string> ChangedKeys(const LoadedConfig& before, const LoadedConfig& after) {
  std::vector<std::string> changed;
  Compare(before.document, after.document, "", &changed);
  if (before.options.rules_file == after.options.rules_file &&
      before.rules_sha256 != after.rules_sha256)
    changed.push_back("detection.rules_file (content)");
  return changed;
}

}  // namespace vigil
