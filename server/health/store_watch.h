// Watches the store's health for the server: readiness (GET /readyz) and a
// P1 self-incident "storage_degraded" while the store refuses writes (a
// full disk, a read-only data dir). The store recovers on its own once the
// cause is gone (storage/series_store.h, SeriesStore::Health); the watch
// then resolves the incident. Agents are refused with UNAVAILABLE meanwhile
// and keep their frames in their spools.
#ifndef VIGIL_SERVER_HEALTH_STORE_WATCH_H_
#define VIGIL_SERVER_HEALTH_STORE_WATCH_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "rules/incident.h"
#include "storage/series_store.h"

namespace vigil {

// Publishes a self-incident update (DetectionService::PublishExternal in
// the server) and returns its id.
using IncidentPublisher =
    std::function<absl::StatusOr<std::string>(IncidentUpdate update)>;

// Hands over the "storage_degraded" incident a previous process left
// firing (DetectionService::ClaimInherited in the server), or nullopt.
using InheritedClaim = std::function<std::optional<Incident>()>;

struct StoreWatchOptions {
  SeriesStore* store = nullptr;  // required, not owned
  Clock* clock = nullptr;        // required, not owned
  // Where the self-incident goes; null: nowhere (readiness only).
  IncidentPublisher publish;
  // Asked once by Start(): an incident left firing by a previous process
  // is this watch's own, resolved at the first healthy check, continued
  // (not opened again) while unhealthy. Null: none.
  InheritedClaim claim;
  // Clock seconds between health checks.
  double check_seconds = 1;
  // How long the store must stay unhealthy before the incident opens, so
  // that a write error it recovers from at once pages nobody.
  double incident_after_seconds = 30;
};

// Thread-safe.
class StoreWatch {
 public:
  explicit StoreWatch(StoreWatchOptions options);
  // Stops the thread if running.
  ~StoreWatch();

  // Takes over a claimed incident (StoreWatchOptions::claim), then starts
  // the check thread. Idempotent.
  void Start();
  // Stops it. Idempotent.
  void Stop();

  // One check at the clock's time: opens the incident once the store has
  // been unhealthy for incident_after_seconds, resolves it once healthy.
  void Check();

  // The store's health (OK: ready to accept frames).
  absl::Status Readiness() const { return options_.store->Health(); }
  // The id of the open storage incident, if any.
  std::optional<std::string> open_incident() const;
  // Clock time since which the store has been unhealthy, if it is.
  std::optional<double> unhealthy_since() const;

 private:
  void Loop();

  const StoreWatchOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<double> unhealthy_since_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> incident_ ABSL_GUARDED_BY(mu_);
  // The incident as last published, for its resolution.
  Incident published_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_HEALTH_STORE_WATCH_H_
