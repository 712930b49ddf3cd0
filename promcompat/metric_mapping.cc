#include "promcompat/metric_mapping.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace vigil::promcompat {
namespace {

using Json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

MetricRule Gpu(const char* from, const char* to, double scale = 1) {
  return MetricRule{from, to, scale, {{"gpu", "gpu"}}, {}, ""};
}

// A port of an InfiniBand HCA: dev <- device, port <- port.
MetricRule IbPort(const char* from, const char* to,
                  std::vector<std::pair<std::string, std::string>> set = {}) {
  return MetricRule{from, to, 1, {{"dev", "device"}, {"port", "port"}}, std::move(set), ""};
}

MetricRule Disk(const char* from, const char* to) {
  return MetricRule{from, to, 1, {{"dev", "device"}}, {}, ""};
}

std::string_view LabelOf(
    const std::vector<std::pair<std::string_view, std::string_view>>& labels,
    std::string_view name) {
  for (const auto& [n, v] : labels) {
    if (n == name) return v;
  }
  return {};
}

// Reads {"to": "from", ...} into pairs.
void ReadLabelMap(const Json& obj, const std::string& path, const char* key,
                  JsonConfigReader& reader, KeyDoc doc,
                  std::vector<std::pair<std::string, std::string>>* out) {
  const Json* it = reader.Value(obj, path, key, "map of label to string",
                                Json::object(), doc);
  if (it == nullptr) return;
  const std::string where = JsonConfigReader::Join(path, key);
  if (!it->is_object()) {
    reader.Error(where, "must be an object of label names to strings");
    return;
  }
  out->clear();
  for (const auto& [name, value] : it->items()) {
    if (!value.is_string()) {
      reader.Error(JsonConfigReader::Join(where, name), "must be a string");
      continue;
    }
    out->emplace_back(name, value.get<std::string>());
  }
}

}  // namespace

std::string_view HostOfInstance(std::string_view instance) {
  if (instance.starts_with('[')) {
    const size_t close = instance.find(']');
    if (close != std::string_view::npos) return instance.substr(1, close - 1);
    return instance;
  }
  const size_t colon = instance.rfind(':');
  if (colon == std::string_view::npos || instance.find(':') != colon) return instance;
  const std::string_view port = instance.substr(colon + 1);
  if (port.empty() || !std::all_of(port.begin(), port.end(),
                                   [](char c) { return c >= '0' && c <= '9'; }))
    return instance;
  return instance.substr(0, colon);
}

