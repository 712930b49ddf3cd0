#include "server/cluster/cluster_member.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace vigil::cluster {
namespace {

// Members expire this long before etcd would let the standby win.
constexpr double kLeaderMarginSeconds = 1.0;
// Page marks and shared operations outlive any escalation that could
// still repeat them: each lives at least a day (a new lease every hour).
constexpr int kMarksLeaseSeconds = 25 * 3600;
constexpr double kMarksLeaseRotateSeconds = 3600;
// PutSoon's bound on writes waiting for etcd.
constexpr size_t kMaxPendingPuts = 10000;

bool ViewsDiffer(const ClusterView& a, const ClusterView& b) {
  return !(a.map == b.map) || a.registered != b.registered ||
         a.shard_leader != b.shard_leader || a.fleet_leader != b.fleet_leader ||
         a.shard_leader_replica != b.shard_leader_replica ||
         a.fleet_leader_shard != b.fleet_leader_shard;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
          c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status ValidateClusterOptions(const ClusterOptions& options) {
  if (options.etcd_endpoints.empty()) {
    return absl::InvalidArgumentError("cluster.etcd_endpoints: at least one etcd URL is required");
  }
  for (const std::string& endpoint : options.etcd_endpoints) {
    if (!absl::StartsWith(endpoint, "http://") && !absl::StartsWith(endpoint, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster.etcd_endpoints: '", endpoint, "' is not an http:// or https:// URL"));
    }
  }
  if (options.etcd_cert_file.empty() != options.etcd_key_file.empty()) {
    return absl::InvalidArgumentError(
        "cluster.etcd_cert_file and cluster.etcd_key_file: give both or neither");
  }
  if (options.etcd_username.empty() != options.etcd_password_file.empty()) {
    return absl::InvalidArgumentError(
        "cluster.etcd_username and cluster.etcd_password_file: give both or neither");
  }
  if (options.prefix.empty() || options.prefix.front() != '/') {
    return absl::InvalidArgumentError("cluster.prefix must start with '/'");
  }
  if (!ValidName(options.shard)) {
    return absl::InvalidArgumentError(
        "cluster.shard (--shard) must be 1-63 letters, digits, '-', '_' or '.'");
  }
  if (options.shard.front() == '_') {
    return absl::InvalidArgumentError("cluster.shard must not start with '_' (reserved)");
  }
  if (!ValidName(options.replica)) {
    return absl::InvalidArgumentError(
        "cluster.replica (--replica) must be 1-63 letters, digits, '-', '_' or '.'");
  }
  if (options.advertise_grpc.empty() || options.advertise_grpc.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        "cluster.advertise_grpc (--advertise-grpc) must be the host:port agents reach this "
        "server at");
  }
  if (!absl::StartsWith(options.advertise_http, "http://") &&
      !absl::StartsWith(options.advertise_http, "https://")) {
    return absl::InvalidArgumentError(
        "cluster.advertise_http (--advertise-http) must be the http(s):// URL of this server's "
        "API");
  }
  if (options.lease_seconds < 2 || options.lease_seconds > 60) {
    return absl::InvalidArgumentError("cluster.lease_seconds must be within [2, 60]");
  }
  if (!(options.poll_seconds > 0) || options.poll_seconds * 3 > options.lease_seconds) {
    return absl::InvalidArgumentError(
        "cluster.poll_seconds must be > 0 and at most a third of lease_seconds");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ClusterMember>> ClusterMember::Create(ClusterOptions options,
                                                                     Clock* clock) {
  if (absl::Status valid = ValidateClusterOptions(options); !valid.ok()) return valid;
  EtcdClientOptions etcd_options;
  etcd_options.endpoints = options.etcd_endpoints;
  etcd_options.timeout_seconds = std::max(0.5, options.lease_seconds / 4.0);
  etcd_options.tls = {options.etcd_ca_file, options.etcd_cert_file, options.etcd_key_file};
  etcd_options.username = options.etcd_username;
  if (!options.etcd_password_file.empty()) {
    std::ifstream file(options.etcd_password_file);
    if (!file) {
      return absl::NotFoundError(absl::StrCat("cluster.etcd_password_file: cannot read ",
                                              options.etcd_password_file));
    }
    std::getline(file, etcd_options.password);  // the first line; no newline
  }
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create(std::move(etcd_options));
  if (!etcd.ok()) return etcd.status();
  return std::unique_ptr<ClusterMember>(
      new ClusterMember(std::move(options), std::move(*etcd), clock));
}

ClusterMember::ClusterMember(ClusterOptions options, std::unique_ptr<EtcdClient> etcd,
                             Clock* clock)
    : options_(std::move(options)),
      etcd_(std::move(etcd)),
      clock_(clock),
      id_(absl::StrCat(options_.shard, "/", options_.replica)) {}

ClusterMember::~ClusterMember() { Stop(); }

void ClusterMember::AddListener(std::function<void(const ClusterView&)> listener) {
  listeners_.push_back(std::move(listener));
}

std::string ClusterMember::Key(std::string_view suffix) const {
  return absl::StrCat(options_.prefix, "/", std::string(suffix));
}

Member ClusterMember::self() const {
  return Member{options_.shard, options_.replica, options_.advertise_grpc,
                options_.advertise_http};
}

void ClusterMember::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void ClusterMember::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Hand over at once instead of after the lease: the standby polls.
  if (lease_ != 0) {
    (void)etcd_->DeleteIfValue(Key(absl::StrCat("leaders/", options_.shard)), id_);
    (void)etcd_->DeleteIfValue(Key("leaders/_fleet"), id_);
    (void)etcd_->RevokeLease(lease_);
    lease_ = 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  view_.shard_leader = view_.fleet_leader = view_.registered = false;
}

void ClusterMember::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    ClusterView next = Round();
    lock.lock();
    const bool changed = ViewsDiffer(next, view_);
    view_ = next;
    leader_until_ = last_renewal_ + options_.lease_seconds - kLeaderMarginSeconds;
    if (changed) {
      const ClusterView snapshot = view_;
      lock.unlock();
      for (const auto& listener : listeners_) listener(snapshot);
      lock.lock();
    }
    if (stop_) break;
    clock_->WaitUntil(lock, cv_, clock_->Now() + options_.poll_seconds);
  }
}

bool ClusterMember::Leads(const std::string& key, const std::string& value,
                          ClusterView* view) {
  absl::StatusOr<std::optional<KeyValue>> claim = etcd_->Get(key);
  if (!claim.ok()) {
    view->last_error = std::string(claim.status().message());
    return false;
  }
  if (!claim->has_value()) {
    absl::StatusOr<bool> won = etcd_->CreateIfAbsent(key, value, lease_);
    if (!won.ok()) {
      view->last_error = std::string(won.status().message());
      return false;
    }
    if (*won) {
      std::fprintf(stderr, "vigil-server: cluster: %s now leads %s\n", id_.c_str(), key.c_str());
    }
    return *won;
  }
  return (*claim)->value == value && (*claim)->lease == lease_;
}

ClusterView ClusterMember::Round() {
  ClusterView view;
  {
    std::lock_guard<std::mutex> lock(mu_);
    view = view_;
  }
  view.last_error.clear();
  const double now = clock_->Now();
  // Renew (or register after a loss).
  if (lease_ != 0 && now - last_renewal_ >= options_.lease_seconds / 3.0) {
    absl::StatusOr<int64_t> ttl = etcd_->KeepAlive(lease_);
    if (ttl.ok()) {
      last_renewal_ = now;
    } else if (absl::IsNotFound(ttl.status())) {
      std::fprintf(stderr, "vigil-server: cluster: lease lost (%s); registering again\n",
                   std::string(ttl.status().message()).c_str());
      lease_ = 0;
    } else {
      view.last_error = std::string(ttl.status().message());
    }
  }
  if (lease_ == 0) {
    view.registered = false;
    absl::StatusOr<int64_t> lease = etcd_->GrantLease(options_.lease_seconds);
    if (lease.ok()) {
      absl::Status put = etcd_->Put(
          Key(absl::StrCat("members/", options_.shard, "/", options_.replica)),
          EncodeMember(self()), *lease);
      if (put.ok()) {
        lease_ = *lease;
        last_renewal_ = now;
      } else {
        (void)etcd_->RevokeLease(*lease);
        view.last_error = std::string(put.message());
      }
    } else {
      view.last_error = std::string(lease.status().message());
    }
  }
  const bool renewed = lease_ != 0 && now - last_renewal_ < options_.lease_seconds -
                                                              kLeaderMarginSeconds;
  view.registered = lease_ != 0;
  if (!renewed) {
    // Cannot prove our lease is alive: lead nothing (the standby may have
    // the shard already), keep the last map we read.
    view.shard_leader = view.fleet_leader = false;
    return view;
  }
  absl::StatusOr<std::vector<KeyValue>> records = etcd_->GetPrefix(Key("members/"));
  if (records.ok()) {
    std::vector<Member> members;
    for (const KeyValue& record : *records) {
      absl::StatusOr<Member> member = DecodeMember(record.value);
      if (member.ok()) members.push_back(std::move(*member));
    }
    view.map = ShardMap(std::move(members));
  } else {
    view.last_error = std::string(records.status().message());
  }
  // A claim holds the leader's "<shard>/<replica>"; "" when nobody leads.
  // Unknown (etcd did not answer): the last view's stays.
  auto holder = [this](const std::string& key, bool ours) -> std::optional<std::string> {
    if (ours) return id_;
    absl::StatusOr<std::optional<KeyValue>> claim = etcd_->Get(key);
    if (!claim.ok()) return std::nullopt;
    return claim->has_value() ? (*claim)->value : std::string();
  };
  const std::string shard_key = Key(absl::StrCat("leaders/", options_.shard));
  view.shard_leader = Leads(shard_key, id_, &view);
  if (std::optional<std::string> who = holder(shard_key, view.shard_leader)) {
    const size_t slash = who->rfind('/');
    view.shard_leader_replica = slash == std::string::npos ? *who : who->substr(slash + 1);
  }
  const std::string fleet_key = Key("leaders/_fleet");
  view.fleet_leader = Leads(fleet_key, id_, &view);
  if (std::optional<std::string> who = holder(fleet_key, view.fleet_leader))
    view.fleet_leader_shard = who->substr(0, who->rfind('/'));
  FlushPendingPuts(&view);
  for (Watch& watch : watches_) {
    absl::StatusOr<std::vector<KeyValue>> entries = etcd_->GetPrefix(watch.prefix);
    if (!entries.ok()) {
      view.last_error = std::string(entries.status().message());
      continue;
    }
    std::pair<int64_t, size_t> seen{0, entries->size()};
    std::vector<std::pair<std::string, std::string>> named;
    for (KeyValue& entry : *entries) {
      seen.first = std::max(seen.first, entry.mod_revision);
      named.emplace_back(entry.key.substr(watch.prefix.size()), std::move(entry.value));
    }
    // A deletion alone lowers the count: not reported, but remembered.
    const bool changed = seen.first > watch.seen.first ||
                         (seen.first == watch.seen.first && seen.second > watch.seen.second);
    watch.seen = seen;
    if (changed) watch.callback(named);
  }
  return view;
}

absl::Status ClusterMember::ShareFleetState(const std::string& name, const std::string& value,
                                            double keep_seconds) {
  int64_t lease = 0;
  if (keep_seconds > 0) {
    const double ttl = std::min(keep_seconds, double{std::numeric_limits<int>::max()});
    absl::StatusOr<int64_t> granted = etcd_->GrantLease(static_cast<int>(std::ceil(ttl)));
    if (!granted.ok()) return granted.status();
    lease = *granted;
  }
  return etcd_->Put(Key(absl::StrCat("safety/fleet/", name)), value, lease);
}

void ClusterMember::OnFleetState(
    std::function<void(const std::vector<std::pair<std::string, std::string>>&)> callback) {
  WatchPrefix("safety/fleet/", std::move(callback));
}

void ClusterMember::WatchPrefix(
    const std::string& prefix,
    std::function<void(const std::vector<std::pair<std::string, std::string>>&)> callback) {
  watches_.push_back(Watch{Key(prefix), std::move(callback)});
}

void ClusterMember::PutSoon(const std::string& key, std::string value, int ttl_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_puts_.size() >= kMaxPendingPuts) {
    std::fprintf(stderr, "vigil-server: cluster: %zu writes wait for etcd; dropping %s\n",
                 pending_puts_.size(), pending_puts_.front().key.c_str());
    pending_puts_.erase(pending_puts_.begin());
  }
  pending_puts_.push_back(PendingPut{Key(key), std::move(value), std::max(1, ttl_seconds)});
}

void ClusterMember::FlushPendingPuts(ClusterView* view) {
  std::vector<PendingPut> puts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    puts.swap(pending_puts_);
  }
  size_t done = 0;
  for (; done < puts.size(); ++done) {
    const PendingPut& put = puts[done];
    absl::StatusOr<int64_t> lease = etcd_->GrantLease(put.ttl_seconds);
    absl::Status status = lease.ok() ? etcd_->Put(put.key, put.value, *lease) : lease.status();
    if (!status.ok()) {
      view->last_error = std::string(status.message());
      break;  // etcd is away: keep the rest, in order, for the next round
    }
  }
  if (done == puts.size()) return;
  std::lock_guard<std::mutex> lock(mu_);
  pending_puts_.insert(pending_puts_.begin(), std::make_move_iterator(puts.begin() + done),
                       std::make_move_iterator(puts.end()));
}

