#include "rules/rule.h"

#include <array>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vigil {
namespace {

constexpr std::array<std::string_view, 12> kPlaceholders = {
    "job",   "node",  "gpu",     "dev",      "where",  "metric",
    "value", "score", "percent", "baseline", "detail", "tier"};

// The XID code of `a`: its code, else N of a detail starting "xid N"
// (anomalies recorded before codes existed); nullopt when none.
std::optional<int> XidCode(const Anomaly& a) {
  if (a.code) return a.code;
  constexpr std::string_view kPrefix = "xid ";
  const std::string_view detail = a.detail;
  if (!detail.starts_with(kPrefix)) return std::nullopt;
  const std::string_view digits = detail.substr(kPrefix.size());
  int code = 0;
  const auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), code);
  if (ec != std::errc() || end == digits.data() ||
      (end != digits.data() + digits.size() && *end != ',')) {
    return std::nullopt;
  }
  return code;
}

bool MetricMatches(std::string_view pattern, std::string_view metric) {
  if (pattern.ends_with('*')) {
    return metric.starts_with(pattern.substr(0, pattern.size() - 1));
  }
  return pattern == metric;
}

std::string Number(double x) {
  if (std::isnan(x)) return "n/a";
  return absl::StrFormat("%.4g", x);
}

}  // namespace

bool RuleMatch::Matches(const Anomaly& a) const {
  bool kind_ok = false;
  for (AnomalyKind k : kinds) kind_ok = kind_ok || k == a.kind;
  if (!kind_ok) return false;
  if (!metrics.empty()) {
    bool metric_ok = false;
    for (const std::string& m : metrics) {
      metric_ok = metric_ok || MetricMatches(m, a.metric);
    }
    if (!metric_ok) return false;
  }
  if (tier && *tier != a.tier) return false;
  if (min_score && !(std::fabs(a.score) >= *min_score)) return false;
  if (!xid_codes.empty()) {
    const std::optional<int> code = XidCode(a);
    if (!code) return false;
    bool code_ok = false;
    for (int c : xid_codes) code_ok = code_ok || c == *code;
    if (!code_ok) return false;
  }
  return true;
}

const Rule* RuleSet::Find(const Anomaly& anomaly) const {
  for (const Rule& r : rules) {
    if (r.enabled && r.match.Matches(anomaly)) return &r;
  }
  return nullptr;
}

std::vector<Response> DefaultResponses(Severity severity) {
  switch (severity) {
    case Severity::kP0:
      return {Response::kCheckpointThenPauseJob, Response::kCordonNode};
    case Severity::kP1:
      return {Response::kNotifySre};
    case Severity::kP2:
      return {Response::kDiagnosticReport};
    case Severity::kP3:
      break;
  }
  return {Response::kLog};
}

bool IsSummaryPlaceholder(std::string_view name) {
  for (std::string_view p : kPlaceholders) {
    if (p == name) return true;
  }
  return false;
}

std::string RenderSummary(std::string_view summary, const Anomaly& a,
                          std::string_view where) {
  std::string out;
  size_t i = 0;
  while (i < summary.size()) {
    const size_t open = summary.find('{', i);
    const size_t close =
        open == std::string_view::npos ? open : summary.find('}', open);
    if (close == std::string_view::npos) {
      out.append(summary.substr(i));
      break;
    }
    out.append(summary.substr(i, open - i));
    const std::string_view name = summary.substr(open + 1, close - open - 1);
    if (name == "job") {
      out += a.job;
    } else if (name == "node") {
      out += a.node.empty() ? "-" : a.node;
    } else if (name == "gpu") {
      out += a.gpu ? std::to_string(*a.gpu) : "-";
    } else if (name == "dev") {
      out += a.dev.empty() ? "-" : a.dev;
    } else if (name == "where") {
      out += where;
    } else if (name == "metric") {
      out += a.metric.empty() ? std::string(AnomalyKindName(a.kind)) : a.metric;
    } else if (name == "value") {
      out += Number(a.value);
    } else if (name == "score") {
      out += Number(a.score);
    } else if (name == "percent") {
      out += absl::StrFormat("%.0f %%", 100 * a.score);
    } else if (name == "baseline") {
      out += Number(a.baseline_mean);
      if (!std::isnan(a.baseline_sigma)) {
        absl::StrAppend(&out, " +- ", Number(a.baseline_sigma));
      }
    } else if (name == "detail") {
      out += a.detail.empty() ? std::string(AnomalyKindName(a.kind)) : a.detail;
    } else if (name == "tier") {
      out += std::to_string(a.tier);
    } else {
      out.append(summary.substr(open, close - open + 1));
    }
    i = close + 1;
  }
  return out;
}

}  // namespace vigil
