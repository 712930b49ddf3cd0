#include "actuator/hostlist.h"

#include <charconv>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vigil::actuator {
namespace {

absl::Status Malformed(std::string_view hostlist, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "host list '", std::string(hostlist.substr(0, 200)), "': ", std::string(why)));
}

bool ParseNumber(std::string_view digits, uint64_t* value) {
  if (digits.empty() || digits.size() > 18) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), *value);
  return error == std::errc() && end == digits.data() + digits.size();
}

// The names of one bracket's range list, "1-3,07".
absl::StatusOr<std::vector<std::string>> ExpandRanges(std::string_view ranges,
                                                      std::string_view hostlist,
                                                      size_t budget) {
  std::vector<std::string> values;
  size_t start = 0;
  while (true) {
    size_t comma = ranges.find(',', start);
    std::string_view range = ranges.substr(start, comma - start);
    size_t dash = range.find('-');
    std::string_view low = range.substr(0, dash);
    std::string_view high = dash == std::string_view::npos ? low : range.substr(dash + 1);
    uint64_t from = 0;
    uint64_t to = 0;
    if (!ParseNumber(low, &from) || !ParseNumber(high, &to) || from > to) {
      return Malformed(hostlist, absl::StrCat("bad range '", std::string(range), "'"));
    }
    if (to - from >= budget - std::min(budget, values.size())) {
      return Malformed(hostlist, absl::StrCat("more than ", kMaxHostlistNames, " names"));
    }
    int width = static_cast<int>(low.size());
    for (uint64_t n = from; n <= to; ++n) {
      values.push_back(absl::StrFormat("%0*d", width, n));
    }
    if (comma == std::string_view::npos) return values;
    start = comma + 1;
  }
}

// Appends the names of one entry ("r[1-2]n[01-02]x") to `names`.
absl::Status ExpandEntry(std::string_view entry, std::string_view hostlist,
                         std::vector<std::string>& names) {
  if (entry.empty()) return Malformed(hostlist, "empty entry");
  std::vector<std::string> partial = {""};
  size_t at = 0;
  while (at < entry.size()) {
    size_t open = entry.find('[', at);
    std::string_view literal = entry.substr(at, open - at);
    if (literal.find(']') != std::string_view::npos) {
      return Malformed(hostlist, "']' without '['");
    }
    for (std::string& name : partial) name.append(literal);
    if (open == std::string_view::npos) break;
    size_t close = entry.find(']', open);
    if (close == std::string_view::npos) return Malformed(hostlist, "'[' without ']'");
    size_t budget = kMaxHostlistNames - names.size();
    absl::StatusOr<std::vector<std::string>> values =
        ExpandRanges(entry.substr(open + 1, close - open - 1), hostlist, budget);
    if (!values.ok()) return values.status();
    if (values->size() * partial.size() > budget) {
      return Malformed(hostlist, absl::StrCat("more than ", kMaxHostlistNames, " names"));
    }
    std::vector<std::string> next;
    next.reserve(values->size() * partial.size());
    for (const std::string& prefix : partial) {
      for (const std::string& value : *values) next.push_back(prefix + value);
    }
    partial = std::move(next);
    at = close + 1;
  }
  if (names.size() + partial.size() > kMaxHostlistNames) {
    return Malformed(hostlist, absl::StrCat("more than ", kMaxHostlistNames, " names"));
  }
  for (std::string& name : partial) names.push_back(std::move(name));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view hostlist) {
  std::vector<std::string> names;
  if (hostlist.empty()) return names;
  // Entries are separated by commas outside brackets.
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= hostlist.size(); ++i) {
    char c = i < hostlist.size() ? hostlist[i] : ',';
    if (c == '[') {
      if (++depth > 1) return Malformed(hostlist, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) return Malformed(hostlist, "']' without '['");
    } else if (c == ',' && depth == 0) {
      absl::Status s = ExpandEntry(hostlist.substr(start, i - start), hostlist, names);
      if (!s.ok()) return s;
      start = i + 1;
    } else if (absl::ascii_isspace(c) || absl::ascii_iscntrl(c)) {
      return Malformed(hostlist, "space or control character");
    }
  }
  if (depth != 0) return Malformed(hostlist, "'[' without ']'");
  return names;
}

}  // namespace vigil::actuator