absl::StatusOr<bool> ClusterMember::TakeRemediationSlot(const std::string& kind, int limit,
                                                        double window_seconds) {
  if (limit <= 0) return false;
  absl::StatusOr<int64_t> lease =
      etcd_->GrantLease(std::max(1, static_cast<int>(std::ceil(window_seconds))));
  if (!lease.ok()) return lease.status();
  for (int slot = 0; slot < limit; ++slot) {
    absl::StatusOr<bool> taken = etcd_->CreateIfAbsent(
        Key(absl::StrCat("safety/slots/", kind, "/", slot)), id_, *lease);
    if (!taken.ok()) {
      (void)etcd_->RevokeLease(*lease);
      return taken.status();
    }
    if (*taken) return true;
  }
  (void)etcd_->RevokeLease(*lease);
  return false;
}

absl::Status ClusterMember::ClearRemediationSlots() {
  return etcd_->DeletePrefix(Key("safety/slots/"));
}

absl::Status ClusterMember::ShareOperation(const std::string& incident_key,
                                           const std::string& operation) {
  return PutForADay(Key(absl::StrCat("safety/ops/", options_.shard, "/", incident_key)),
                    operation);
}

void ClusterMember::OnSharedOperations(
    std::function<void(const std::vector<std::pair<std::string, std::string>>&)> callback) {
  WatchPrefix(absl::StrCat("safety/ops/", options_.shard, "/"), std::move(callback));
}

