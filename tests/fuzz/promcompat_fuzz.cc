// Fuzzes the Prometheus text exposition parser (promcompat/text_format.h)
// and the metric mapping behind it (promcompat/metric_mapping.h): a
// /metrics page as any exporter an agent scrapes - or anyone who can serve
// on its port - could send it, and every sample of what parses mapped with
// the default mapping. Nothing may crash, leak, throw or trip ASan/UBSan.
//
// Input: the page, whole.
//
// Properties, each from the headers' contracts:
//  - parsing is pure: the same page parses the same way twice;
//  - a refusal is kInvalidArgument naming a line of the page ("line N: ");
//  - a parsed sample has a metric name and named labels, and printing the
//    samples back in the format (`name{l="v",...} value`, values as NaN,
//    +Inf, -Inf or the shortest round-trip decimal) parses to the same
//    samples: labels' escapes and values are read as written;
//  - mapping is pure and returns one of its outcomes; a mapped series has
//    a valid key (sorted, room for the node and job labels) without a node
//    or job label, a valid non-empty node and a valid or empty job, and a
//    finite non-zero scale; a bad series says why;
//  - a rule's changes counter (DCGM's last XID) starts at 0 and only ever
//    goes up by at most one per reading.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/series_key.h"
#include "promcompat/metric_mapping.h"
#include "promcompat/text_format.h"

namespace {

using vigil::promcompat::MappedSeries;
using vigil::promcompat::MetricMapper;
using vigil::promcompat::TextSample;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "promcompat_fuzz: %s: %s\n", what, detail.c_str());
  __builtin_trap();
}

bool SameValue(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

bool SameSamples(const std::vector<TextSample>& a, const std::vector<TextSample>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].labels != b[i].labels ||
        !SameValue(a[i].value, b[i].value))
      return false;
  }
  return true;
}

// The samples in the exposition format, one line each.
std::string Print(const std::vector<TextSample>& samples) {
  std::string out;
  for (const TextSample& s : samples) {
    out.append(s.name);
    if (!s.labels.empty()) {
      out.push_back('{');
      for (size_t i = 0; i < s.labels.size(); ++i) {
        if (i > 0) out.push_back(',');
        out.append(s.labels[i].first).append("=\"");
        for (const char c : s.labels[i].second) {
          if (c == '\\' || c == '"') {
            out.push_back('\\');
            out.push_back(c);
          } else if (c == '\n') {
            out.append("\\n");
          } else {
            out.push_back(c);
          }
        }
        out.push_back('"');
      }
      out.push_back('}');
    }
    out.push_back(' ');
    if (std::isnan(s.value)) {
      out.append("NaN");
    } else if (std::isinf(s.value)) {
      out.append(s.value > 0 ? "+Inf" : "-Inf");
    } else {
      char buf[64];
      const auto result = std::to_chars(buf, buf + sizeof buf, s.value);
      out.append(buf, result.ptr);
    }
    out.push_back('\n');
  }
  return out;
}

bool SameMapped(const MappedSeries& a, const MappedSeries& b) {
  return a.key == b.key && a.node == b.node && a.job == b.job && a.scale == b.scale &&
         a.changes_counter == b.changes_counter;
}

