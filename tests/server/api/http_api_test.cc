// The HTTP API against an in-process server fed over gRPC.
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

using Json = nlohmann::json;
constexpr double kT0 = 1764000000.0;  // FakeClock's default start

// Consumes a metric or label name ([a-zA-Z_:][a-zA-Z0-9_:]*, no ':' in
// label names) from the front of `s`; false if there is none.
bool ConsumeName(std::string_view* s, bool colon_ok) {
  size_t n = 0;
  for (; n < s->size(); ++n) {
    char c = (*s)[n];
    bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
              (colon_ok && c == ':') ||
              (n > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) break;
  }
  s->remove_prefix(n);
  return n > 0;
}

// True for a Prometheus text-format comment (# HELP / # TYPE name ...) or
// sample line: name{label="value",...} number.
bool IsExpositionLine(std::string_view line) {
  if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
    line.remove_prefix(7);
    return ConsumeName(&line, true) && line.size() > 1 && line[0] == ' ';
  }
  if (!ConsumeName(&line, true)) return false;
  if (!line.empty() && line[0] == '{') {
    line.remove_prefix(1);
    while (true) {
      if (!ConsumeName(&line, false) || line.rfind("=\"", 0) != 0) return false;
      size_t close = line.find('"', 2);
      if (close == std::string_view::npos) return false;
      line.remove_prefix(close + 1);
      if (!line.empty() && line[0] == ',') {
        line.remove_prefix(1);
        continue;
      }
      if (line.empty() || line[0] != '}') return false;
      line.remove_prefix(1);
      break;
    }
  }
  if (line.empty() || line[0] != ' ') return false;
  line.remove_prefix(1);
  double v;
  // SimpleAtod skips surrounding blanks; the format allows exactly one.
  return !line.empty() && !std::isspace(static_cast<unsigned char>(line[0])) &&
         !std::isspace(static_cast<unsigned char>(line.back())) &&
         absl::SimpleAtod(std::string(line), &v);
}

// A server holding gpu_power_watts{gpu="0"} and train_loss of job llm on
// node n1: three frames at kT0-30, kT0-20.5, kT0-10.
class HttpApiTest : public ::testing::Test {
 protected:
  explicit HttpApiTest(ServerOptions options = TestOptions())
      : t_(options), client_(t_.server.grpc_port()) {}

  void SetUp() override {
    client_.Open();
    v1::FrameBatch batch = Batch(1, "n1", "a");
    *batch.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
    *batch.add_series() = Def(2, "train_loss", {});
    *batch.add_frames() = Frame("llm", kT0 - 30, {1, 2}, {250, 2.5});
    *batch.add_frames() = Frame("llm", kT0 - 20.5, {1, 2}, {260, NAN});
    *batch.add_frames() = Frame("llm", kT0 - 10, {1, 2}, {INFINITY, -INFINITY});
    ASSERT_TRUE(client_.Send(batch).has_value());
    ASSERT_TRUE(client_.Finish().ok());
  }

  int port() { return t_.server.http_port(); }

  // The id of the only series with `metric`.
  uint32_t IdOf(const std::string& metric) {
    std::vector<SeriesInfo> series =
        t_.server.store()->ListSeries(SeriesFilter{"", "", metric});
    EXPECT_EQ(series.size(), 1u);
    return series.empty() ? 0 : series[0].id;
  }

  Json GetJson(const std::string& path, int want_status = 200) {
    HttpResult r = HttpGet(port(), path);
    EXPECT_EQ(r.status, want_status) << path << ": " << r.body;
    Json body = Json::parse(r.body, nullptr, false);
    EXPECT_FALSE(body.is_discarded()) << r.body;
    return body;
  }

  TestServer t_;
  IngestClient client_;
};

TEST_F(HttpApiTest, Healthz) {
  Json body = GetJson("/healthz");
  EXPECT_EQ(body["status"], "ok");
  EXPECT_EQ(body["time"], kT0);
}

