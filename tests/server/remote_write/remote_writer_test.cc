// RemoteWriter with a scripted transport and a fake clock: what is sent
// (decoded), batching, retries, refusals, the bounded queue, shutdown and
// the /metrics text.
#include "server/remote_write/remote_write.h"

#include <snappy.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/server/remote_write/decode.h"
#include "prometheus/remote_write.pb.h"
#include "storage/series_store.h"

namespace vigil {
namespace {

constexpr double kT0 = 1764000000;  // a minute start

// Records requests and answers them from a script (then 204).
class ScriptedTransport : public Transport {
 public:
  explicit ScriptedTransport(Clock* clock) : clock_(clock) {}

  TransportResult Send(const OutboundRequest& request, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(request);
    sent_at_.push_back(clock_->Now());
    TransportResult r;
    r.http_status = 204;
    if (!script_.empty()) {
      r = script_.front();
      script_.pop_front();
    } else if (always_fail_) {
      r.http_status = 0;
      r.error = "connection refused";
    }
    changed_.notify_all();
    return r;
  }

  void Script(std::vector<TransportResult> results) {
    std::lock_guard<std::mutex> lock(mu_);
    script_.assign(results.begin(), results.end());
  }
  void AlwaysFail() {
    std::lock_guard<std::mutex> lock(mu_);
    always_fail_ = true;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_.size();
  }
  OutboundRequest request(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_.at(i);
  }
  double sent_at(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_at_.at(i);
  }
  // Waits a little (real time) for a request; true if one came.
  bool WaitBriefly(size_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::milliseconds(2),
                             [&] { return requests_.size() >= count; });
  }

 private:
  Clock* const clock_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<TransportResult> script_;
  bool always_fail_ = false;
  std::vector<OutboundRequest> requests_;
  std::vector<double> sent_at_;
};

TransportResult Status(int http_status, std::string body = "",
                       std::optional<double> retry_after = std::nullopt) {
  TransportResult r;
  r.http_status = http_status;
  r.body = std::move(body);
  r.retry_after_seconds = retry_after;
  return r;
}


// Sample values of a request, in order.
std::vector<double> Values(const OutboundRequest& request) {
  std::vector<double> out;
  const prometheus::WriteRequest decoded = Decode(request.body);
  for (const auto& ts : decoded.timeseries())
    for (const auto& s : ts.samples()) out.push_back(s.value());
  return out;
}

// "name{labels}" -> value of a Prometheus text exposition.
std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &v)) << line;
    out[std::string(line.substr(0, space))] = v;
  }
  return out;
}

class RemoteWriterTest : public ::testing::Test {
 protected:
  RemoteWriterTest() {
    StoreOptions options;
    options.clock = &clock_;
    store_ = NewMemoryStore(options);
  }
  ~RemoteWriterTest() override {
    if (writer_ != nullptr) StopWriter();
  }

  RemoteWriteOptions Options() {
    RemoteWriteOptions o;
    o.url = "http://vm.test:8428/api/v1/write";
    o.batch_samples = 10;
    o.flush_seconds = 5;
    o.grace_seconds = 10;
    o.retry_base_seconds = 1;
    o.retry_max_seconds = 30;
    return o;
  }
  void Make(const RemoteWriteOptions& options) {
    absl::StatusOr<std::unique_ptr<RemoteWriter>> w =
        RemoteWriter::Create(options, store_.get(), &clock_, &transport_);
    ASSERT_TRUE(w.ok()) << w.status();
    writer_ = *std::move(w);
  }
  uint32_t Id(const std::string& metric, const std::string& gpu) {
    SeriesKey key{metric, {{"gpu", gpu}, {"job", "j1"}, {"node", "n001"}}};
    EXPECT_TRUE(NormalizeSeriesKey(&key).ok());
    absl::StatusOr<SeriesId> id = store_->Resolve(key);
    EXPECT_TRUE(id.ok());
    return *id;
  }
  void Frame(double ts, std::vector<uint32_t> ids, std::vector<double> values) {
    FrameView view;
    view.node = "n001";
    view.job = "j1";
    view.ts = ts;
    view.ids = ids;
    view.values = values;
    writer_->OnFrame(view);
  }
  // Moves the fake clock forward a second at a time until `done`.
  bool AdvanceUntil(const std::function<bool()>& done, double step = 1) {
    for (int i = 0; i < 5000; ++i) {
      if (done()) return true;
      clock_.Advance(step);
      transport_.WaitBriefly(SIZE_MAX);
    }
    return done();
  }
  bool AdvanceUntilRequests(size_t n) {
    return AdvanceUntil([&] { return transport_.count() >= n; });
  }
  // Stops the writer while moving the fake clock, so retries and the
  // shutdown deadline come to pass.
  void StopWriter() {
    std::future<void> stopped =
        std::async(std::launch::async, [this] { writer_->Stop(); });
    EXPECT_TRUE(AdvanceUntil([&] {
      return stopped.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }, 0.25));
  }
  std::map<std::string, double> Metrics() {
    return ParseMetrics(writer_->MetricsText());
  }

