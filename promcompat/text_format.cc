#include "promcompat/text_format.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"

namespace vigil::promcompat {
namespace {

bool NameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool NameChar(char c) { return NameStart(c) || (c >= '0' && c <= '9'); }

std::optional<double> ParseValue(std::string_view text) {
  if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (text == "+Inf" || text == "Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// Parses one sample line into `out`; the reason when it does not parse.
std::string ParseLine(std::string_view line, TextSample* out) {
  size_t i = 0;
  if (i >= line.size() || !NameStart(line[i])) return "a metric name must start the line";
  while (i < line.size() && NameChar(line[i])) ++i;
  out->name.assign(line.substr(0, i));
  out->labels.clear();
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t start = i;
      if (i >= line.size() || !NameStart(line[i])) return "bad label name";
      while (i < line.size() && NameChar(line[i])) ++i;
      std::string name(line.substr(start, i - start));
      if (i >= line.size() || line[i] != '=') return absl::StrCat("label ", name, ": '=' expected");
      ++i;
      if (i >= line.size() || line[i] != '"')
        return absl::StrCat("label ", name, ": a quoted value expected");
      ++i;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value.push_back(c);
          continue;
        }
        if (i >= line.size()) break;
        const char e = line[i++];
        if (e == 'n') {
          value.push_back('\n');
        } else if (e == '\\' || e == '"') {
          value.push_back(e);
        } else {
          return absl::StrCat("label ", name, ": bad escape \\", std::string(1, e));
        }
      }
      if (!closed) return absl::StrCat("label ", name, ": unterminated value");
      out->labels.emplace_back(std::move(name), std::move(value));
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      return "',' or '}' expected after a label";
    }
  }
  if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) return "a value expected";
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  size_t end = i;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  std::optional<double> value = ParseValue(line.substr(i, end - i));
  if (!value)
    return absl::StrCat("bad value \"", std::string(line.substr(i, end - i)), "\"");
  out->value = *value;
  // An optional timestamp follows; it is not used.
  while (end < line.size() && (line[end] == ' ' || line[end] == '\t')) ++end;
  if (end < line.size()) {
    int64_t ts = 0;
    const std::string_view rest = line.substr(end);
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), ts);
    if (ec != std::errc() || p != rest.data() + rest.size()) return "bad timestamp";
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<TextSample>> ParseTextFormat(std::string_view page) {
  std::vector<TextSample> out;
  size_t line_no = 0;
  while (!page.empty()) {
    ++line_no;
    const size_t nl = page.find('\n');
    std::string_view line = page.substr(0, nl);
    page.remove_prefix(nl == std::string_view::npos ? page.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = 0;
    while (first < line.size() && (line[first] == ' ' || line[first] == '\t')) ++first;
    line.remove_prefix(first);
    if (line.empty() || line.front() == '#') continue;
    TextSample sample;
    if (std::string why = ParseLine(line, &sample); !why.empty())
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", why));
    out.push_back(std::move(sample));
  }
  return out;
}

}  // namespace vigil::promcompat
