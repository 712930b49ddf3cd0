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
  r.String(section, path, "url", &o.url,
           KeyDoc::Required("Where write requests are POSTed (https:// uses the system "
                            "CA store)",
                            "http:// or https:// URL"));
  r.StringList(section, path, "raw_metrics", &o.raw_metrics,
               {"Metrics whose every raw sample is sent too (name matched in full); "
                "empty: 1-minute rollups only",
                "ECMAScript regexes"});
  r.Integer(section, path, "batch_samples", 1, 1'000'000, 1, &o.batch_samples,
            "Most samples per request");
  r.Integer(section, path, "max_pending_samples", 1, 1'000'000'000, 1,
            &o.max_pending_samples,
            "Samples waiting at most (queued and in flight); past it the oldest are "
            "dropped and counted");
  r.Positive(section, path, "flush_seconds", 1, 3600, &o.flush_seconds,
             "Seconds a smaller request waits for more samples before it goes");
  r.Positive(section, path, "timeout_seconds", 1, 600, &o.timeout_seconds,
             "Seconds one request may take");
  r.Positive(section, path, "grace_seconds", 1, 600, &o.grace_seconds,
             "Seconds after a minute's end (node clock) its late samples still count "
             "before the minute is sent");
  r.Positive(section, path, "retry_base_seconds", 1, 3600,
             &o.retry_base_seconds,
             "First retry delay in seconds; retries back off exponentially with "
             "jitter, and honour Retry-After up to 10 times the cap");
  r.Positive(section, path, "retry_max_seconds", 1, 86400,
             &o.retry_max_seconds, "Cap of the retry delay, in seconds");
  r.Positive(section, path, "shutdown_flush_seconds", 1, 600,
             &o.shutdown_flush_seconds,
             "Seconds pending samples get to go out at shutdown; the rest are dropped");
  r.String(section, path, "bearer_token_file", &o.bearer_token_file,
           "File holding a bearer token sent with every request, read at start; not "
           "with basic_auth. Empty: none");
  if (const nlohmann::json* it = r.Object(section, path, "basic_auth",
                                "HTTP basic auth instead of a bearer token");
      it != nullptr &&
      r.CheckObject(*it, path + ".basic_auth", {"username", "password_file"})) {
    r.String(*it, path + ".basic_auth", "username", &o.basic_auth_username,
             "User name of basic auth");
    r.String(*it, path + ".basic_auth", "password_file",
             &o.basic_auth_password_file,
             "File holding the password, read at start");
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
