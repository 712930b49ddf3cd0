// Copies of other shards' learned job profiles (baselines), so that a job
// whose whole pair died does not start learning again where it lands
// (docs/SCALING.md "Rebalancing"). A shard's leader sends the profiles of
// the jobs it watches to the shard each job would move to without it
// (Ownership::SuccessorsHttp), signed with the fleet's peer secret; the
// successor keeps the latest copy of each job here and hands it to its
// detection when the job arrives and no previous owner answers.
#ifndef VIGIL_SERVER_CLUSTER_PROFILE_BACKUPS_H_
#define VIGIL_SERVER_CLUSTER_PROFILE_BACKUPS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "notify/notify.h"
#include "server/cluster/ownership.h"

namespace vigil::cluster {

// How far a signed request's timestamp may lie from the receiver's clock.
inline constexpr double kPeerSignatureWindowSeconds = 60;
// The headers of a signed peer request (as for signed webhooks).
inline constexpr char kPeerTimestampHeader[] = "X-Vigil-Timestamp";
inline constexpr char kPeerSignatureHeader[] = "X-Vigil-Signature";
// Where a job's profiles are read and sent: /api/v1/cluster/profiles.
inline constexpr char kProfilesPath[] = "/api/v1/cluster/profiles";

// What a profiles request signs as its target: the path and the job,
// unescaped ("/api/v1/cluster/profiles?job=<job>").
std::string ProfilesTarget(std::string_view job);

// The message a peer request signs (notify/signing.h SignWebhook, headers
// X-Vigil-Timestamp and X-Vigil-Signature): its method, target (path and
// query) and body, so a signature cannot be replayed on another request.
std::string PeerRequestMessage(std::string_view method, std::string_view target,
                               std::string_view body);

// Checks a peer request's signature headers under `secret`.
// kUnauthenticated when no secret is configured here, or the signature is
// missing or wrong; kDeadlineExceeded when its timestamp lies more than
// kPeerSignatureWindowSeconds from `now`.
absl::Status VerifyPeerRequest(std::string_view secret, std::string_view timestamp_header,
                               std::string_view signature_header, std::string_view method,
                               std::string_view target, std::string_view body, double now);

// A request for `job`'s profiles at `base` (a server's HTTP base URL):
// GET reads what that server learned, POST (with `body`, an export) gives
// it a copy. Signed with `secret` at `now` when a secret is set.
OutboundRequest SignedProfilesRequest(std::string_view method, std::string_view base,
                                      std::string_view job, std::string body,
                                      std::string_view secret, double now);

// The latest profiles export (Detector::ExportProfiles) received for each
// job, at most `max_bytes` in all: past it the copies received longest
// ago are dropped. Thread-safe.
class ProfileBackups {
 public:
  explicit ProfileBackups(size_t max_bytes = 64 << 20) : max_bytes_(max_bytes) {}

  // Keeps `data` as `job`'s copy (replacing an older one). A copy larger
  // than max_bytes is refused with kResourceExhausted.
  absl::Status Hold(std::string_view job, std::string data);
  // `job`'s copy, if one is held.
  std::optional<std::string> Find(std::string_view job) const;

  size_t jobs() const;
  size_t bytes() const;

 private:
  struct Copy {
    std::string job;
    std::string data;
  };
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Copy> copies_ ABSL_GUARDED_BY(mu_);  // oldest first
  absl::flat_hash_map<std::string, std::list<Copy>::iterator> by_job_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// What ProfileSender needs. Pointers are not owned and must outlive it.
struct ProfileSenderOptions {
  const Ownership* ownership = nullptr;  // required
  Transport* transport = nullptr;        // required
  std::string peer_secret;               // required: copies go signed
  // The export of a job (DetectionService::ExportProfiles); required.
  std::function<std::string(const std::string& job)> export_profiles;
  // Exports this size or smaller hold no profile and are not sent.
  size_t empty_bytes = 0;
  double timeout_seconds = 5;
  // Every this many calls every job's copy is sent again, changed or not:
  // a successor keeps copies in memory only, and one that restarted
  // within its lease (so the map never changed) lost them.
  int resend_every_calls = 10;
};

// Sends the profiles of the jobs a shard watches to each job's successors
// (Ownership::SuccessorsHttp), a job's only when they or its successors
// changed since they last reached every successor, and all of them every
// resend_every_calls calls. Not thread-safe: one caller (the shard
// leader's periodic thread).
class ProfileSender {
 public:
  explicit ProfileSender(ProfileSenderOptions options) : options_(std::move(options)) {}

  // Sends what changed of `jobs` (those this shard owns; others are
  // skipped) at unix time `now`. Returns how many copies were delivered;
  // a successor that does not take one is not tried again this round, and
  // what it missed is sent next time (its failure is in `errors`, if
  // given).
  int SendChanged(const std::vector<std::string>& jobs, double now,
                  std::vector<std::string>* errors = nullptr);

 private:
  const ProfileSenderOptions options_;
  // Per job: a hash of the export every successor took last.
  absl::flat_hash_map<std::string, size_t> sent_;
  int calls_ = 0;
};

}  // namespace vigil::cluster

#endif  // VIGIL_SERVER_CLUSTER_PROFILE_BACKUPS_H_