  FakeClock clock_{kT0};
  std::unique_ptr<SeriesStore> store_;
  ScriptedTransport transport_{&clock_};
  std::unique_ptr<RemoteWriter> writer_;
};

TEST_F(RemoteWriterTest, SendsEachFinishedMinuteAsFourSeries) {
  RemoteWriteOptions o = Options();
  o.batch_samples = 100;
  Make(o);
  writer_->Start();
  const uint32_t a = Id("gpu_power_watts", "0");
  const uint32_t b = Id("gpu_power_watts", "1");
  for (int s = 0; s < 61; ++s) {
    clock_.Set(kT0 + s);
    Frame(kT0 + s, {a, b}, {100.0 + s, 200});
  }
  ASSERT_TRUE(AdvanceUntilRequests(1));
  const OutboundRequest req = transport_.request(0);
  EXPECT_EQ(req.url, "http://vm.test:8428/api/v1/write");
  EXPECT_EQ(req.method, "POST");
  using H = std::pair<std::string, std::string>;
  for (const H& h : {H{"Content-Encoding", "snappy"},
                     H{"Content-Type", "application/x-protobuf"},
                     H{"X-Prometheus-Remote-Write-Version", "0.1.0"},
                     H{"User-Agent", "vigil-server"}})
    EXPECT_NE(std::find(req.headers.begin(), req.headers.end(), h), req.headers.end())
        << h.first;

  const prometheus::WriteRequest w = Decode(req.body);
  ASSERT_EQ(w.timeseries_size(), 8);
  std::map<std::string, double> by_name;
  for (const auto& ts : w.timeseries()) {
    ASSERT_EQ(ts.labels_size(), 4);
    EXPECT_EQ(ts.labels(0).name(), "__name__");
    EXPECT_EQ(ts.labels(1).name(), "gpu");
    EXPECT_EQ(ts.labels(2).name(), "job");
    EXPECT_EQ(ts.labels(2).value(), "j1");
    EXPECT_EQ(ts.labels(3).name(), "node");
    EXPECT_EQ(ts.labels(3).value(), "n001");
    ASSERT_EQ(ts.samples_size(), 1);
    EXPECT_EQ(ts.samples(0).timestamp(), static_cast<int64_t>(kT0) * 1000);
    by_name[ts.labels(0).value() + "/" + ts.labels(1).value()] =
        ts.samples(0).value();
  }
  EXPECT_EQ(by_name["gpu_power_watts:min_1m/0"], 100);
  EXPECT_EQ(by_name["gpu_power_watts:max_1m/0"], 159);
  EXPECT_DOUBLE_EQ(by_name["gpu_power_watts:avg_1m/0"], 129.5);
  EXPECT_EQ(by_name["gpu_power_watts:count_1m/0"], 60);
  EXPECT_EQ(by_name["gpu_power_watts:avg_1m/1"], 200);
  ASSERT_TRUE(AdvanceUntil([&] {
    return Metrics()["vigil_remote_write_samples_sent_total"] == 8;
  }));
  std::map<std::string, double> m = Metrics();
  EXPECT_EQ(m["vigil_remote_write_requests_total{result=\"success\"}"], 1);
  EXPECT_GT(m["vigil_remote_write_sent_bytes_total"], 0);
  EXPECT_GT(m["vigil_remote_write_last_success_timestamp_seconds"], kT0);
  EXPECT_EQ(m["vigil_remote_write_pending_samples"], 0);
}

