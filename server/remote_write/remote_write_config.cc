// The "remote_write" section of the server config.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "server/remote_write/remote_write.h"

namespace vigil {

void ParseRemoteWriteSection(const nlohmann::json& section,
                             JsonConfigReader& r,
                             std::optional<RemoteWriteOptions>* out) {
  const std::string path = "remote_write";
  if (!r.CheckObject(section, path,
                     {"url", "raw_metrics", "batch_samples", "flush_seconds",
                      "max_pending_samples", "timeout_seconds", "grace_seconds",
                      "retry_base_seconds", "retry_max_seconds",
                      "shutdown_flush_seconds", "bearer_token_file",
                      "basic_auth"}))
    return;
  const size_t errors_before = r.errors().size();
  RemoteWriteOptions o;
  r.String(section, path, "url", &o.url);
  r.StringList(section, path, "raw_metrics", &o.raw_metrics);
  r.Integer(section, path, "batch_samples", 1, 1'000'000, 1, &o.batch_samples);
  r.Integer(section, path, "max_pending_samples", 1, 1'000'000'000, 1,
            &o.max_pending_samples);
  r.Positive(section, path, "flush_seconds", 1, 3600, &o.flush_seconds);
  r.Positive(section, path, "timeout_seconds", 1, 600, &o.timeout_seconds);
  r.Positive(section, path, "grace_seconds", 1, 600, &o.grace_seconds);
  r.Positive(section, path, "retry_base_seconds", 1, 3600,
             &o.retry_base_seconds);
  r.Positive(section, path, "retry_max_seconds", 1, 86400,
             &o.retry_max_seconds);
  r.Positive(section, path, "shutdown_flush_seconds", 1, 600,
             &o.shutdown_flush_seconds);
  r.String(section, path, "bearer_token_file", &o.bearer_token_file);
  if (auto it = section.find("basic_auth"); it != section.end() &&
      r.CheckObject(*it, path + ".basic_auth", {"username", "password_file"})) {
    r.String(*it, path + ".basic_auth", "username", &o.basic_auth_username);
    r.String(*it, path + ".basic_auth", "password_file",
             &o.basic_auth_password_file);
  }
  if (r.errors().size() != errors_before) return;
  // Combinations and patterns; each line already names its key.
  if (absl::Status s = ValidateRemoteWriteOptions(o); !s.ok()) {
    for (absl::string_view line : absl::StrSplit(s.message(), '\n')) {
      const size_t colon = line.find(": ");
      r.Error(std::string(line.substr(0, colon)),
              std::string(line.substr(colon + 2)));
    }
    return;
  }
  *out = std::move(o);
}

}  // namespace vigil