TEST_F(HttpApiTest, ListsSeriesWithLabels) {
  Json body = GetJson("/api/v1/series?node=n1&metric=gpu_power_watts");
  ASSERT_EQ(body["series"].size(), 1u) << body;
  EXPECT_EQ(body["series"][0]["id"], IdOf("gpu_power_watts"));
  EXPECT_EQ(body["series"][0]["metric"], "gpu_power_watts");
  EXPECT_EQ(body["series"][0]["labels"],
            (Json{{"gpu", "0"}, {"job", "llm"}, {"node", "n1"}}));
  EXPECT_EQ(GetJson("/api/v1/series?job=llm")["series"].size(), 2u);
  EXPECT_EQ(GetJson("/api/v1/series?job=llm")["next_start"], nullptr);
  EXPECT_EQ(GetJson("/api/v1/series?node=n2")["series"].size(), 0u);
}

// Pages: `limit` series from id `start`; `next_start` says where the next
// page begins (null on the last).
TEST_F(HttpApiTest, SeriesListsArePaginated) {
  Json first = GetJson("/api/v1/series?job=llm&limit=1");
  ASSERT_EQ(first["series"].size(), 1u) << first;
  ASSERT_TRUE(first["next_start"].is_number()) << first;
  Json second = GetJson("/api/v1/series?job=llm&limit=1&start=" +
                        first["next_start"].dump());
  ASSERT_EQ(second["series"].size(), 1u) << second;
  EXPECT_NE(second["series"][0]["id"], first["series"][0]["id"]);
  EXPECT_EQ(second["next_start"], nullptr);
  EXPECT_EQ(HttpGet(port(), "/api/v1/series?limit=0").status, 400);
  EXPECT_EQ(HttpGet(port(), "/api/v1/series?limit=100001").status, 400);
  EXPECT_EQ(HttpGet(port(), "/api/v1/series?start=-1").status, 400);
}

