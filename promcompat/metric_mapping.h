// How series of the Prometheus world (dcgm-exporter, node_exporter, any
// exporter a site already scrapes) become Vigil's series: the metric name
// and unit of Vigil's catalogue, the labels its detectors read (gpu, dev),
// the node and the job. Pure: no I/O, no clock. The default table and what
// each entry means: docs/PROMETHEUS.md.
#ifndef VIGIL_PROMCOMPAT_METRIC_MAPPING_H_
#define VIGIL_PROMCOMPAT_METRIC_MAPPING_H_

#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/json_reader.h"
#include "common/series_key.h"

namespace vigil::promcompat {

// One mapping: samples of the Prometheus metric `from` become samples of
// Vigil's metric `to`, times `scale`.
struct MetricRule {
  std::string from;  // exact Prometheus metric name
  std::string to;    // Vigil metric name (detector/metric_catalog.cc)
  double scale = 1;  // e.g. MiB -> bytes, percent -> ratio
  // Vigil label <- Prometheus label, e.g. {"gpu", "gpu"}, {"dev", "device"}.
  // Every other label of the source series is dropped: exporters add
  // labels (UUID, modelName, driver version) that would split a series.
  std::vector<std::pair<std::string, std::string>> labels;
  // Labels given a fixed value, e.g. {"dir", "rx"} where two source
  // metrics land on one Vigil metric.
  std::vector<std::pair<std::string, std::string>> set_labels;
  // When non-empty: also a counter of this name that counts the times the
  // value changed to a non-zero value. DCGM reports the code of a GPU's
  // last XID, where Vigil's XID red line reads a count of XIDs.
  std::string changes_counter;
};

// Where a series' job comes from: label `label`, whole, or the first
// capture group of `regex` (ECMAScript) when it matches the whole value.
struct JobLabelRule {
  std::string label;
  std::string regex;
};

// The mapping as configured (the "mapping" part of a receiver's or a
// scraping collector's config). Plain data; copyable.
struct MappingOptions {
  // The node of a series: the first of these labels it carries. An
  // "instance" value loses its ":port" ("gpu-7:9400" -> "gpu-7").
  std::vector<std::string> node_labels = {"Hostname", "node", "instance"};
  // The node of a series that carries none of node_labels; empty: such a
  // series is kNoNode. An agent scraping its own node's exporter sets its
  // node name here (and may clear node_labels).
  std::string default_node;
  // The job of a series: the first rule whose label it carries (and whose
  // regex matches). Prometheus' own "job" label names the scrape job, not
  // the training job, and is never used unless listed here.
  std::vector<JobLabelRule> job_labels = {
      {"job_id", ""}, {"hpc_job", ""}, {"slurm_job_id", ""}};
  // The rules, by source metric; DefaultMetricRules() unless configured.
  std::vector<MetricRule> metrics;
  bool use_default_metrics = true;
  // ECMAScript regexes: an unmapped metric whose name matches one in full
  // is kept under its own name with its labels (less the node and job
  // ones). Empty: unmapped metrics are dropped (and counted by callers).
  std::vector<std::string> passthrough;
};

// The host of a Prometheus "instance" label: "gpu-7:9400" -> "gpu-7",
// "[fd00::7]:9100" -> "fd00::7"; a value without a numeric port unchanged.
std::string_view HostOfInstance(std::string_view instance);

// The built-in rules for NVIDIA dcgm-exporter's and node_exporter's
// metrics (listed in docs/PROMETHEUS.md).
const std::vector<MetricRule>& DefaultMetricRules();

// Which keys a mapping section has: all of them, or only those about
// series, where the node and the job are known otherwise (the agent's
// exporter collector maps its own node's pages, under its own job).
enum class MappingScope { kWithIdentity, kSeriesOnly };

// Reads a mapping section (`path` names it in errors, e.g.
// "remote_write_receiver") into `*out`, recording every problem in
// `reader`. Keys: node_labels and job_labels ([{"label", "regex"}]) with
// kWithIdentity, metrics ([{"from", "to", "scale", "labels": {to: from},
// "set_labels": {..}, "changes_counter"}]: added to the defaults, replacing
// one with the same "from"), use_default_metrics, passthrough. The caller
// checks the section's keys (MappingKeys(scope) lists these).
void ParseMappingKeys(const nlohmann::json& section, const std::string& path,
                      JsonConfigReader& reader, MappingOptions* out,
                      MappingScope scope = MappingScope::kWithIdentity);
// The keys ParseMappingKeys reads in `scope`.
const std::vector<std::string>& MappingKeys(MappingScope scope = MappingScope::kWithIdentity);

// One source series, mapped.
struct MappedSeries {
  SeriesKey key;        // Vigil metric and labels; no node or job label
  std::string node;     // never empty
  std::string job;      // empty when the series names none
  double scale = 1;
  // The rule's changes_counter, or empty (passthrough series: empty).
  std::string_view changes_counter;
};

// Turns a gauge that holds the code of a source's last event (DCGM's last
// XID) into a count of events, for a rule's changes_counter: the count goes
// up by one each time a series' value changes to a non-zero value. The first
// value of a series counts nothing (an old event); two events of the same
// code between two readings count once. Not thread-safe.
class ChangeCounter {
 public:
  // The count of series `key` (any stable identity, e.g. an encoded
  // SeriesKey) after its reading `value`.
  double Observe(const std::string& key, double value);

 private:
  // Per series: the previous value and the count.
  absl::flat_hash_map<std::string, std::pair<double, double>> series_;
};

// Applies a mapping. Immutable after Create; thread-safe.
class MetricMapper {
 public:
  // What became of a source series.
  enum class Outcome {
    kMapped,
    kUnmapped,   // no rule, and no passthrough pattern matched
    kNoNode,     // none of node_labels present (or empty after ":port")
    kBadSeries,  // the mapped key is not a valid series key (`why` says)
  };

  // Checks and compiles `options`. kInvalidArgument naming the problem: a
  // bad metric or label name, a rule mapping one source twice, a regex that
  // does not compile or (job_labels) has no capture group but is set.
  static absl::StatusOr<std::unique_ptr<MetricMapper>> Create(
      const MappingOptions& options);

  // Maps the series named `metric` with labels `labels` (any order;
  // Prometheus' "__name__" is ignored if present). On kBadSeries `*why`
  // (if not null) says which label or name is at fault.
  Outcome Map(std::string_view metric,
              const std::vector<std::pair<std::string_view, std::string_view>>& labels,
              MappedSeries* out, std::string* why = nullptr) const;

 private:
  struct CompiledJobRule {
    std::string label;
    std::optional<std::regex> regex;
  };
  MetricMapper() = default;

  std::vector<std::string> node_labels_;
  std::string default_node_;
  std::vector<CompiledJobRule> job_rules_;
  std::vector<MetricRule> rules_;
  absl::flat_hash_map<std::string, size_t> by_source_;
  std::vector<std::regex> passthrough_;
};

}  // namespace vigil::promcompat

#endif  // VIGIL_PROMCOMPAT_METRIC_MAPPING_H_
