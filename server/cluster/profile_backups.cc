#include "server/cluster/profile_backups.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "notify/signing.h"

namespace vigil::cluster {

std::string PeerRequestMessage(std::string_view method, std::string_view target,
                               std::string_view body) {
  return absl::StrCat(absl::string_view(method.data(), method.size()), " ",
                      absl::string_view(target.data(), target.size()), "\n",
                      absl::string_view(body.data(), body.size()));
}

std::string ProfilesTarget(std::string_view job) {
  return absl::StrCat(kProfilesPath, "?job=", absl::string_view(job.data(), job.size()));
}

absl::Status VerifyPeerRequest(std::string_view secret, std::string_view timestamp_header,
                               std::string_view signature_header, std::string_view method,
                               std::string_view target, std::string_view body, double now) {
  if (secret.empty())
    return absl::UnauthenticatedError(
        "peer requests need cluster.peer_secret_file on this server");
  return VerifyWebhook(secret, timestamp_header, signature_header,
                       PeerRequestMessage(method, target, body), now,
                       kPeerSignatureWindowSeconds);
}

OutboundRequest SignedProfilesRequest(std::string_view method, std::string_view base,
                                      std::string_view job, std::string body,
                                      std::string_view secret, double now) {
  OutboundRequest request;
  request.method = std::string(method);
  request.url = absl::StrCat(absl::string_view(base.data(), base.size()), kProfilesPath,
                             "?job=", UrlEncode(job));
  if (!secret.empty()) {
    const int64_t ts = static_cast<int64_t>(now);
    request.headers.emplace_back(kPeerTimestampHeader, absl::StrCat(ts));
    request.headers.emplace_back(
        kPeerSignatureHeader,
        SignWebhook(secret, ts, PeerRequestMessage(method, ProfilesTarget(job), body)));
  }
  if (!body.empty()) request.headers.emplace_back("Content-Type", "application/octet-stream");
  request.body = std::move(body);
  return request;
}

int ProfileSender::SendChanged(const std::vector<std::string>& jobs, double now,
                               std::vector<std::string>* errors) {
  const ProfileSenderOptions& o = options_;
  if (o.resend_every_calls > 0 && calls_++ % o.resend_every_calls == o.resend_every_calls - 1)
    sent_.clear();
  int delivered = 0;
  absl::flat_hash_map<std::string, size_t> still_sent;  // forget jobs gone
  // A successor that failed once is not tried again this round: a hung
  // one would hold the round (and the server's Stop) for a timeout a job.
  absl::flat_hash_set<std::string> failed;
  for (const std::string& job : jobs) {
    if (job.empty() || !o.ownership->Owner(job, "").ours) continue;
    std::string data = o.export_profiles(job);
    if (data.size() <= o.empty_bytes) continue;
    // A new successor (a shard joined or left) takes the same export.
    const std::vector<std::string> successors = o.ownership->SuccessorsHttp(job);
    const size_t hash = std::hash<std::string>{}(
        absl::StrCat(absl::StrJoin(successors, " "), "\n", data));
    if (auto it = sent_.find(job); it != sent_.end() && it->second == hash) {
      still_sent[job] = hash;
      continue;
    }
    bool all = true;
    for (const std::string& base : successors) {
      if (failed.contains(base)) {
        all = false;
        continue;
      }
      const TransportResult result =
          o.transport->Send(SignedProfilesRequest("POST", base, job, data, o.peer_secret, now),
                            o.timeout_seconds);
      if (result.http_status == 200) {
        ++delivered;
        continue;
      }
      all = false;
      failed.insert(base);
      if (errors != nullptr)
        errors->push_back(absl::StrCat(base, " refused the profiles of ", job, ": ",
                                       result.http_status == 0 ? result.error
                                                               : absl::StrCat("HTTP ", result.http_status, " ", result.body.substr(0, 200))));
    }
    if (all) still_sent[job] = hash;
  }
  sent_ = std::move(still_sent);
  return delivered;
}

absl::Status ProfileBackups::Hold(std::string_view job, std::string data) {
  if (data.size() > max_bytes_)
    return absl::ResourceExhaustedError(
        absl::StrCat("profiles of ", data.size(), " bytes; at most ", max_bytes_, " are kept"));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key(job);
  if (auto it = by_job_.find(key); it != by_job_.end()) {
    bytes_ -= it->second->data.size();
    copies_.erase(it->second);
    by_job_.erase(it);
  }
  bytes_ += data.size();
  copies_.push_back(Copy{key, std::move(data)});
  by_job_[key] = std::prev(copies_.end());
  while (bytes_ > max_bytes_) {
    bytes_ -= copies_.front().data.size();
    by_job_.erase(copies_.front().job);
    copies_.pop_front();
  }
  return absl::OkStatus();
}

std::optional<std::string> ProfileBackups::Find(std::string_view job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_job_.find(std::string(job));
  if (it == by_job_.end()) return std::nullopt;
  return it->second->data;
}

size_t ProfileBackups::jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_.size();
}

size_t ProfileBackups::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace vigil::cluster
