// Scrapes Prometheus exporters on the node (dcgm-exporter, node_exporter)
// as one more collector, for sites that keep DCGM: each tick the agent
// reads their /metrics pages over HTTP and maps the series onto Vigil's
// catalogue as the server's remote-write receiver does (promcompat/
// metric_mapping.h; docs/PROMETHEUS.md). The node is the agent's own; the
// job is the agent's (the training endpoint's or the idle job), never an
// exporter's label.
#ifndef VIGIL_AGENT_EXPORTER_COLLECTOR_H_
#define VIGIL_AGENT_EXPORTER_COLLECTOR_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "agent/collector.h"
#include "common/clock.h"
#include "promcompat/metric_mapping.h"

namespace vigil::agent {

struct ExporterOptions {
  // Pages to scrape: http://HOST:PORT/PATH (plain HTTP; exporters on the
  // node listen on loopback or the node's address).
  std::vector<std::string> urls;
  // Per page and tick, connect to last byte.
  double timeout_seconds = 0.5;
  // Largest page read; a larger one is an error for that tick.
  size_t max_page_bytes = 8u << 20;
  // The mapping; its default_node is set to the agent's node.
  promcompat::MappingOptions mapping;
  Clock* clock = nullptr;  // required: the timeout's deadline
};

class ExporterCollector : public Collector {
 public:
  // kInvalidArgument for no URL, a URL that is not http://HOST:PORT/PATH,
  // or a mapping that does not compile.
  static absl::StatusOr<std::unique_ptr<ExporterCollector>> Create(ExporterOptions options);

  std::string_view name() const override { return "exporter"; }
  // Scrapes every page; a page that cannot be read or parsed is skipped
  // (named in the status) and the others' samples are still added.
  absl::Status Collect(Tick* tick) override;
  // scrapes_total, scrape_errors_total, samples_total, unmapped_total.
  std::vector<std::pair<std::string, double>> HealthCounters() const override;

 private:
  struct Url {
    std::string text;
    std::string host;
    std::string port;
    std::string path;
  };
  ExporterCollector(ExporterOptions options, std::vector<Url> urls,
                    std::unique_ptr<promcompat::MetricMapper> mapper);
  // The page's body; an error naming the URL and what went wrong.
  absl::StatusOr<std::string> Fetch(const Url& url) const;

  const ExporterOptions options_;
  const std::vector<Url> urls_;
  const std::unique_ptr<promcompat::MetricMapper> mapper_;
  // DCGM's last-XID gauge turned into a count (by encoded key).
  promcompat::ChangeCounter changes_;
  std::atomic<uint64_t> scrapes_{0}, errors_{0}, samples_{0}, unmapped_{0};
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_EXPORTER_COLLECTOR_H_