ClusterView ClusterMember::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

bool ClusterMember::IsShardLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_.shard_leader && clock_->Now() < leader_until_;
}

bool ClusterMember::IsFleetLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_.fleet_leader && clock_->Now() < leader_until_;
}

absl::Status ClusterMember::PutForADay(const std::string& key, const std::string& value) {
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (clock_->Now() - marks_lease_granted_ < kMarksLeaseRotateSeconds) lease = marks_lease_;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (lease == 0) {
      absl::StatusOr<int64_t> granted = etcd_->GrantLease(kMarksLeaseSeconds);
      if (!granted.ok()) return granted.status();
      lease = *granted;
      std::lock_guard<std::mutex> lock(mu_);
      marks_lease_ = lease;
      marks_lease_granted_ = clock_->Now();
    }
    absl::Status put = etcd_->Put(key, value, lease);
    if (!absl::IsNotFound(put)) return put;
    lease = 0;  // the day's lease ran out: take a new one
  }
  return absl::UnavailableError("could not keep a lease for a day's keys");
}

absl::Status ClusterMember::MarkPaged(const std::string& key) {
  return PutForADay(Key(absl::StrCat("pages/", options_.shard, "/", key)), options_.replica);
}

absl::StatusOr<absl::flat_hash_set<std::string>> ClusterMember::PagedKeys() {
  return NamesUnder(Key(absl::StrCat("pages/", options_.shard, "/")));
}

absl::Status ClusterMember::MarkActionStarted(const std::string& key) {
  return PutForADay(Key(absl::StrCat("actions/", options_.shard, "/", key)), options_.replica);
}

absl::StatusOr<absl::flat_hash_set<std::string>> ClusterMember::StartedActions() {
  return NamesUnder(Key(absl::StrCat("actions/", options_.shard, "/")));
}

absl::StatusOr<absl::flat_hash_set<std::string>> ClusterMember::NamesUnder(
    const std::string& prefix) {
  absl::StatusOr<std::vector<KeyValue>> marks = etcd_->GetPrefix(prefix);
  if (!marks.ok()) return marks.status();
  absl::flat_hash_set<std::string> keys;
  for (const KeyValue& mark : *marks) keys.insert(mark.key.substr(prefix.size()));
  return keys;
}

}  // namespace vigil::cluster
