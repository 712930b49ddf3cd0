// Prometheus remote write into a whole in-process server: HTTP, tokens,
// mapping, storage, frame assembly and detection.
#include "server/ingest/remote_write_receiver.h"

#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "notify/signing.h"
#include "nlohmann/json.hpp"
#include "prometheus/remote_write.pb.h"
#include "snappy.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil {
namespace {

using testing::HttpGet;
using testing::HttpHeaders;
using testing::HttpResult;
using testing::HttpSend;
using testing::TestOptions;
using testing::TestServer;
using Json = nlohmann::json;

constexpr char kWriterToken[] = "prom-writer-token";
constexpr char kViewerToken[] = "viewer-token";

// One remote-written series: its labels (with __name__) and samples.
struct Series {
  std::map<std::string, std::string> labels;
  std::vector<std::pair<int64_t, double>> samples;  // (Unix ms, value)
};

std::string Encode(const std::vector<Series>& series) {
  prometheus::WriteRequest request;
  for (const Series& s : series) {
    prometheus::TimeSeries* ts = request.add_timeseries();
    for (const auto& [name, value] : s.labels) {
      prometheus::Label* label = ts->add_labels();
      label->set_name(name);
      label->set_value(value);
    }
    for (const auto& [t, v] : s.samples) {
      prometheus::Sample* sample = ts->add_samples();
      sample->set_timestamp(t);
      sample->set_value(v);
    }
  }
  std::string compressed;
  snappy::Compress(request.SerializeAsString().data(), request.ByteSizeLong(), &compressed);
  return compressed;
}

// Records every frame detection is handed.
class Recorder : public FrameObserver {
 public:
  struct Seen {
    std::string node, job, ended_job;
    double ts;
    size_t samples;
    bool claimed;
  };
  void OnFrame(const FrameView& frame) override {
    std::lock_guard<std::mutex> l(mu_);
    seen_.push_back({std::string(frame.node), std::string(frame.job),
                     std::string(frame.job_end.job), frame.ts, frame.ids.size(),
                     frame.claimed_node});
  }
  std::vector<Seen> seen() const {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }
  // Waits (real time) until at least `n` frames were seen.
  bool WaitFor(size_t n) const {
    for (int i = 0; i < 2000; ++i) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (seen_.size() >= n) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Seen> seen_;
};

// A dcgm-exporter series of `node`'s GPU `gpu`.
Series Dcgm(const std::string& metric, const std::string& node, int gpu,
                   const std::string& job, int64_t ts_ms, double value) {
  Series s;
  s.labels = {{"__name__", metric},         {"gpu", std::to_string(gpu)},
              {"UUID", "GPU-" + node + "-" + std::to_string(gpu)},
              {"Hostname", node},           {"instance", node + ":9400"},
              {"job", "dcgm-exporter"},      {"modelName", "NVIDIA H100 80GB HBM3"}};
  if (!job.empty()) s.labels["hpc_job"] = job;
  s.samples = {{ts_ms, value}};
  return s;
}

ServerOptions ReceiverOptions() {
  ServerOptions options = TestOptions();
  options.remote_write_receiver = RemoteWriteReceiverOptions();
  auto sha = [](const std::string& token) { return HexEncode(Sha256(token)); };
  options.auth.tokens = {{"prometheus", Role::kRemoteWrite, sha(kWriterToken)},
                         {"vic", Role::kViewer, sha(kViewerToken)}};
  options.auth.anonymous_read = true;
  return options;
}

class RemoteWriteReceiverTest : public ::testing::Test {
 protected:
  RemoteWriteReceiverTest() : server_(ReceiverOptions(), &recorder_) {}

  int http() { return server_.server.http_port(); }
  double Now() { return server_.clock.Now(); }
  int64_t NowMs() { return static_cast<int64_t>(Now() * 1000); }

  HttpResult Write(const std::string& body, const std::string& token = kWriterToken,
                   const std::string& encoding = "snappy") {
    HttpHeaders headers = {{"Content-Type", "application/x-protobuf"},
                           {"X-Prometheus-Remote-Write-Version", "0.1.0"}};
    if (!encoding.empty()) headers.emplace_back("Content-Encoding", encoding);
    if (!token.empty()) headers.emplace_back("Authorization", std::string("Bearer ") + token);
    return HttpSend(http(), "POST", "/api/v1/write", body, headers);
  }

