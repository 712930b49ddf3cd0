#include "agent/exporter_collector.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>

#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

// A one-thread HTTP server on 127.0.0.1 that answers every connection with
// `response` (after `delay_ms`).
class FixtureExporter {
 public:
  explicit FixtureExporter(std::string response, int delay_ms = 0)
      : response_(std::move(response)), delay_ms_(delay_ms) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 8);
    thread_ = std::thread([this] {
      while (true) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0 || stopping_) {
          if (c >= 0) close(c);
          return;
        }
        char buf[4096];
        (void)recv(c, buf, sizeof(buf), 0);
        if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
        (void)send(c, response_.data(), response_.size(), MSG_NOSIGNAL);
        close(c);
      }
    });
  }
  ~FixtureExporter() {
    stopping_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/metrics"; }

 private:
  const std::string response_;
  const int delay_ms_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

std::string Ok(const std::string& body) {
  return "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\r\n" + body;
}

std::string DcgmPage(double xid) {
  return "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
         "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",Hostname=\"elsewhere\"} 612.5\n"
         "DCGM_FI_DEV_FB_USED{gpu=\"0\",Hostname=\"elsewhere\"} 1024\n"
         "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",Hostname=\"elsewhere\"} " +
         std::to_string(xid) +
         "\n"
         "go_goroutines 12\n";
}

std::map<std::string, double> Collect(ExporterCollector& c, absl::Status* status = nullptr) {
  Tick tick;
  absl::Status s = c.Collect(&tick);
  if (status != nullptr) *status = s;
  std::map<std::string, double> out;
  for (const Sample& sample : tick.samples) out[sample.key.ToString()] = sample.value;
  return out;
}

std::unique_ptr<ExporterCollector> Make(std::vector<std::string> urls, double timeout = 2) {
  ExporterOptions o;
  o.urls = std::move(urls);
  o.timeout_seconds = timeout;
  o.mapping.node_labels.clear();
  o.mapping.default_node = "gpu-node-1";
  o.clock = RealClock();
  absl::StatusOr<std::unique_ptr<ExporterCollector>> c = ExporterCollector::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

TEST(ExporterCollectorTest, MapsADcgmExporterPageOntoVigilsSeries) {
  FixtureExporter exporter(Ok(DcgmPage(0)));
  auto c = Make({exporter.url()});
  const std::map<std::string, double> samples = Collect(*c);
  EXPECT_EQ(samples, (std::map<std::string, double>{
                         {"gpu_power_watts{gpu=\"0\"}", 612.5},
                         {"gpu_memory_used_bytes{gpu=\"0\"}", 1024.0 * 1024 * 1024},
                         {"gpu_xid_last{gpu=\"0\"}", 0},
                         {"gpu_xid_errors_total{gpu=\"0\"}", 0}}));
  const auto counters = c->HealthCounters();
  EXPECT_EQ(counters[3], (std::pair<std::string, double>{"unmapped_total", 1}));
}

// One collector scraping two pages of the same GPU in one tick sees the
// last-XID code go 0 -> 79: one XID.
TEST(ExporterCollectorTest, ANewXidCodeCountsOne) {
  FixtureExporter quiet(Ok(DcgmPage(0)));
  FixtureExporter xid(Ok(DcgmPage(79)));
  auto both = Make({quiet.url(), xid.url()});
  const auto samples = Collect(*both);
  EXPECT_EQ(samples.at("gpu_xid_last{gpu=\"0\"}"), 79);
  EXPECT_EQ(samples.at("gpu_xid_errors_total{gpu=\"0\"}"), 1);
}

TEST(ExporterCollectorTest, AFailingExporterIsNamedAndTheOthersStillCount) {
  FixtureExporter good(Ok(DcgmPage(0)));
  FixtureExporter broken("HTTP/1.0 500 Internal Server Error\r\n\r\noops");
  FixtureExporter garbage(Ok("this is not { a page\n"));
  FixtureExporter slow(Ok(DcgmPage(0)), /*delay_ms=*/1500);
  auto c = Make({good.url(), broken.url(), garbage.url(), slow.url(),
                 "http://127.0.0.1:1/metrics"},
                /*timeout=*/0.5);
  absl::Status status;
  const auto samples = Collect(*c, &status);
  EXPECT_EQ(samples.size(), 4u);
  const std::string m(status.message());
  EXPECT_NE(m.find(broken.url() + ": HTTP 500"), std::string::npos) << m;
  EXPECT_NE(m.find(garbage.url() + ": line 1"), std::string::npos) << m;
  EXPECT_NE(m.find(slow.url() + ": no complete answer within 0.5 s"), std::string::npos) << m;
  EXPECT_NE(m.find("127.0.0.1:1/metrics: "), std::string::npos) << m;
}

TEST(ExporterCollectorTest, BadUrlsAreRefusedAtStart) {
  for (const char* url : {"https://127.0.0.1:9400/metrics", "http://localhost/metrics",
                          "http://:9400/", "http://h:port/"}) {
    ExporterOptions o;
    o.urls = {url};
    o.mapping.default_node = "n";
    o.clock = RealClock();
    EXPECT_FALSE(ExporterCollector::Create(o).ok()) << url;
  }
  ExporterOptions none;
  none.clock = RealClock();
  EXPECT_NE(ExporterCollector::Create(none).status().message().find("no urls"), std::string::npos);
}

}  // namespace
}  // namespace vigil::agent
