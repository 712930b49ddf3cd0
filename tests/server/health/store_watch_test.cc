// The store's health as the server shows it: the storage self-incident of
// StoreWatch (with a store whose health the test sets), and, with a real
// RocksDB store whose frame log cannot grow, readiness, liveness, metrics
// and agents refused with UNAVAILABLE until the disk takes writes again.
#include "server/health/store_watch.h"

#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

constexpr double kT0 = 1764000000.0;  // FakeClock's default start

// A memory store whose Health() the test sets.
class HealthSetStore : public SeriesStore {
 public:
  explicit HealthSetStore(Clock* clock)
      : base_(NewMemoryStore(StoreOptions{.clock = clock})) {}
  void SetHealth(absl::Status s) {
    std::lock_guard<std::mutex> l(mu_);
    health_ = std::move(s);
  }
  absl::Status Health() const override {
    std::lock_guard<std::mutex> l(mu_);
    return health_;
  }
  absl::StatusOr<SeriesId> Resolve(const SeriesKey& k) override { return base_->Resolve(k); }
  absl::StatusOr<SeriesId> Find(const SeriesKey& k) const override { return base_->Find(k); }
  absl::StatusOr<SeriesKey> Key(SeriesId id) const override { return base_->Key(id); }
  std::vector<SeriesInfo> ListSeries(const SeriesFilter& f) const override {
    return base_->ListSeries(f);
  }
  absl::Status Append(std::span<const FrameColumns> frames, AppendResult* r) override {
    return base_->Append(frames, r);
  }
  absl::StatusOr<std::vector<Sample>> Query(SeriesId id, double from, double to) const override {
    return base_->Query(id, from, to);
  }
  absl::StatusOr<std::vector<Aggregate>> QueryAggregate(SeriesId id, double from, double to,
                                                        double step) const override {
    return base_->QueryAggregate(id, from, to, step);
  }
  absl::StatusOr<uint64_t> AppendEvent(const Event& e) override { return base_->AppendEvent(e); }
  absl::Status DeleteEventsBefore(std::string_view s, double ts) override {
    return base_->DeleteEventsBefore(s, ts);
  }
  std::vector<Event> ListEvents(std::string_view s, double from, double to,
                                size_t limit) const override {
    return base_->ListEvents(s, from, to, limit);
  }
  absl::Status PutState(std::string_view k, std::string_view v) override {
    return base_->PutState(k, v);
  }
  absl::StatusOr<std::string> GetState(std::string_view k) const override {
    return base_->GetState(k);
  }
  absl::Status Flush() override { return base_->Flush(); }
  absl::Status EnforceRetention() override { return base_->EnforceRetention(); }
  StoreStats Stats() const override { return base_->Stats(); }

 private:
  std::unique_ptr<SeriesStore> base_;
  mutable std::mutex mu_;
  absl::Status health_;
};

