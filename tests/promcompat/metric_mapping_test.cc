#include "promcompat/metric_mapping.h"

#include <set>

#include "gtest/gtest.h"

namespace vigil::promcompat {
namespace {

using Labels = std::vector<std::pair<std::string_view, std::string_view>>;

std::unique_ptr<MetricMapper> Mapper(const MappingOptions& options = MappingOptions()) {
  absl::StatusOr<std::unique_ptr<MetricMapper>> m = MetricMapper::Create(options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

TEST(MetricMappingTest, DcgmPowerBecomesGpuPowerOfTheHostname) {
  auto m = Mapper();
  MappedSeries out;
  const Labels labels = {{"__name__", "DCGM_FI_DEV_POWER_USAGE"},
                         {"gpu", "3"},
                         {"UUID", "GPU-1234"},
                         {"modelName", "NVIDIA H100 80GB HBM3"},
                         {"Hostname", "gpu-node-7"},
                         {"instance", "10.0.0.7:9400"},
                         {"job", "dcgm"},
                         {"hpc_job", "4242"}};
  ASSERT_EQ(m->Map("DCGM_FI_DEV_POWER_USAGE", labels, &out), MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.key.ToString(), "gpu_power_watts{gpu=\"3\"}");
  EXPECT_EQ(out.node, "gpu-node-7");
  EXPECT_EQ(out.job, "4242");  // not the scrape job "dcgm"
  EXPECT_EQ(out.scale, 1);
}

TEST(MetricMappingTest, UnitsAreConverted) {
  auto m = Mapper();
  MappedSeries out;
  const Labels labels = {{"gpu", "0"}, {"Hostname", "n1"}};
  ASSERT_EQ(m->Map("DCGM_FI_DEV_FB_USED", labels, &out), MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.key.metric, "gpu_memory_used_bytes");
  EXPECT_EQ(out.scale, 1024.0 * 1024.0);
  ASSERT_EQ(m->Map("DCGM_FI_DEV_GPU_UTIL", labels, &out), MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.key.metric, "gpu_utilization_ratio");
  EXPECT_DOUBLE_EQ(out.scale, 0.01);
  ASSERT_EQ(m->Map("DCGM_FI_DEV_XID_ERRORS", labels, &out), MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.key.metric, "gpu_xid_last");
  EXPECT_EQ(out.changes_counter, "gpu_xid_errors_total");
}

TEST(MetricMappingTest, InstanceLosesItsPortAndNodeExporterKeepsDevices) {
  auto m = Mapper();
  MappedSeries out;
  const Labels ib = {{"device", "mlx5_0"}, {"port", "1"}, {"instance", "gpu-3:9100"}};
  ASSERT_EQ(m->Map("node_infiniband_port_errors_received_total", ib, &out),
            MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.node, "gpu-3");
  EXPECT_EQ(out.key.ToString(), "net_drops_total{dev=\"mlx5_0\",dir=\"rx\",port=\"1\"}");
  EXPECT_EQ(out.job, "");
  const Labels v6 = {{"device", "nvme0n1"}, {"instance", "[fd00::7]:9100"}};
  ASSERT_EQ(m->Map("node_disk_read_bytes_total", v6, &out), MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.node, "fd00::7");
  EXPECT_EQ(out.key.ToString(), "disk_read_bytes_total{dev=\"nvme0n1\"}");
}

TEST(MetricMappingTest, UnmappedAndNodelessSeriesAreSaidSo) {
  auto m = Mapper();
  MappedSeries out;
  EXPECT_EQ(m->Map("go_goroutines", {{"instance", "a:1"}}, &out),
            MetricMapper::Outcome::kUnmapped);
  EXPECT_EQ(m->Map("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}}, &out),
            MetricMapper::Outcome::kNoNode);
  // Ethernet drops move in normal life: not mapped by default.
  EXPECT_EQ(m->Map("node_network_receive_drop_total", {{"instance", "a:1"}}, &out),
            MetricMapper::Outcome::kUnmapped);
}

TEST(MetricMappingTest, JobFromAPodNameThroughARegex) {
  MappingOptions options;
  options.job_labels = {{"job_id", ""}, {"pod", "^(.+)-worker-[0-9]+$"}};
  auto m = Mapper(options);
  MappedSeries out;
  ASSERT_EQ(m->Map("DCGM_FI_DEV_GPU_TEMP",
                   {{"gpu", "1"}, {"Hostname", "n"}, {"pod", "llama-70b-worker-12"}}, &out),
            MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.job, "llama-70b");
  // A pod the regex does not match names no job.
  ASSERT_EQ(m->Map("DCGM_FI_DEV_GPU_TEMP",
                   {{"gpu", "1"}, {"Hostname", "n"}, {"pod", "prometheus-0"}}, &out),
            MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.job, "");
}

TEST(MetricMappingTest, ConfiguredRulesReplaceDefaultsAndPassthroughKeepsNames) {
  MappingOptions options;
  options.metrics = {{"DCGM_FI_DEV_POWER_USAGE", "gpu_board_power_watts", 1, {{"gpu", "gpu"}}, {}, ""},
                     {"node_network_transmit_bytes_total", "net_tx_bytes_total", 1,
                      {{"dev", "device"}}, {}, ""}};
  options.passthrough = {"^my_app_.*"};
  auto m = Mapper(options);
  MappedSeries out;
  ASSERT_EQ(m->Map("DCGM_FI_DEV_POWER_USAGE", {{"gpu", "0"}, {"Hostname", "n"}}, &out),
            MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.key.metric, "gpu_board_power_watts");
  ASSERT_EQ(m->Map("node_network_transmit_bytes_total", {{"device", "eth0"}, {"instance", "n:9100"}},
                   &out),
            MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.key.ToString(), "net_tx_bytes_total{dev=\"eth0\"}");
  ASSERT_EQ(m->Map("my_app_queue_depth",
                   {{"__name__", "my_app_queue_depth"}, {"queue", "a"}, {"instance", "n:1"},
                    {"job", "app"}, {"job_id", "77"}},
                   &out),
            MetricMapper::Outcome::kMapped);
  EXPECT_EQ(out.key.ToString(), "my_app_queue_depth{queue=\"a\"}");
  EXPECT_EQ(out.job, "77");
}

TEST(MetricMappingTest, BadLabelValuesAreReportedNotMapped) {
  auto m = Mapper();
  MappedSeries out;
  std::string why;
  const std::string long_node(300, 'x');
  EXPECT_EQ(m->Map("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}, {"Hostname", long_node}}, &out, &why),
            MetricMapper::Outcome::kBadSeries);
  EXPECT_NE(why.find("node"), std::string::npos) << why;
}

TEST(MetricMappingTest, BadConfigurationsAreRefusedWithTheirReason) {
  MappingOptions twice;
  twice.metrics = {{"A", "a", 1, {}, {}, ""}, {"A", "b", 1, {}, {}, ""}};
  EXPECT_NE(MetricMapper::Create(twice).status().message().find("mapped twice"),
            std::string::npos);
  MappingOptions reserved;
  reserved.metrics = {{"A", "a", 1, {{"job", "hpc_job"}}, {}, ""}};
  EXPECT_NE(MetricMapper::Create(reserved).status().message().find("reserved"),
            std::string::npos);
  MappingOptions no_group;
  no_group.job_labels = {{"pod", "^.*$"}};
  EXPECT_NE(MetricMapper::Create(no_group).status().message().find("capture group"),
            std::string::npos);
  MappingOptions bad_regex;
  bad_regex.passthrough = {"(("};
  EXPECT_FALSE(MetricMapper::Create(bad_regex).ok());
  MappingOptions no_nodes;
  no_nodes.node_labels = {};
  EXPECT_FALSE(MetricMapper::Create(no_nodes).ok());
}

TEST(MetricMappingTest, ConfigSectionIsReadWithKeyPaths) {
  JsonConfigReader reader;
  MappingOptions options;
  const nlohmann::json section = nlohmann::json::parse(R"({
    "node_labels": ["kubernetes_node", "instance"],
    "job_labels": [{"label": "pod", "regex": "^(.+)-[0-9]+$"}],
    "metrics": [{"from": "X", "to": "y", "scale": 2, "labels": {"gpu": "minor"},
                 "set_labels": {"kind": "k"}},
                {"from": "Z", "scale": "big"}]
  })");
  ParseMappingKeys(section, "remote_write_receiver", reader, &options);
  ASSERT_EQ(reader.errors().size(), 2u);
  EXPECT_EQ(reader.errors()[0], "remote_write_receiver.metrics[1].scale: must be a non-zero number");
  EXPECT_EQ(reader.errors()[1], "remote_write_receiver.metrics[1].to: required");
  EXPECT_EQ(options.node_labels, (std::vector<std::string>{"kubernetes_node", "instance"}));
  ASSERT_EQ(options.metrics.size(), 2u);
  EXPECT_EQ(options.metrics[0].scale, 2);
  EXPECT_EQ(options.metrics[0].labels[0], (std::pair<std::string, std::string>{"gpu", "minor"}));
}

// Every default rule maps onto a valid series; every source is listed once
// and in docs/PROMETHEUS.md (the table operators read).
TEST(MetricMappingTest, DefaultRulesAreValidAndDocumented) {
  auto m = Mapper();
  ASSERT_NE(m, nullptr);
  std::set<std::string> sources;
  for (const MetricRule& rule : DefaultMetricRules()) {
    EXPECT_TRUE(sources.insert(rule.from).second) << rule.from;
  }
  FILE* f = std::fopen(VIGIL_SOURCE_DIR "/docs/PROMETHEUS.md", "r");
  ASSERT_NE(f, nullptr);
  std::string doc;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) doc.append(buf, n);
  std::fclose(f);
  for (const MetricRule& rule : DefaultMetricRules()) {
    EXPECT_NE(doc.find("`" + rule.from + "`"), std::string::npos)
        << rule.from << " is not in docs/PROMETHEUS.md";
    EXPECT_NE(doc.find("`" + rule.to + "`"), std::string::npos)
        << rule.to << " is not in docs/PROMETHEUS.md";
  }
}

}  // namespace
}  // namespace vigil::promcompat

namespace vigil::promcompat {
namespace {

TEST(ChangeCounterTest, CountsChangesToANonZeroCode) {
  ChangeCounter c;
  // A GPU whose last XID was already 13 when first read counts nothing.
  EXPECT_EQ(c.Observe("gpu0", 13), 0);
  EXPECT_EQ(c.Observe("gpu0", 13), 0);
  EXPECT_EQ(c.Observe("gpu0", 79), 1);
  EXPECT_EQ(c.Observe("gpu0", 0), 1);   // cleared: not an event
  EXPECT_EQ(c.Observe("gpu0", 48), 2);
  EXPECT_EQ(c.Observe("gpu1", 0), 0);   // series are apart
  EXPECT_EQ(c.Observe("gpu1", 31), 1);
}

}  // namespace
}  // namespace vigil::promcompat