TEST_F(RemoteWriterTest, SilentSeriesMinuteGoesAfterTheGrace) {
  Make(Options());
  writer_->Start();
  const uint32_t a = Id("gpu_temp_celsius", "0");
  clock_.Set(kT0 + 30);
  Frame(kT0 + 30, {a}, {70});
  ASSERT_TRUE(AdvanceUntilRequests(1));
  // Due at the minute's end plus 10 s; then waits up to flush_seconds.
  EXPECT_GE(transport_.sent_at(0), kT0 + 70);
  EXPECT_LE(transport_.sent_at(0), kT0 + 77);
  EXPECT_EQ(Values(transport_.request(0)), (std::vector<double>{70, 70, 70, 1}));
}

TEST_F(RemoteWriterTest, RawMetricsAreSentAsIsInBatches) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {"gpu_xid_.*"};
  Make(o);
  const uint32_t xid = Id("gpu_xid_errors", "0");
  const uint32_t power = Id("gpu_power_watts", "0");
  for (int i = 0; i < 25; ++i)
    Frame(kT0 + i * 0.5, {xid, power}, {static_cast<double>(i), 300});
  writer_->Start();
  ASSERT_TRUE(AdvanceUntilRequests(3));
  std::vector<double> all;
  for (size_t r = 0; r < 3; ++r) {
    const prometheus::WriteRequest w = Decode(transport_.request(r).body);
    ASSERT_EQ(w.timeseries_size(), 1) << "one series, its samples together";
    EXPECT_EQ(w.timeseries(0).labels(0).value(), "gpu_xid_errors");
    for (const auto& s : w.timeseries(0).samples()) all.push_back(s.value());
    EXPECT_EQ(w.timeseries(0).samples_size(), r < 2 ? 10 : 5);
  }
  for (int i = 0; i < 25; ++i) EXPECT_EQ(all[i], i);
  EXPECT_GE(transport_.sent_at(2), kT0 + 5) << "the last partial batch waits";
}

TEST_F(RemoteWriterTest, RetriesServerErrorsAndThrottlingHonouringRetryAfter) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  Make(o);
  transport_.Script({Status(500, "overloaded"), Status(429, "", 20), Status(200)});
  const uint32_t a = Id("gpu_xid_errors", "0");
  for (int i = 0; i < 10; ++i) Frame(kT0 + i, {a}, {static_cast<double>(i)});
  writer_->Start();
  ASSERT_TRUE(AdvanceUntilRequests(3));
  EXPECT_GE(transport_.sent_at(2) - transport_.sent_at(1), 20);
  EXPECT_EQ(transport_.request(0).body, transport_.request(2).body);
  ASSERT_TRUE(AdvanceUntil([&] {
    return Metrics()["vigil_remote_write_samples_sent_total"] == 10;
  }));
  std::map<std::string, double> m = Metrics();
  EXPECT_EQ(m["vigil_remote_write_requests_total{result=\"server_error\"}"], 1);
  EXPECT_EQ(m["vigil_remote_write_requests_total{result=\"throttled\"}"], 1);
  EXPECT_EQ(m["vigil_remote_write_requests_total{result=\"success\"}"], 1);
}