void CheckMapped(const TextSample& sample, const MappedSeries& m) {
  vigil::SeriesKey key = m.key;
  if (!vigil::NormalizeSeriesKey(&key).ok() || !(key == m.key))
    Fail("mapped key is not a valid, sorted series key", m.key.ToString());
  if (m.key.labels.size() + 2 > vigil::kMaxLabels)
    Fail("mapped key leaves no room for node and job", m.key.ToString());
  if (!m.key.LabelValue("node").empty() || !m.key.LabelValue("job").empty())
    Fail("mapped key carries a node or job label", m.key.ToString());
  if (m.node.empty() || !vigil::ValidateLabelValue("node", m.node).ok())
    Fail("mapped node is empty or invalid", sample.name + " node=" + m.node);
  if (!m.job.empty() && !vigil::ValidateLabelValue("job", m.job).ok())
    Fail("mapped job is invalid", sample.name + " job=" + m.job);
  if (!std::isfinite(m.scale) || m.scale == 0)
    Fail("mapped scale is not a finite non-zero number", sample.name);
  if (!m.changes_counter.empty() && !vigil::ValidateMetricName(m.changes_counter).ok())
    Fail("changes counter name is invalid", std::string(m.changes_counter));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const MetricMapper* mapper = [] {
    absl::StatusOr<std::unique_ptr<MetricMapper>> m =
        MetricMapper::Create(vigil::promcompat::MappingOptions());
    if (!m.ok()) __builtin_trap();
    return m->release();  // lives for the process
  }();
  const std::string_view page(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<std::vector<TextSample>> parsed = vigil::promcompat::ParseTextFormat(page);
  absl::StatusOr<std::vector<TextSample>> again = vigil::promcompat::ParseTextFormat(page);
  if (parsed.ok() != again.ok() || parsed.status() != again.status() ||
      (parsed.ok() && !SameSamples(*parsed, *again)))
    Fail("parsing the same page twice differs", parsed.status().ToString());
  if (!parsed.ok()) {
    if (!absl::IsInvalidArgument(parsed.status()))
      Fail("refusal is not kInvalidArgument", parsed.status().ToString());
    // "line N: why", N a line of the page.
    const std::string message(parsed.status().message());
    const size_t lines = static_cast<size_t>(std::count(page.begin(), page.end(), '\n')) + 1;
    size_t line = 0;
    const char* const message_end = message.data() + message.size();
    std::from_chars_result read{message.data(), std::errc::invalid_argument};
    if (message.starts_with("line "))
      read = std::from_chars(message.data() + 5, message_end, line);
    if (read.ec != std::errc() || line < 1 || line > lines ||
        !std::string_view(read.ptr, message_end - read.ptr).starts_with(": "))
      Fail("refusal does not name a line of the page", message);
    return 0;
  }

  for (const TextSample& s : *parsed) {
    if (s.name.empty()) Fail("sample without a metric name", "");
    for (const auto& label : s.labels)
      if (label.first.empty()) Fail("label without a name", s.name);
  }
  const std::string printed = Print(*parsed);
  absl::StatusOr<std::vector<TextSample>> reparsed =
      vigil::promcompat::ParseTextFormat(printed);
  if (!reparsed.ok()) Fail("printed samples do not parse", reparsed.status().ToString());
  if (!SameSamples(*parsed, *reparsed)) Fail("printed samples parse differently", printed);

  vigil::promcompat::ChangeCounter changes;
  std::map<std::string, double> counts;  // the counter's last count, by series
  std::vector<std::pair<std::string_view, std::string_view>> labels;
  MappedSeries mapped, mapped_again;
  std::string why, why_again;
  for (const TextSample& s : *parsed) {
    labels.clear();
    for (const auto& label : s.labels) labels.emplace_back(label.first, label.second);
    why.clear();
    why_again.clear();
    const MetricMapper::Outcome outcome = mapper->Map(s.name, labels, &mapped, &why);
    const MetricMapper::Outcome outcome_again =
        mapper->Map(s.name, labels, &mapped_again, &why_again);
    if (outcome != outcome_again || why != why_again)
      Fail("mapping the same series twice differs", s.name);
    switch (outcome) {
      case MetricMapper::Outcome::kMapped: {
        if (!SameMapped(mapped, mapped_again))
          Fail("mapping the same series twice differs", s.name);
        CheckMapped(s, mapped);
        if (mapped.changes_counter.empty()) break;
        vigil::SeriesKey counter{std::string(mapped.changes_counter), mapped.key.labels};
        const std::string encoded = vigil::EncodeSeriesKey(counter) + '\0' + mapped.node;
        const double count = changes.Observe(encoded, s.value * mapped.scale);
        auto [it, first] = counts.try_emplace(encoded, count);
        if (first ? count != 0 : (count != it->second && count != it->second + 1))
          Fail("changes counter moved by more than one, or down", s.name);
        it->second = count;
        // The same reading again is no change.
        if (changes.Observe(encoded, s.value * mapped.scale) != count)
          Fail("changes counter counted a repeated reading", s.name);
        break;
      }
      case MetricMapper::Outcome::kBadSeries:
        if (why.empty()) Fail("a bad series does not say why", s.name);
        break;
      case MetricMapper::Outcome::kUnmapped:
      case MetricMapper::Outcome::kNoNode:
        break;
      default:
        Fail("mapping returned no outcome", s.name);
    }
  }
  return 0;
}