TEST_F(HttpApiTest, RawQueryReturnsSamplesWithNonFiniteAsStrings) {
  Json body = GetJson("/api/v1/query?series=" +
                      std::to_string(IdOf("train_loss")));  // last hour
  EXPECT_EQ(body["series"]["metric"], "train_loss");
  EXPECT_EQ(body["points"],
            (Json::parse(R"([[1763999970,2.5],[1763999979.5,"nan"],
                             [1763999990,"-inf"]])")));
  body = GetJson("/api/v1/query?series=" + std::to_string(IdOf("gpu_power_watts")) +
                 "&from=1763999979.5&to=1764000000");
  EXPECT_EQ(body["points"],
            (Json::parse(R"([[1763999979.5,260],[1763999990,"inf"]])")));
}

TEST_F(HttpApiTest, StepQueryDownsamples) {
  Json body = GetJson("/api/v1/query?series=" +
                      std::to_string(IdOf("train_loss")) +
                      "&from=1763999940&to=1764000000&step=60");
  EXPECT_EQ(body["step"], 60);
  // One bucket: 2.5, NaN and -inf; NaN counted but not in min/max/avg.
  ASSERT_EQ(body["points"].size(), 1u) << body;
  EXPECT_EQ(body["points"][0],
            (Json::parse(R"([1763999940,"-inf",2.5,"-inf",3])")));
}

TEST_F(HttpApiTest, UnknownSeriesIs404) {
  Json body = GetJson("/api/v1/query?series=4242", 404);
  EXPECT_EQ(body["error"], "series 4242 not found");
}

struct BadParamCase {
  std::string query;  // after "/api/v1/query?"
  std::string error_part;
};

class HttpBadParamTest : public HttpApiTest,
                         public ::testing::WithParamInterface<BadParamCase> {};

TEST_P(HttpBadParamTest, Is400WithJsonError) {
  Json body = GetJson("/api/v1/query?" + GetParam().query, 400);
  ASSERT_TRUE(body.contains("error")) << body;
  EXPECT_NE(body["error"].get<std::string>().find(GetParam().error_part),
            std::string::npos)
      << body;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HttpBadParamTest,
    ::testing::Values(
        BadParamCase{"", "parameter 'series': required"},
        BadParamCase{"series=abc", "parameter 'series': 'abc' is not"},
        BadParamCase{"series=-1", "parameter 'series'"},
        BadParamCase{"series=1&from=yesterday", "parameter 'from': 'yesterday'"},
        BadParamCase{"series=1&to=nan", "parameter 'to'"},
        BadParamCase{"series=1&to=inf", "parameter 'to'"},
        BadParamCase{"series=1&from=100&to=50", "parameter 'from': must be before"},
        BadParamCase{"series=1&step=0", "parameter 'step': must be > 0"},
        BadParamCase{"series=1&step=-60", "parameter 'step'"},
        BadParamCase{"series=1&step=x", "parameter 'step'"},
        // Far-off times would overflow the store's millisecond clock.
        BadParamCase{"series=1&to=1e300", "parameter 'to': 1e300 is outside"},
        BadParamCase{"series=1&from=-1e300&to=5", "parameter 'from': -1e300 is outside"},
        BadParamCase{"series=1&from=0&to=1e19", "parameter 'to'"},
        BadParamCase{"series=1&step=1e300", "parameter 'step'"},
        BadParamCase{"series=1&from=0&to=1764000000&step=1",
                     "parameter 'step': 1 gives more than 1000000 buckets"}));

class HttpPointLimitTest : public HttpApiTest {
 protected:
  static ServerOptions Limited() {
    ServerOptions options = TestOptions();
    options.max_query_points = 2;
    return options;
  }
  HttpPointLimitTest() : HttpApiTest(Limited()) {}
};

TEST_F(HttpPointLimitTest, TooManyPointsAsksForStep) {
  Json body = GetJson(
      "/api/v1/query?series=" + std::to_string(IdOf("train_loss")), 400);
  EXPECT_EQ(body["error"],
            "3 points exceed the limit of 2; narrow 'from'/'to' or set 'step'");
  GetJson("/api/v1/query?series=" + std::to_string(IdOf("train_loss")) +
          "&step=3600");
}

TEST(ExpositionLineTest, AcceptsValidAndRefusesInvalidLines) {
  for (const char* good : {"# HELP a_b Some help.", "# TYPE a counter", "a 1",
                           "a:b{x=\"1\"} 2.5", "a{x=\"1\",y=\"\"} -3e+07"}) {
    EXPECT_TRUE(IsExpositionLine(good)) << good;
  }
  for (const char* bad : {"", "# nothing", "1a 2", "a", "a  1", "a{x=1} 2",
                          "a{x=\"1\" 2", "a{} 1", "a one", "a{x=\"1\"}1"}) {
    EXPECT_FALSE(IsExpositionLine(bad)) << bad;
  }
}

TEST_F(HttpApiTest, MetricsAreValidExposition) {
  HttpResult r = HttpGet(port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  std::istringstream lines(r.body);
  std::map<std::string, std::string> values;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(IsExpositionLine(line)) << "bad line: " << line;
    if (line[0] != '#') {
      size_t space = line.rfind(' ');
      values[line.substr(0, space)] = line.substr(space + 1);
    }
  }
  EXPECT_EQ(values["vigil_ingest_samples_total"], "6");
  EXPECT_EQ(values["vigil_ingest_frames_total"], "3");
  EXPECT_EQ(values["vigil_ingest_batches_total"], "1");
  EXPECT_EQ(values["vigil_series"], "2");
  EXPECT_EQ(values["vigil_connected_agents"], "0");
  EXPECT_EQ(values["vigil_ingest_rejected_total{reason=\"unknown_series\"}"], "0");
  EXPECT_EQ(values["vigil_ingest_dropped_samples_total{reason=\"duplicate\"}"], "0");
  EXPECT_TRUE(values.count("vigil_storage_bytes"));
  EXPECT_TRUE(values.count("vigil_frame_log_bytes"));
  // The process's own: read from the kernel and the allocator, so only
  // their plausibility is known (the start time a full Unix time, not
  // rounded to 6 digits).
  const auto number = [&values](const std::string& name) {
    double v = -1;
    EXPECT_TRUE(absl::SimpleAtod(values[name], &v)) << name << "=" << values[name];
    return v;
  };
  EXPECT_GT(number("process_cpu_seconds_total"), 0);
  EXPECT_GT(number("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(number("process_max_resident_memory_bytes"),
            number("process_resident_memory_bytes") * 0.5);
  EXPECT_GT(number("process_open_fds"), 3);
  const double started = number("process_start_time_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_GT(started, now - 3600) << values["process_start_time_seconds"];
  EXPECT_LE(started, now + 2);
  // The heap's count only when asked for: it holds the allocator's locks.
  EXPECT_EQ(values.count("vigil_heap_in_use_bytes"), 0u);
  const std::string with_heap = HttpGet(port(), "/metrics?heap=1").body;
  const size_t at = with_heap.find("\nvigil_heap_in_use_bytes ");
  ASSERT_NE(at, std::string::npos) << with_heap;
  double heap = 0;
  EXPECT_TRUE(absl::SimpleAtod(
      with_heap.substr(at + 25, with_heap.find('\n', at + 1) - at - 25), &heap));
  EXPECT_GT(heap, 1 << 16);
  // The 6 samples arrived in the current second, not yet a complete one.
  EXPECT_EQ(values["vigil_ingest_rate_samples_per_second"], "0");
  t_.clock.Advance(1);
  r = HttpGet(port(), "/metrics");
  EXPECT_NE(r.body.find("\nvigil_ingest_rate_samples_per_second 0.6\n"),
            std::string::npos)
      << r.body;
}

// A job's learned profiles can be read (by a viewer, or a signed peer), but
// a copy can be given only by a server of the fleet: a POST without the
// fleet's signature, or to a server without the peer secret, is refused
// and nothing is kept (server/cluster/profile_backups.h).
TEST_F(HttpApiTest, ProfileCopiesAreTakenOnlyFromSignedPeers) {
  const Json read = GetJson("/api/v1/cluster/profiles?job=llm");
  EXPECT_EQ(read["job"], "llm");
  EXPECT_TRUE(read["profiles"].is_string());
  HttpResult unsigned_copy =
      HttpCall(port(), "POST", "/api/v1/cluster/profiles?job=llm", "VGPF....", "");
  EXPECT_EQ(unsigned_copy.status, 401) << unsigned_copy.body;
  HttpResult signed_copy = HttpSend(
      port(), "POST", "/api/v1/cluster/profiles?job=llm", "VGPF....",
      {{"X-Vigil-Timestamp", "1800000000"}, {"X-Vigil-Signature", "v1=00"}});
  EXPECT_EQ(signed_copy.status, 401) << signed_copy.body;
  EXPECT_NE(signed_copy.body.find("peer_secret_file"), std::string::npos) << signed_copy.body;
  EXPECT_EQ(GetJson("/api/v1/cluster/profiles", 400)["error"].get<std::string>(),
            "parameter 'job': required");
}

TEST_F(HttpApiTest, RootWithoutWebDirIs404) {
  EXPECT_EQ(HttpGet(port(), "/").status, 404);
}

TEST(HttpWebDirTest, RootServesIndexHtml) {
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "vigil_web_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "index.html") << "<title>Vigil</title>";
  ServerOptions options = TestOptions();
  options.web_dir = dir.string();
  TestServer t(options);
  HttpResult r = HttpGet(t.server.http_port(), "/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<title>Vigil</title>");
  EXPECT_EQ(HttpGet(t.server.http_port(), "/healthz").status, 200);
}

}  // namespace
}  // namespace vigil::testing