TEST_F(RemoteWriterTest, RetriesNetworkErrorsWithGrowingBackoff) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  o.retry_base_seconds = 2;
  o.retry_max_seconds = 8;
  Make(o);
  TransportResult refused;
  refused.error = "connection refused";
  transport_.Script({refused, refused, refused, refused, refused, refused});
  const uint32_t a = Id("gpu_xid_errors", "0");
  for (int i = 0; i < 10; ++i) Frame(kT0 + i, {a}, {1});
  writer_->Start();
  ASSERT_TRUE(AdvanceUntilRequests(7));
  ASSERT_TRUE(AdvanceUntil([&] {
    return Metrics()["vigil_remote_write_samples_sent_total"] == 10;
  }));
  for (size_t i = 1; i < 7; ++i) {
    // Full jitter within the capped exponential ceiling (+1: clock steps).
    const double ceiling = std::min(8.0, 2.0 * (1 << (i - 1)));
    EXPECT_LE(transport_.sent_at(i) - transport_.sent_at(i - 1), ceiling + 1);
  }
  std::map<std::string, double> m = Metrics();
  EXPECT_EQ(m["vigil_remote_write_requests_total{result=\"network_error\"}"], 6);
  EXPECT_EQ(m["vigil_remote_write_requests_total{result=\"success\"}"], 1);
}

TEST_F(RemoteWriterTest, DropsARefusedRequestAndGoesOn) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  Make(o);
  transport_.Script({Status(400, "out of order sample")});
  const uint32_t a = Id("gpu_xid_errors", "0");
  for (int i = 0; i < 20; ++i) Frame(kT0 + i, {a}, {static_cast<double>(i)});
  writer_->Start();
  ASSERT_TRUE(AdvanceUntilRequests(2));
  EXPECT_EQ(Values(transport_.request(1))[0], 10) << "not retried";
  ASSERT_TRUE(AdvanceUntil([&] {
    return Metrics()["vigil_remote_write_samples_sent_total"] == 10;
  }));
  std::map<std::string, double> m = Metrics();
  EXPECT_EQ(m["vigil_remote_write_samples_dropped_total{reason=\"rejected\"}"], 10);
  EXPECT_EQ(m["vigil_remote_write_requests_total{result=\"rejected\"}"], 1);
  EXPECT_EQ(transport_.count(), 2u);
}

TEST_F(RemoteWriterTest, FullQueueDropsTheOldest) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  o.max_pending_samples = 10;
  Make(o);
  const uint32_t a = Id("gpu_xid_errors", "0");
  for (int i = 0; i < 15; ++i) Frame(kT0 + i, {a}, {static_cast<double>(i)});
  std::map<std::string, double> m = Metrics();
  EXPECT_EQ(m["vigil_remote_write_pending_samples"], 10);
  EXPECT_EQ(m["vigil_remote_write_samples_dropped_total{reason=\"queue_full\"}"], 5);
  writer_->Start();
  ASSERT_TRUE(AdvanceUntilRequests(1));
  EXPECT_EQ(Values(transport_.request(0)),
            (std::vector<double>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}));
}

TEST_F(RemoteWriterTest, QueueFillsWhileTheEndpointIsDownAndIngestGoesOn) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  o.max_pending_samples = 30;
  Make(o);
  transport_.AlwaysFail();
  const uint32_t a = Id("gpu_xid_errors", "0");
  writer_->Start();
  for (int i = 0; i < 10; ++i) Frame(kT0 + i, {a}, {1});
  ASSERT_TRUE(AdvanceUntilRequests(2));
  // 10 in flight, being retried: 20 more fit, the rest push out the oldest.
  for (int i = 0; i < 100; ++i) Frame(kT0 + 10 + i * 0.4, {a}, {2});
  std::map<std::string, double> m = Metrics();
  EXPECT_EQ(m["vigil_remote_write_pending_samples"], 30);
  EXPECT_EQ(m["vigil_remote_write_samples_dropped_total{reason=\"queue_full\"}"], 80);
}

TEST_F(RemoteWriterTest, StopFlushesWhatIsPending) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  o.flush_seconds = 3600;
  Make(o);
  writer_->Start();
  const uint32_t a = Id("gpu_xid_errors", "0");
  for (int i = 0; i < 5; ++i) Frame(kT0 + i, {a}, {static_cast<double>(i)});
  writer_->Stop();
  ASSERT_EQ(transport_.count(), 1u);
  EXPECT_EQ(Values(transport_.request(0)), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Metrics()["vigil_remote_write_samples_sent_total"], 5);
}