  // Moves past the frame grace so that whole frames go to detection.
  void PassGrace() { server_.clock.Advance(11); }

  std::string Metric(const std::string& name_and_labels) {
    const HttpResult r = HttpGet(http(), "/metrics");
    const size_t at = r.body.find("\n" + name_and_labels + " ");
    if (at == std::string::npos) return "";
    const size_t begin = at + name_and_labels.size() + 2;
    return r.body.substr(begin, r.body.find('\n', begin) - begin);
  }

  Recorder recorder_;
  TestServer server_;
};

TEST_F(RemoteWriteReceiverTest, DcgmSeriesAreStoredUnderVigilsNamesAndDetected) {
  const int64_t t = NowMs();
  const HttpResult r = Write(Encode({Dcgm("DCGM_FI_DEV_POWER_USAGE", "gpu-1", 0, "4242", t, 612.5),
                                     Dcgm("DCGM_FI_DEV_FB_USED", "gpu-1", 0, "4242", t, 1024)}));
  ASSERT_EQ(r.status, 204) << r.body;
  const Json series = Json::parse(HttpGet(http(), "/api/v1/series?job=4242").body);
  std::set<std::string> names;
  for (const Json& s : series["series"]) names.insert(s["metric"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"gpu_power_watts", "gpu_memory_used_bytes"}));
  for (const Json& s : series["series"]) {
    EXPECT_EQ(s["labels"]["node"], "gpu-1");
    EXPECT_EQ(s["labels"]["gpu"], "0");
    EXPECT_FALSE(s["labels"].contains("UUID"));
  }
  PassGrace();
  ASSERT_TRUE(recorder_.WaitFor(1));
  const auto seen = recorder_.seen();
  EXPECT_EQ(seen[0].node, "gpu-1");
  EXPECT_EQ(seen[0].job, "4242");
  EXPECT_EQ(seen[0].samples, 2u);
  EXPECT_TRUE(seen[0].claimed);
  EXPECT_DOUBLE_EQ(seen[0].ts, t / 1000.0);
  EXPECT_EQ(Metric("vigil_remote_write_receiver_samples_total{outcome=\"stored\"}"), "2");
}

TEST_F(RemoteWriteReceiverTest, AScrapeSplitAcrossRequestsIsOneFrame) {
  const int64_t t = NowMs();
  std::vector<Series> first, second;
  for (int gpu = 0; gpu < 8; ++gpu) {
    (gpu % 2 == 0 ? first : second)
        .push_back(Dcgm("DCGM_FI_DEV_POWER_USAGE", "gpu-1", gpu, "j", t, 600 + gpu));
  }
  // node_exporter's series name no job: they take the node's.
  Series ib;
  ib.labels = {{"__name__", "node_infiniband_port_data_received_bytes_total"},
               {"device", "mlx5_0"}, {"port", "1"}, {"instance", "gpu-1:9100"},
               {"Hostname", "gpu-1"}};
  ib.samples = {{t, 1e12}};
  second.push_back(ib);
  ASSERT_EQ(Write(Encode(first)).status, 204);
  ASSERT_EQ(Write(Encode(second)).status, 204);
  PassGrace();
  ASSERT_TRUE(recorder_.WaitFor(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto seen = recorder_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].samples, 9u);
  EXPECT_EQ(seen[0].job, "j");
}

TEST_F(RemoteWriteReceiverTest, ANewJobOnANodeEndsTheOldOne) {
  const int64_t t = NowMs();
  ASSERT_EQ(Write(Encode({Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-1", 0, "a", t, 60)})).status, 204);
  ASSERT_EQ(Write(Encode({Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-1", 0, "b", t + 15000, 61)})).status,
            204);
  PassGrace();
  PassGrace();
  ASSERT_TRUE(recorder_.WaitFor(2));
  const auto seen = recorder_.seen();
  EXPECT_EQ(seen[0].job, "a");
  EXPECT_EQ(seen[0].ended_job, "");
  EXPECT_EQ(seen[1].job, "b");
  EXPECT_EQ(seen[1].ended_job, "a");
}

TEST_F(RemoteWriteReceiverTest, DcgmsLastXidBecomesACountOfXids) {
  const int64_t t = NowMs();
  const double xids[] = {0, 0, 79, 79, 0, 48};
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(Write(Encode({Dcgm("DCGM_FI_DEV_XID_ERRORS", "gpu-1", 2, "j", t + i * 1000,
                                 xids[i])}))
                  .status,
              204);
  const Json series =
      Json::parse(HttpGet(http(), "/api/v1/series?metric=gpu_xid_errors_total").body);
  ASSERT_EQ(series["series"].size(), 1u);
  const uint64_t id = series["series"][0]["id"].get<uint64_t>();
  const Json points = Json::parse(
      HttpGet(http(), "/api/v1/query?series=" + std::to_string(id) + "&from=0&to=9999999999")
          .body);
  std::vector<double> counts;
  for (const Json& p : points["points"]) counts.push_back(p[1].get<double>());
  EXPECT_EQ(counts, (std::vector<double>{0, 0, 1, 1, 1, 2}));
}

TEST_F(RemoteWriteReceiverTest, OnlyRemoteWriteTokensMayWriteAndTheyMayDoNothingElse) {
  const std::string body = Encode({Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-1", 0, "j", NowMs(), 60)});
  EXPECT_EQ(Write(body, "").status, 401);
  EXPECT_EQ(Write(body, "no-such-token").status, 401);
  const HttpResult viewer = Write(body, kViewerToken);
  EXPECT_EQ(viewer.status, 403);
  EXPECT_NE(viewer.body.find("remote_write"), std::string::npos) << viewer.body;
  EXPECT_EQ(Write(body).status, 204);
  // The writer's token reads nothing (anonymous reads are on: without it
  // the read works; with it, it is refused).
  const HttpResult read =
      HttpSend(http(), "GET", "/api/v1/incidents", "",
               {{"Authorization", std::string("Bearer ") + kWriterToken}});
  EXPECT_EQ(read.status, 403) << read.body;
}

TEST_F(RemoteWriteReceiverTest, BadBodiesGetClearErrors) {
  const std::string good = Encode({Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-1", 0, "j", NowMs(), 60)});
  HttpResult r = Write(good, kWriterToken, /*encoding=*/"");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("snappy"), std::string::npos) << r.body;
  r = Write("definitely not snappy");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("snappy"), std::string::npos) << r.body;
  std::string not_proto;
  const std::string junk(64, '\xff');
  snappy::Compress(junk.data(), junk.size(), &not_proto);
  r = Write(not_proto);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("WriteRequest"), std::string::npos) << r.body;
  // 700 KB of zeros compress to a few KB but decode past a small limit.
  ServerOptions small = ReceiverOptions();
  small.remote_write_receiver->max_decoded_bytes = 100'000;
  TestServer limited(small);
  std::string bomb;
  const std::string zeros(700'000, '\0');
  snappy::Compress(zeros.data(), zeros.size(), &bomb);
  r = HttpSend(limited.server.http_port(), "POST", "/api/v1/write", bomb,
               {{"Content-Encoding", "snappy"},
                {"Authorization", std::string("Bearer ") + kWriterToken}});
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("max_decoded_bytes"), std::string::npos) << r.body;
}

TEST_F(RemoteWriteReceiverTest, ABadNodeIsNamedAndTheRestOfTheRequestIsStored) {
  const int64_t t = NowMs();
  const HttpResult r =
      Write(Encode({Dcgm("DCGM_FI_DEV_GPU_TEMP", std::string(300, 'x'), 0, "j", t, 60),
                    Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-2", 0, "j", t, 61),
                    // A frame far in the future: that node's part is refused.
                    Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-3", 0, "j", t + 86'400'000, 62)}));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("node"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("gpu-3"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("ahead of the server clock"), std::string::npos) << r.body;
  const Json series = Json::parse(HttpGet(http(), "/api/v1/series?job=j").body);
  ASSERT_EQ(series["series"].size(), 1u);
  EXPECT_EQ(series["series"][0]["labels"]["node"], "gpu-2");
  EXPECT_EQ(Metric("vigil_remote_write_receiver_samples_total{outcome=\"bad_series\"}"), "1");
  EXPECT_EQ(Metric("vigil_remote_write_receiver_samples_total{outcome=\"rejected\"}"), "1");
}

TEST_F(RemoteWriteReceiverTest, ANodeWithAnAgentIsFedByItsAgentOnly) {
  testing::IngestClient agent(server_.server.grpc_port());
  agent.Open();
  v1::FrameBatch hello = testing::Batch(1, "gpu-1", "agent-1");
  *hello.add_series() = testing::Def(1, "gpu_temperature_celsius", {{"gpu", "0"}});
  *hello.add_frames() = testing::Frame("j", Now(), {1}, {55});
  ASSERT_TRUE(agent.Send(hello).has_value());
  const int64_t t = NowMs() + 1000;
  ASSERT_EQ(Write(Encode({Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-1", 0, "j", t, 60),
                          Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-2", 0, "j", t, 61)}))
                .status,
            204);
  EXPECT_EQ(Metric("vigil_remote_write_receiver_samples_total{outcome=\"agent_streams_node\"}"),
            "1");
  EXPECT_EQ(Metric("vigil_remote_write_receiver_samples_total{outcome=\"stored\"}"), "1");
  // Once the agent is gone, the node may be fed by remote write.
  agent.Finish();
  for (int i = 0; i < 200 && Write(Encode({Dcgm("DCGM_FI_DEV_GPU_TEMP", "gpu-1", 0, "j",
                                                t + 1000 + i, 60)}))
                                 .status == 204 &&
                  Metric("vigil_remote_write_receiver_samples_total{outcome=\"stored\"}") == "1";
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(Metric("vigil_remote_write_receiver_samples_total{outcome=\"stored\"}"), "2");
}

// POST /api/v1/alerts and /api/v2/alerts (server/alertmanager/): a machine
// sender's remote_write token or an operator's may post; a viewer may not.
TEST(AlertIntakeRouteTest, OnlyWritersAndOperatorsMayPostAlerts) {
  ServerOptions options = ReceiverOptions();
  options.alertmanager.intake = true;
  options.auth.tokens.push_back({"ops", Role::kOperator, HexEncode(Sha256("operator-token"))});
  TestServer server(options);
  const std::string webhook = Json{{"version", "4"},
                                   {"alerts",
                                    {{{"status", "firing"},
                                      {"labels", {{"alertname", "DiskFull"}, {"node", "gpu-3"}}},
                                      {"annotations", {{"summary", "disk full"}}}}}}}
                                  .dump();
  auto post = [&](const std::string& path, const std::string& body, const std::string& token) {
    HttpHeaders headers = {{"Content-Type", "application/json"}};
    if (!token.empty()) headers.emplace_back("Authorization", "Bearer " + token);
    return HttpSend(server.server.http_port(), "POST", path, body, headers);
  };
  EXPECT_EQ(post("/api/v1/alerts", webhook, "").status, 401);
  EXPECT_EQ(post("/api/v1/alerts", webhook, kViewerToken).status, 403);
  HttpResult r = post("/api/v1/alerts", webhook, kWriterToken);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["opened"], 1);
  r = post("/api/v2/alerts", "[{\"labels\": {}}]", "operator-token");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("alertname"), std::string::npos) << r.body;
  const Json incidents =
      Json::parse(HttpGet(server.server.http_port(), "/api/v1/incidents?state=all").body);
  ASSERT_EQ(incidents["incidents"].size(), 1u);
  EXPECT_EQ(incidents["incidents"][0]["kind"], "alert:DiskFull");
  EXPECT_EQ(incidents["incidents"][0]["node"], "gpu-3");
}

// A site with only dcgm-exporter: 4 nodes x 8 GPUs scraped every 15 s. Two
// healthy hours raise nothing of P0-P2; then one GPU's power falls 60 W
// below its peers and a P2 is open within 5 scrapes. The default options,
// scrapes split across two requests as Prometheus' shards send them.
TEST(RemoteWriteDetectionTest, DcgmOnlySiteGetsPeerComparisonAtFifteenSecondScrapes) {
  TestServer server(ReceiverOptions());
  std::mt19937_64 rng(15);
  std::normal_distribution<double> noise(0, 1);
  const int kNodes = 4, kGpus = 8;
  const double kScrape = 15;
  auto incidents = [&](const char* severities) {
    const HttpResult r = HttpGet(server.server.http_port(),
                                 std::string("/api/v1/incidents?state=all&severity=") + severities);
    return Json::parse(r.body)["incidents"];
  };
  auto frames_delivered = [&] {
    const HttpResult r = HttpGet(server.server.http_port(), "/metrics");
    const std::string name = "\nvigil_remote_write_receiver_frames_total ";
    const size_t at = r.body.find(name);
    return at == std::string::npos ? 0 : std::stoull(r.body.substr(at + name.size()));
  };
  auto scrape = [&](int k, double drop_watts) {
    const int64_t t = static_cast<int64_t>(server.clock.Now() * 1000);
    std::vector<Series> shards[2];
    for (int n = 0; n < kNodes; ++n) {
      const std::string node = "gpu-" + std::to_string(n);
      for (int g = 0; g < kGpus; ++g) {
        // H100s in one data-parallel job: ~650 W with per-GPU offsets and
        // noise, clocks pinned, temperatures drifting slowly.
        double power = 650 + 3 * ((n * kGpus + g) % 5) + 6 * noise(rng);
        if (n == 2 && g == 3) power -= drop_watts;
        const double temp = 62 + (g % 3) + 2 * std::sin(k / 200.0) + 0.3 * noise(rng);
        const double clock = 1980 - 15 * std::abs(noise(rng));
        const double nvlink = 4.5e10 * (1 + 0.03 * noise(rng));
        auto& out = shards[(n + g) % 2];
        out.push_back(Dcgm("DCGM_FI_DEV_POWER_USAGE", node, g, "7001", t, power));
        out.push_back(Dcgm("DCGM_FI_DEV_GPU_TEMP", node, g, "7001", t, temp));
        out.push_back(Dcgm("DCGM_FI_DEV_SM_CLOCK", node, g, "7001", t, clock));
        out.push_back(Dcgm("DCGM_FI_DEV_GPU_UTIL", node, g, "7001", t, 100));
        out.push_back(Dcgm("DCGM_FI_DEV_FB_USED", node, g, "7001", t,
                                                    71'000 + 10 * g));
        out.push_back(Dcgm("DCGM_FI_DEV_XID_ERRORS", node, g, "7001", t, 0));
        out.push_back(Dcgm("DCGM_FI_PROF_NVLINK_TX_BYTES", node, g, "7001",
                                                    t, nvlink));
      }
    }
    // node_exporter on the same nodes, scraped at another offset.
    for (int n = 0; n < kNodes; ++n) {
      Series ib;
      ib.labels = {{"__name__", "node_infiniband_port_data_received_bytes_total"},
                   {"device", "mlx5_0"}, {"port", "1"},
                   {"instance", "gpu-" + std::to_string(n) + ":9100"}};
      ib.samples = {{t + 6100 + 500 * n, 4e9 * k}};
      shards[n % 2].push_back(ib);
    }
    for (auto& part : shards) {
      const HttpResult r =
          HttpSend(server.server.http_port(), "POST", "/api/v1/write", Encode(part),
                   {{"Content-Encoding", "snappy"},
                    {"Authorization", std::string("Bearer ") + kWriterToken}});
      ASSERT_EQ(r.status, 204) << r.body;
    }
    // The frames of this scrape reach detection after the grace.
    server.clock.Advance(kScrape);
    const uint64_t want = static_cast<uint64_t>(k) * kNodes * 2;
    for (int i = 0; i < 4000 && frames_delivered() < want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_GE(frames_delivered(), want) << "scrape " << k;
  };
  const int kHealthy = 2 * 3600 / 15;
  for (int k = 1; k <= kHealthy; ++k) {
    scrape(k, 0);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Detection runs behind the frames a little: let it catch up.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(incidents("P0,P1,P2").size(), 0u) << incidents("P0,P1,P2").dump(1);
  int raised_after = 0;
  for (int k = kHealthy + 1; k <= kHealthy + 8 && raised_after == 0; ++k) {
    scrape(k, 60);
    if (::testing::Test::HasFatalFailure()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const Json& i : incidents("P2")) {
      if (i["kind"] == "gpu_power_low" && i["node"] == "gpu-2" && i["gpu"] == 3)
        raised_after = k - kHealthy;
    }
  }
  std::printf("P2 gpu_power_low after %d scrapes of the drop\n", raised_after);
  EXPECT_GE(raised_after, 1);
  EXPECT_LE(raised_after, 5) << "scrapes until the P2";
}

}  // namespace
}  // namespace vigil