const std::vector<MetricRule>& DefaultMetricRules() {
  static const auto* rules = new std::vector<MetricRule>{
      // dcgm-exporter (default-counters.csv and dcp-metrics-included.csv).
      Gpu("DCGM_FI_DEV_POWER_USAGE", "gpu_power_watts"),
      Gpu("DCGM_FI_DEV_SM_CLOCK", "gpu_sm_clock_mhz"),
      Gpu("DCGM_FI_DEV_MEM_CLOCK", "gpu_memory_clock_mhz"),
      Gpu("DCGM_FI_DEV_GPU_TEMP", "gpu_temperature_celsius"),
      Gpu("DCGM_FI_DEV_MEMORY_TEMP", "gpu_memory_temperature_celsius"),
      Gpu("DCGM_FI_DEV_GPU_UTIL", "gpu_utilization_ratio", 0.01),
      Gpu("DCGM_FI_DEV_FB_USED", "gpu_memory_used_bytes", kMiB),
      Gpu("DCGM_FI_DEV_FB_TOTAL", "gpu_memory_total_bytes", kMiB),
      Gpu("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gpu_throttle_reasons"),
      Gpu("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "gpu_pcie_replays_total"),
      Gpu("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu_ecc_sbe_total"),
      Gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu_ecc_dbe_total"),
      Gpu("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "gpu_nvlink_crc_errors_total"),
      Gpu("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "gpu_nvlink_replay_errors_total"),
      Gpu("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
          "gpu_nvlink_recovery_errors_total"),
      Gpu("DCGM_FI_PROF_NVLINK_TX_BYTES", "gpu_nvlink_tx_bytes_per_second"),
      Gpu("DCGM_FI_PROF_NVLINK_RX_BYTES", "gpu_nvlink_rx_bytes_per_second"),
      Gpu("DCGM_FI_DEV_ROW_REMAP_PENDING", "gpu_remapped_rows_pending"),
      Gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gpu_remapped_rows_failure"),
      MetricRule{"DCGM_FI_DEV_XID_ERRORS", "gpu_xid_last", 1, {{"gpu", "gpu"}}, {},
                 "gpu_xid_errors_total"},
      // node_exporter's infiniband collector (the counters the agent reads
      // from the same sysfs files) and its diskstats collector. Its netdev
      // counters are left out: an Ethernet port's drop counter moves in
      // normal life (unknown protocols, multicast), and loopback or
      // container interfaces would get traffic baselines.
      IbPort("node_infiniband_port_data_transmitted_bytes_total", "net_tx_bytes_total"),
      IbPort("node_infiniband_port_data_received_bytes_total", "net_rx_bytes_total"),
      IbPort("node_infiniband_port_discards_transmitted_total", "net_drops_total",
             {{"dir", "tx"}}),
      IbPort("node_infiniband_port_errors_received_total", "net_drops_total",
             {{"dir", "rx"}}),
      IbPort("node_infiniband_link_downed_total", "net_link_downed_total"),
      IbPort("node_infiniband_symbol_error_total", "net_symbol_errors_total"),
      IbPort("node_infiniband_link_error_recovery_total", "net_link_error_recovery_total"),
      Disk("node_disk_reads_completed_total", "disk_reads_total"),
      Disk("node_disk_read_bytes_total", "disk_read_bytes_total"),
      Disk("node_disk_read_time_seconds_total", "disk_read_seconds_total"),
      Disk("node_disk_writes_completed_total", "disk_writes_total"),
      Disk("node_disk_written_bytes_total", "disk_write_bytes_total"),
      Disk("node_disk_write_time_seconds_total", "disk_write_seconds_total"),
      Disk("node_disk_io_time_seconds_total", "disk_io_seconds_total"),
  };
  return *rules;
}

const std::vector<std::string>& MappingKeys(MappingScope scope) {
  static const auto* with_identity = new std::vector<std::string>{
      "node_labels", "job_labels", "metrics", "use_default_metrics", "passthrough"};
  static const auto* series_only =
      new std::vector<std::string>{"metrics", "use_default_metrics", "passthrough"};
  return scope == MappingScope::kWithIdentity ? *with_identity : *series_only;
}

void ParseMappingKeys(const Json& section, const std::string& path,
                      JsonConfigReader& reader, MappingOptions* out, MappingScope scope) {
  const bool identity = scope == MappingScope::kWithIdentity;
  if (identity) {
    reader.StringList(section, path, "node_labels", &out->node_labels,
                      "Labels naming a series' node, first present wins (\"instance\" "
                      "loses its :port)");
  }
  reader.Bool(section, path, "use_default_metrics", &out->use_default_metrics,
              "Start from the built-in rules for dcgm-exporter and node_exporter "
              "(docs/PROMETHEUS.md); false: only the configured metrics");
  reader.StringList(section, path, "passthrough", &out->passthrough,
                    {"An unmapped metric whose name matches one in full is kept under "
                     "its own name and labels (less node and job); empty: unmapped "
                     "metrics are dropped",
                     "ECMAScript regexes"});
  if (identity) {
    Json job_labels = Json::array();
    for (const JobLabelRule& rule : out->job_labels) {
      job_labels.push_back({{"label", rule.label}});
      if (!rule.regex.empty()) job_labels.back()["regex"] = rule.regex;
    }
    if (const Json* it = reader.ObjectArray(
            section, path, "job_labels", std::move(job_labels),
            "Where a series' job comes from: the first rule whose label the series "
            "carries (and whose regex matches); none: the idle job")) {
      const std::string where = JsonConfigReader::Join(path, "job_labels");
      if (!it->is_array()) {
        reader.Error(where, "must be an array of {\"label\", \"regex\"}");
      } else {
        out->job_labels.clear();
        for (size_t i = 0; i < it->size(); ++i) {
          const Json& entry = (*it)[i];
          const std::string at = absl::StrCat(where, "[", i, "]");
          if (!reader.CheckObject(entry, at, {"label", "regex"})) continue;
          JobLabelRule rule;
          reader.String(entry, at, "label", &rule.label,
                        KeyDoc::Required("The label to read"));
          reader.String(entry, at, "regex", &rule.regex,
                        {"When set, the job is its first capture group, if it matches "
                         "the whole value; empty: the whole value",
                         "ECMAScript regex with a capture group"});
          if (rule.label.empty()) reader.Error(JsonConfigReader::Join(at, "label"), "required");
          out->job_labels.push_back(std::move(rule));
        }
      }
    }
  }
  if (const Json* it = reader.ObjectArray(
          section, path, "metrics", Json::array(),
          "Mapping rules added to the built-in ones; a rule replaces a built-in rule "
          "with the same from")) {
    const std::string where = JsonConfigReader::Join(path, "metrics");
    if (!it->is_array()) {
      reader.Error(where, "must be an array of rules");
    } else {
      out->metrics.clear();
      for (size_t i = 0; i < it->size(); ++i) {
        const Json& entry = (*it)[i];
        const std::string at = absl::StrCat(where, "[", i, "]");
        if (!reader.CheckObject(entry, at, {"from", "to", "scale", "labels", "set_labels",
                                            "changes_counter"}))
          continue;
        MetricRule rule;
        reader.String(entry, at, "from", &rule.from,
                      KeyDoc::Required("The Prometheus metric name, exact"));
        reader.String(entry, at, "to", &rule.to,
                      KeyDoc::Required("The Vigil metric it becomes (the catalogue's "
                                       "name and unit)"));
        if (const Json* s = reader.Value(entry, at, "scale", "number",
                                         ConfigSchema::Number(rule.scale),
                                         {"Factor applied to every sample (MiB to bytes: "
                                          "1048576, percent to ratio: 0.01)",
                                          "finite, not 0"})) {
          if (!s->is_number() || !std::isfinite(s->get<double>()) || s->get<double>() == 0) {
            reader.Error(JsonConfigReader::Join(at, "scale"), "must be a non-zero number");
          } else {
            rule.scale = s->get<double>();
          }
        }
        ReadLabelMap(entry, at, "labels", reader,
                     "Vigil label -> the Prometheus label it is copied from "
                     "({\"gpu\": \"gpu\"}); every other label is dropped",
                     &rule.labels);
        ReadLabelMap(entry, at, "set_labels", reader,
                     "Labels given a fixed value ({\"dir\": \"rx\"}), where two source "
                     "metrics land on one Vigil metric",
                     &rule.set_labels);
        reader.String(entry, at, "changes_counter", &rule.changes_counter,
                      "When set, also a counter of this name counting the changes of "
                      "the value to a non-zero value (DCGM's last XID -> an XID count); "
                      "empty: none");
        if (rule.from.empty()) reader.Error(JsonConfigReader::Join(at, "from"), "required");
        if (rule.to.empty()) reader.Error(JsonConfigReader::Join(at, "to"), "required");
        out->metrics.push_back(std::move(rule));
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<MetricMapper>> MetricMapper::Create(
    const MappingOptions& options) {
  std::unique_ptr<MetricMapper> m(new MetricMapper());
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (options.node_labels.empty() && options.default_node.empty())
    return bad("node_labels: at least one label is needed");
  for (const std::string& label : options.node_labels) {
    if (absl::Status s = ValidateLabelName(label); !s.ok())
      return bad(absl::StrCat("node_labels: ", s.message()));
  }
  m->node_labels_ = options.node_labels;
  m->default_node_ = options.default_node;
  for (const JobLabelRule& rule : options.job_labels) {
    if (absl::Status s = ValidateLabelName(rule.label); !s.ok())
      return bad(absl::StrCat("job_labels: ", s.message()));
    CompiledJobRule compiled{rule.label, std::nullopt};
    if (!rule.regex.empty()) {
      try {
        compiled.regex.emplace(rule.regex, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        return bad(absl::StrCat("job_labels: regex \"", rule.regex, "\": ", e.what()));
      }
      if (compiled.regex->mark_count() < 1)
        return bad(absl::StrCat("job_labels: regex \"", rule.regex,
                                "\" needs a capture group: the job is its first group"));
    }
    m->job_rules_.push_back(std::move(compiled));
  }
  // Configured rules replace default ones of the same source.
  std::vector<MetricRule> rules;
  if (options.use_default_metrics) rules = DefaultMetricRules();
  std::set<std::string> configured;
  for (const MetricRule& rule : options.metrics) {
    if (!configured.insert(rule.from).second)
      return bad(absl::StrCat("metrics: \"", rule.from, "\" is mapped twice"));
    std::erase_if(rules, [&](const MetricRule& r) { return r.from == rule.from; });
    rules.push_back(rule);
  }
  for (const MetricRule& rule : rules) {
    const std::string who = absl::StrCat("metrics: rule for \"", rule.from, "\": ");
    if (absl::Status s = ValidateMetricName(rule.from); !s.ok())
      return bad(absl::StrCat(who, "from: ", s.message()));
    if (absl::Status s = ValidateMetricName(rule.to); !s.ok())
      return bad(absl::StrCat(who, "to: ", s.message()));
    if (!rule.changes_counter.empty()) {
      if (absl::Status s = ValidateMetricName(rule.changes_counter); !s.ok())
        return bad(absl::StrCat(who, "changes_counter: ", s.message()));
    }
    if (!std::isfinite(rule.scale) || rule.scale == 0)
      return bad(absl::StrCat(who, "scale must be a non-zero number"));
    for (const auto* list : {&rule.labels, &rule.set_labels}) {
      for (const auto& [to, from] : *list) {
        if (absl::Status s = ValidateLabelName(to); !s.ok())
          return bad(absl::StrCat(who, "label ", s.message()));
        if (to == "job" || to == "node")
          return bad(absl::StrCat(who, "label \"", to,
                                  "\" is reserved: it comes from node_labels and job_labels"));
      }
    }
    m->by_source_[rule.from] = m->rules_.size();
    m->rules_.push_back(rule);
  }
  for (const std::string& pattern : options.passthrough) {
    try {
      m->passthrough_.emplace_back(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return bad(absl::StrCat("passthrough: regex \"", pattern, "\": ", e.what()));
    }
  }
  return m;
}

double ChangeCounter::Observe(const std::string& key, double value) {
  auto [it, first] = series_.try_emplace(key, std::make_pair(value, 0.0));
  auto& [previous, count] = it->second;
  if (!first && value != previous && value != 0 && !std::isnan(value)) ++count;
  previous = value;
  return count;
}

MetricMapper::Outcome MetricMapper::Map(
    std::string_view metric,
    const std::vector<std::pair<std::string_view, std::string_view>>& labels,
    MappedSeries* out, std::string* why) const {
  const MetricRule* rule = nullptr;
  if (auto it = by_source_.find(std::string(metric)); it != by_source_.end()) {
    rule = &rules_[it->second];
  } else {
    const std::string name(metric);
    const bool kept = std::any_of(passthrough_.begin(), passthrough_.end(),
                                  [&](const std::regex& re) { return std::regex_match(name, re); });
    if (!kept) return Outcome::kUnmapped;
  }
  out->node.clear();
  for (const std::string& label : node_labels_) {
    std::string_view value = LabelOf(labels, label);
    if (label == "instance") value = HostOfInstance(value);
    if (!value.empty()) {
      out->node.assign(value);
      break;
    }
  }
  if (out->node.empty()) out->node = default_node_;
  if (out->node.empty()) return Outcome::kNoNode;
  out->job.clear();
  for (const CompiledJobRule& rule_of_job : job_rules_) {
    const std::string_view value = LabelOf(labels, rule_of_job.label);
    if (value.empty()) continue;
    if (!rule_of_job.regex) {
      out->job.assign(value);
      break;
    }
    std::match_results<std::string_view::const_iterator> match;
    if (std::regex_match(value.begin(), value.end(), match, *rule_of_job.regex) &&
        match[1].length() > 0) {
      out->job = match[1].str();
      break;
    }
  }
  out->key.labels.clear();
  if (rule != nullptr) {
    out->key.metric = rule->to;
    out->scale = rule->scale;
    out->changes_counter = rule->changes_counter;
    for (const auto& [to, from] : rule->labels) {
      const std::string_view value = LabelOf(labels, from);
      if (!value.empty()) out->key.labels.emplace_back(to, std::string(value));
    }
    for (const auto& [to, value] : rule->set_labels) out->key.labels.emplace_back(to, value);
  } else {
    out->key.metric.assign(metric);
    out->scale = 1;
    out->changes_counter = {};
    for (const auto& label : labels) {
      const auto& name = label.first;
      if (name == "__name__" || name == "job" || name == "node" || name == "instance" ||
          std::find(node_labels_.begin(), node_labels_.end(), name) != node_labels_.end() ||
          std::any_of(job_rules_.begin(), job_rules_.end(),
                      [&](const CompiledJobRule& r) { return r.label == name; }))
        continue;
      out->key.labels.emplace_back(std::string(name), std::string(label.second));
    }
  }
  if (absl::Status s = NormalizeSeriesKey(&out->key); !s.ok()) {
    if (why != nullptr) *why = absl::StrCat(out->key.ToString(), ": ", s.message());
    return Outcome::kBadSeries;
  }
  // Room for the node and job labels the ingest path adds.
  if (out->key.labels.size() + 2 > kMaxLabels) {
    if (why != nullptr)
      *why = absl::StrCat(out->key.ToString(), ": at most ", kMaxLabels - 2, " labels");
    return Outcome::kBadSeries;
  }
  if (absl::Status s = ValidateLabelValue("node", out->node); !s.ok()) {
    if (why != nullptr) *why = absl::StrCat("node \"", out->node, "\": ", s.message());
    return Outcome::kBadSeries;
  }
  if (!out->job.empty()) {
    if (absl::Status s = ValidateLabelValue("job", out->job); !s.ok()) {
      if (why != nullptr) *why = absl::StrCat("job \"", out->job, "\": ", s.message());
      return Outcome::kBadSeries;
    }
  }
  return Outcome::kMapped;
}

}  // namespace vigil::promcompat
