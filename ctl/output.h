// Human-readable output of vigilctl: aligned tables that put severity
// first and show times as ages ("3m"), for reading at 3 a.m. (--json
// bypasses all of this and prints the server's JSON verbatim).
#ifndef VIGIL_CTL_OUTPUT_H_
#define VIGIL_CTL_OUTPUT_H_

#include <string>
#include <vector>

#include "ctl/command_line.h"
#include "nlohmann/json.hpp"

namespace vigil::ctl {

// Renders `body`, the 2xx answer to `invocation`, with times relative to
// `now` (Unix seconds). Never fails: missing or odd fields print as "-",
// and a command without a dedicated layout prints indented JSON.
std::string FormatResponse(const Invocation& invocation,
                           const nlohmann::json& body, double now);

// A span of `seconds` (>= 0), floored to its largest unit: "45s", "3m",
// "5h", "2d".
std::string FormatSpan(double seconds);

// `ts` relative to `now`: "3m ago", "in 2h", or "now" within a second.
std::string FormatRelative(double ts, double now);

// Rows under `header` (no header line when empty), each column as wide as
// its widest cell, two spaces apart; cells longer than `max_cell_chars`
// characters (0: no limit) are cut to end in "..."; every line ends in
// "\n".
std::string RenderTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        size_t max_cell_chars = 60);

}  // namespace vigil::ctl

#endif  // VIGIL_CTL_OUTPUT_H_