TEST(StoreWatchTest, OpensAP1AfterTheGraceAndResolvesOnRecovery) {
  FakeClock clock(kT0);
  HealthSetStore store(&clock);
  std::vector<IncidentUpdate> published;
  StoreWatchOptions options;
  options.store = &store;
  options.clock = &clock;
  options.incident_after_seconds = 30;
  options.publish = [&](IncidentUpdate update) -> absl::StatusOr<std::string> {
    published.push_back(update);
    return std::string("inc-000007");
  };
  StoreWatch watch(options);

  watch.Check();
  EXPECT_TRUE(watch.Readiness().ok());
  store.SetHealth(absl::UnavailableError("storage refuses writes: disk full"));
  watch.Check();
  EXPECT_EQ(watch.Readiness().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(watch.unhealthy_since(), kT0);
  clock.Advance(29);
  watch.Check();
  EXPECT_TRUE(published.empty());  // a short hiccup pages nobody
  clock.Advance(1);
  watch.Check();
  ASSERT_EQ(published.size(), 1u);
  EXPECT_EQ(published[0].type, UpdateType::kOpened);
  EXPECT_EQ(published[0].incident.severity, Severity::kP1);
  EXPECT_EQ(published[0].incident.kind, "storage_degraded");
  EXPECT_EQ(published[0].incident.ts, kT0);
  EXPECT_NE(published[0].incident.summary.find("disk full"), std::string::npos);
  EXPECT_EQ(watch.open_incident(), "inc-000007");
  clock.Advance(60);
  watch.Check();
  EXPECT_EQ(published.size(), 1u);  // opened once

  store.SetHealth(absl::OkStatus());
  watch.Check();
  ASSERT_EQ(published.size(), 2u);
  EXPECT_EQ(published[1].type, UpdateType::kResolved);
  EXPECT_EQ(published[1].incident.id, "inc-000007");
  EXPECT_EQ(published[1].incident.state, IncidentState::kResolved);
  EXPECT_FALSE(watch.open_incident().has_value());
  EXPECT_FALSE(watch.unhealthy_since().has_value());
}

// An incident a previous process left firing is the watch's own: resolved
// at the first healthy check, not opened a second time while unhealthy.
TEST(StoreWatchTest, TakesOverTheIncidentAPreviousProcessLeftFiring) {
  FakeClock clock(kT0);
  HealthSetStore store(&clock);
  std::vector<IncidentUpdate> published;
  StoreWatchOptions options;
  options.store = &store;
  options.clock = &clock;
  options.incident_after_seconds = 0;
  options.publish = [&](IncidentUpdate update) -> absl::StatusOr<std::string> {
    published.push_back(update);
    return update.incident.id.empty() ? std::string("inc-000009") : update.incident.id;
  };
  options.claim = [] {
    Incident left;
    left.id = "inc-000004";
    left.kind = "storage_degraded";
    left.severity = Severity::kP1;
    return std::optional<Incident>(left);
  };
  {
    StoreWatch watch(options);
    watch.Start();
    watch.Stop();
    EXPECT_EQ(watch.open_incident(), "inc-000004");
    store.SetHealth(absl::UnavailableError("still full"));
    watch.Check();
    EXPECT_TRUE(published.empty());  // the old one goes on
    store.SetHealth(absl::OkStatus());
    watch.Check();
    ASSERT_EQ(published.size(), 1u);
    EXPECT_EQ(published[0].type, UpdateType::kResolved);
    EXPECT_EQ(published[0].incident.id, "inc-000004");
    EXPECT_EQ(published[0].incident.kind, "storage_degraded");
  }
}

TEST(StoreWatchTest, AHiccupShorterThanTheGraceOpensNothing) {
  FakeClock clock(kT0);
  HealthSetStore store(&clock);
  int published = 0;
  StoreWatchOptions options;
  options.store = &store;
  options.clock = &clock;
  options.publish = [&](IncidentUpdate) -> absl::StatusOr<std::string> {
    ++published;
    return std::string("inc-1");
  };
  StoreWatch watch(options);
  store.SetHealth(absl::UnavailableError("transient"));
  watch.Check();
  clock.Advance(10);
  store.SetHealth(absl::OkStatus());
  watch.Check();
  store.SetHealth(absl::UnavailableError("transient again"));
  clock.Advance(25);
  watch.Check();  // unhealthy since this check, not the first one
  EXPECT_EQ(published, 0);
}

// A server on RocksDB whose frame log cannot grow (a file size limit plays
// the full disk): the agent's batch is refused with UNAVAILABLE - it keeps
// it and resends -, readiness is 503, liveness 200 "degraded", and the
// metrics say so; once the disk takes writes the resent batch is stored
// and the server is ready again, without a restart.
TEST(StoreHealthServerTest, AFullDiskIsLoudAndRecoversWithoutRestart) {
  const std::string dir = ::testing::TempDir() + "vigil_store_health_server";
  std::filesystem::remove_all(dir);
  ServerOptions options = TestOptions();
  options.memory = false;
  options.data_dir = dir;
  TestServer t(options);
  IngestClient client(t.server.grpc_port());
  client.Open();
  v1::FrameBatch first = Batch(1, "n1", "a");
  *first.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
  *first.add_frames() = Frame("llm", kT0 - 10, {1}, {250});
  ASSERT_TRUE(client.Send(first).has_value());
  EXPECT_EQ(HttpGet(t.server.http_port(), "/readyz").status, 200);

  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit limit = old_limit;
  limit.rlim_cur = t.server.store()->Stats().frame_log_bytes;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  v1::FrameBatch second = Batch(2);
  *second.add_frames() = Frame("llm", kT0 - 9, {1}, {251});
  const bool acked = client.Send(second).has_value();
  const grpc::Status refused = client.Finish();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(acked);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();

  HttpResult ready = HttpGet(t.server.http_port(), "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find("\"ready\":false"), std::string::npos) << ready.body;
  EXPECT_NE(ready.body.find("frame log"), std::string::npos) << ready.body;
  HttpResult live = HttpGet(t.server.http_port(), "/healthz");
  EXPECT_EQ(live.status, 200);
  EXPECT_NE(live.body.find("\"status\":\"degraded\""), std::string::npos) << live.body;
  HttpResult metrics = HttpGet(t.server.http_port(), "/metrics");
  EXPECT_NE(metrics.body.find("\nvigil_storage_healthy 0\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("\nvigil_storage_write_errors_total 1\n"), std::string::npos);

  // The agent reconnects and resends what was not acked.
  client.Open();
  v1::FrameBatch resent = Batch(2, "n1", "a");
  *resent.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
  *resent.add_frames() = Frame("llm", kT0 - 9, {1}, {251});
  ASSERT_TRUE(client.Send(resent).has_value());
  EXPECT_TRUE(client.Finish().ok());
  EXPECT_EQ(HttpGet(t.server.http_port(), "/readyz").status, 200);
  std::vector<SeriesInfo> series = t.server.store()->ListSeries({});
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(t.server.store()->Query(series[0].id, 0, 1e12)->size(), 2u);
}

}  // namespace
}  // namespace vigil::testing
