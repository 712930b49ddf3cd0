#include "common/series_key.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vigil {
namespace {

bool IsNameStart(char c, bool colon_ok) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         (colon_ok && c == ':');
}
bool IsNameChar(char c, bool colon_ok) {
  return IsNameStart(c, colon_ok) || (c >= '0' && c <= '9');
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t extra;
    if (c < 0x80) {
      extra = 0;
    } else if ((c >> 5) == 0x6) {
      extra = 1;
    } else if ((c >> 4) == 0xE) {
      extra = 2;
    } else if ((c >> 3) == 0x1E) {
      extra = 3;
    } else {
      return false;
    }
    if (i + extra >= s.size() + (extra == 0)) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += extra + 1;
  }
  return true;
}

void AppendLengthPrefixed(std::string* out, std::string_view s) {
  size_t n = s.size();
  while (n >= 0x80) {
    out->push_back(static_cast<char>(n | 0x80));
    n >>= 7;
  }
  out->push_back(static_cast<char>(n));
  out->append(s);
}

bool ReadLengthPrefixed(std::string_view* in, std::string* out) {
  size_t n = 0;
  int shift = 0;
  while (true) {
    if (in->empty() || shift > 28) return false;
    unsigned char b = (*in)[0];
    in->remove_prefix(1);
    n |= static_cast<size_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
    shift += 7;
  }
  if (in->size() < n) return false;
  out->assign(in->data(), n);
  in->remove_prefix(n);
  return true;
}

}  // namespace

std::string_view SeriesKey::LabelValue(std::string_view name) const {
  for (const auto& [n, v] : labels) {
    if (n == name) return v;
  }
  return {};
}

std::string SeriesKey::ToString() const {
  std::string out = metric;
  out.push_back('{');
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out.push_back(',');
    absl::StrAppend(&out, labels[i].first, "=\"");
    for (char c : labels[i].second) {
      if (c == '\\' || c == '"') out.push_back('\\');
      if (c == '\n') {
        out.append("\\n");
        continue;
      }
      out.push_back(c);
    }
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

absl::Status ValidateMetricName(std::string_view metric) {
  if (metric.empty()) return absl::InvalidArgumentError("empty metric name");
  if (metric.size() > kMaxMetricNameLength)
    return absl::InvalidArgumentError(
        absl::StrCat("metric name longer than ", kMaxMetricNameLength));
  if (!IsNameStart(metric[0], true))
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", std::string(metric), "' must start with [a-zA-Z_:]"));
  for (char c : metric) {
    if (!IsNameChar(c, true))
      return absl::InvalidArgumentError(absl::StrCat(
          "metric name '", std::string(metric), "' may only hold [a-zA-Z0-9_:]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("empty label name");
  if (name.size() > kMaxMetricNameLength)
    return absl::InvalidArgumentError("label name too long");
  if (!IsNameStart(name[0], false))
    return absl::InvalidArgumentError(
        absl::StrCat("label name '", std::string(name), "' must start with [a-zA-Z_]"));
  if (name.substr(0, 2) == "__")
    return absl::InvalidArgumentError(
        absl::StrCat("label name '", std::string(name), "' is reserved (starts with __)"));
  for (char c : name) {
    if (!IsNameChar(c, false))
      return absl::InvalidArgumentError(absl::StrCat(
          "label name '", std::string(name), "' may only hold [a-zA-Z0-9_]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelValue(std::string_view name, std::string_view value) {
  SeriesKey key{"m", {{std::string(name), std::string(value)}}};
  return NormalizeSeriesKey(&key);
}

absl::Status NormalizeSeriesKey(SeriesKey* key) {
  if (auto s = ValidateMetricName(key->metric); !s.ok()) return s;
  if (key->labels.size() > kMaxLabels)
    return absl::InvalidArgumentError(
        absl::StrCat("series has ", key->labels.size(), " labels, at most ",
                     kMaxLabels, " allowed"));
  std::sort(key->labels.begin(), key->labels.end());
  for (size_t i = 0; i < key->labels.size(); ++i) {
    const auto& [name, value] = key->labels[i];
    if (auto s = ValidateLabelName(name); !s.ok()) return s;
    if (i > 0 && key->labels[i - 1].first == name)
      return absl::InvalidArgumentError(
          absl::StrCat("label '", std::string(name), "' given twice"));
    if (value.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("label '", std::string(name), "' has an empty value"));
    if (value.size() > kMaxLabelValueLength)
      return absl::InvalidArgumentError(absl::StrCat(
          "label '", std::string(name), "' value longer than ", kMaxLabelValueLength));
    if (!IsValidUtf8(value))
      return absl::InvalidArgumentError(
          absl::StrCat("label '", std::string(name), "' value is not valid UTF-8"));
  }
  return absl::OkStatus();
}

std::string EncodeSeriesKey(const SeriesKey& key) {
  std::string out;
  AppendLengthPrefixed(&out, key.metric);
  for (const auto& [name, value] : key.labels) {
    AppendLengthPrefixed(&out, name);
    AppendLengthPrefixed(&out, value);
  }
  return out;
}

absl::StatusOr<SeriesKey> DecodeSeriesKey(std::string_view bytes) {
  SeriesKey key;
  if (!ReadLengthPrefixed(&bytes, &key.metric))
    return absl::DataLossError("corrupt series key: metric");
  while (!bytes.empty()) {
    vigil::Label label;
    if (!ReadLengthPrefixed(&bytes, &label.first) ||
        !ReadLengthPrefixed(&bytes, &label.second))
      return absl::DataLossError("corrupt series key: label");
    key.labels.push_back(std::move(label));
  }
  return key;
}

}  // namespace vigil
