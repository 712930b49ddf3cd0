// Reading a server's config again while it runs: what `vigil-server
// --check-config` checks, and what a reload (SIGHUP, POST /-/reload) may
// change in a running server and what waits for its next start.
#ifndef VIGIL_SERVER_CONFIG_RELOAD_H_
#define VIGIL_SERVER_CONFIG_RELOAD_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/config/config.h"

namespace vigil {

// Where a server's options come from: defaults, the config file, the
// command line's flags on top.
struct ConfigSource {
  // What the options are before the file applies (built-in defaults such
  // as the web UI's directory).
  ServerOptions base;
  // The JSON config file; empty: none.
  std::string file;
  // Applied after the file (the flags, which win); may be null.
  std::function<void(ServerOptions*)> overrides;
};

// A config as read from its source.
struct LoadedConfig {
  ServerOptions options;
  // The file as parsed (an empty object without a file): what tells two
  // loads apart, key by key.
  nlohmann::json document = nlohmann::json::object();
  // The rules it names (ParseServerRules; the built-in catalogue without
  // a rules file), or why they cannot be had: read once with the file's
  // hash below, so a reload applies the rules it checked.
  absl::StatusOr<RuleSet> rules = DefaultRuleSet();
  // SHA-256 (hex) of the rules file's content, "" without one or when it
  // cannot be read: a rule change is a change too.
  std::string rules_sha256;
};

// Reads `source`: the file parsed onto `base`, the overrides applied, the
// result validated (ValidateServerOptions), the rules file read and parsed
// (its errors are kept in `rules` for CheckConfigFiles). kNotFound when
// the config file cannot be read; kInvalidArgument listing every error,
// one per line, each with the file and its key path.
absl::StatusOr<LoadedConfig> LoadConfig(const ConfigSource& source);

// What a running server would still fail on at its next start: every file
// the config names (keys named "file" or ending in "_file") can be read,
// and the rules loaded (`rules`). kInvalidArgument listing every problem,
// one per line, each with its key path.
absl::Status CheckConfigFiles(const LoadedConfig& config);

// Whether a running server takes a change of the key at `path` (as
// ChangedKeys names it) at once: API tokens ("auth"), escalation (users,
// schedules, policies, interlocks), notification receivers and channels,
// and the rules (the file named, or its content). Everything else waits
// for a restart.
bool ReloadableKey(std::string_view path);

// The key paths ("storage.block_samples", "escalation.schedules") whose
// values differ between `before` and `after`, in order: objects are
// compared key by key (a section added or removed as its keys), anything
// else whole. A changed rules file's
// content is "detection.rules_file (content)".
std::vector<std::string> ChangedKeys(const LoadedConfig& before, const LoadedConfig& after);

}  // namespace vigil

#endif  // VIGIL_SERVER_CONFIG_RELOAD_H_