TEST_F(RemoteWriterTest, StopGivesUpOnADownEndpointAfterItsDeadline) {
  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  o.shutdown_flush_seconds = 2;
  Make(o);
  transport_.AlwaysFail();
  const uint32_t a = Id("gpu_xid_errors", "0");
  for (int i = 0; i < 25; ++i) Frame(kT0 + i, {a}, {1});
  writer_->Start();
  ASSERT_TRUE(AdvanceUntilRequests(1));
  StopWriter();
  std::map<std::string, double> m = Metrics();
  EXPECT_EQ(m["vigil_remote_write_samples_dropped_total{reason=\"shutdown\"}"], 25);
  EXPECT_EQ(m["vigil_remote_write_pending_samples"], 0);
  // Frames after Stop are ignored.
  Frame(kT0 + 100, {a}, {1});
  EXPECT_EQ(Metrics()["vigil_remote_write_pending_samples"], 0);
}

TEST_F(RemoteWriterTest, SeriesGoneFromTheStoreAreDroppedAndCounted) {
  Make(Options());
  writer_->Start();
  Frame(kT0 + 1, {4242}, {1});
  Frame(kT0 + 61, {4242}, {1});
  ASSERT_TRUE(AdvanceUntil([&] {
    return Metrics()["vigil_remote_write_samples_dropped_total{reason=\"unknown_series\"}"] == 4;
  }));
  EXPECT_EQ(transport_.count(), 0u);
}

TEST_F(RemoteWriterTest, LateSamplesAreCounted) {
  Make(Options());
  const uint32_t a = Id("gpu_power_watts", "0");
  Frame(kT0 + 61, {a}, {1});
  Frame(kT0 + 1, {a}, {1});  // a minute before the open one
  EXPECT_EQ(Metrics()["vigil_remote_write_samples_dropped_total{reason=\"late\"}"], 1);
}

TEST_F(RemoteWriterTest, CredentialsFromFiles) {
  const std::string dir = ::testing::TempDir();
  const std::string token = dir + "/rw-token";
  const std::string password = dir + "/rw-password";
  FILE* f = std::fopen(token.c_str(), "w");
  std::fputs("s3cret\n", f);
  std::fclose(f);
  f = std::fopen(password.c_str(), "w");
  std::fputs("pw\n", f);
  std::fclose(f);

  RemoteWriteOptions o = Options();
  o.raw_metrics = {".*"};
  o.bearer_token_file = token;
  Make(o);
  writer_->Start();
  const uint32_t a = Id("gpu_xid_errors", "0");
  for (int i = 0; i < 10; ++i) Frame(kT0 + i, {a}, {1});
  ASSERT_TRUE(AdvanceUntilRequests(1));
  const auto& headers = transport_.request(0).headers;
  EXPECT_NE(std::find(headers.begin(), headers.end(),
                      std::pair<std::string, std::string>("Authorization",
                                                          "Bearer s3cret")),
            headers.end());
  writer_->Stop();

  o.bearer_token_file.clear();
  o.basic_auth_username = "vigil";
  o.basic_auth_password_file = password;
  Make(o);
  writer_->Start();
  for (int i = 0; i < 10; ++i) Frame(kT0 + 100 + i, {a}, {1});
  ASSERT_TRUE(AdvanceUntilRequests(2));
  EXPECT_EQ(transport_.request(1).username, "vigil");
  EXPECT_EQ(transport_.request(1).password, "pw");

  o.basic_auth_password_file = dir + "/no-such-file";
  EXPECT_EQ(RemoteWriter::Create(o, store_.get(), &clock_, &transport_).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RemoteWriterTest, CreateRefusesBadOptions) {
  RemoteWriteOptions o = Options();
  o.url = "vm:8428/api/v1/write";
  o.raw_metrics = {"gpu_(xid"};
  o.max_pending_samples = 5;
  const absl::Status s =
      RemoteWriter::Create(o, store_.get(), &clock_, &transport_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("remote_write.url: must start with http://"),
            absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("remote_write.raw_metrics[0]: not a valid regex"),
            absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("remote_write.max_pending_samples"),
            absl::string_view::npos) << s;
}

}  // namespace
}  // namespace vigil
