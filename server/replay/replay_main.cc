// vigil-replay: runs recorded frames through the detector and rules with
// time taken from the frames, and writes one JSON line per incident raised
// (and per severity rise or reopening). See server/replay/replay.h for the formats.
//
//   vigil-replay --input FRAMES.jsonl|- --output INCIDENTS.jsonl|- [--rules FILE]
//
// Bad input lines go to stderr as "line N: reason" and are skipped; a
// summary follows at the end. Exit status: 0 done (bad lines included),
// 1 an input or output file cannot be read or written, 2 bad usage or a bad
// rules file (every error printed, nothing replayed).
//
// The flags are Abseil flags below, parsed by common/flags.h (--help,
// --version, exit 2 on a bad flag; docs/CLI.md).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "common/clock.h"
#include "common/flags.h"
#include "rules/rule.h"
#include "server/replay/replay.h"

ABSL_FLAG(std::string, input, "", "FRAMES.jsonl|-: recorded frames (-: stdin); required");
ABSL_FLAG(std::string, output, "", "INCIDENTS.jsonl|-: incidents, one JSON line each (-: stdout); "
          "required");
ABSL_FLAG(std::string, rules, "",
          "FILE: JSON rule document applied on top of the built-in catalogue (rules/rule.h)");

namespace {

vigil::flags::Program ReplayProgram() {
  return {
      .name = "vigil-replay",
      .synopsis = "vigil-replay --input FRAMES.jsonl|- --output INCIDENTS.jsonl|- [--rules FILE]",
      .about = "Runs recorded frames (vigil-sim's output) through the detector and rules with time\n"
               "taken from the frames, and writes one JSON line per incident raised (and per\n"
               "severity rise or reopening); server/replay/replay.h has the formats. Bad input\n"
               "lines go to stderr as \"line N: reason\" and are skipped; a summary follows.",
      .notes = "exit codes: 0 done (bad lines included); 1 an input or output file cannot be read\n"
               "or written; 2 bad usage or a bad rules file (every error printed, nothing\n"
               "replayed)",
      .flags_file = __FILE__,
  };
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "vigil-replay: %s (see --help)\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  vigil::flags::ParseOrExit(ReplayProgram(), argc, argv);
  const std::string input = absl::GetFlag(FLAGS_input);
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string rules_file = absl::GetFlag(FLAGS_rules);
  if (input.empty() || output.empty()) {
    return Usage("--input and --output are required");
  }

  vigil::ReplayOptions options;
  if (!rules_file.empty()) {
    std::ifstream file(rules_file);
    std::stringstream text;
    text << file.rdbuf();
    if (!file) {
      std::fprintf(stderr, "vigil-replay: cannot read %s\n", rules_file.c_str());
      return 2;
    }
    absl::StatusOr<vigil::RuleSet> rules = vigil::LoadRuleSet(text.str());
    if (!rules.ok()) {
      std::istringstream errors{std::string(rules.status().message())};
      for (std::string line; std::getline(errors, line);) {
        std::fprintf(stderr, "vigil-replay: %s: %s\n", rules_file.c_str(), line.c_str());
      }
      return 2;
    }
    options.rules = std::move(*rules);
  }

  // "-": standard input (vigil-sim ... --output - | vigil-replay --input -).
  std::FILE* in = input == "-" ? stdin : std::fopen(input.c_str(), "rb");
  if (in == nullptr) {
    std::fprintf(stderr, "vigil-replay: cannot open %s\n", input.c_str());
    return 1;
  }
  std::FILE* out = output == "-" ? stdout : std::fopen(output.c_str(), "wb");
  if (out == nullptr) {
    std::fprintf(stderr, "vigil-replay: cannot create %s\n", output.c_str());
    std::fclose(in);
    return 1;
  }
  const double started = vigil::RealClock()->Now();
  absl::StatusOr<vigil::ReplayStats> stats =
      vigil::ReplayStream(in, out, stderr, options);
  const double seconds = vigil::RealClock()->Now() - started;
  std::fclose(in);
  const bool close_failed = std::fclose(out) != 0;
  if (!stats.ok() || close_failed) {
    std::fprintf(stderr, "vigil-replay: %s\n",
                 stats.ok() ? "cannot write the output"
                            : std::string(stats.status().message()).c_str());
    return 1;
  }
  std::fprintf(
      stderr,
      "vigil-replay: %lld lines, %lld frames, %lld samples, %lld bad lines, "
      "%lld series; %lld incidents (%lld severity rises, %lld reopens); "
      "%.2f s, %.2f M samples/s\n",
      static_cast<long long>(stats->lines),
      static_cast<long long>(stats->frames),
      static_cast<long long>(stats->samples),
      static_cast<long long>(stats->bad_lines),
      static_cast<long long>(stats->series),
      static_cast<long long>(stats->incidents),
      static_cast<long long>(stats->severity_rises),
      static_cast<long long>(stats->reopens), seconds,
      seconds > 0 ? stats->samples / seconds / 1e6 : 0.0);
  return 0;
}
