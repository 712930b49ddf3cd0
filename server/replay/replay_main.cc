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
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "common/clock.h"
#include "rules/rule.h"
#include "server/replay/replay.h"

namespace {

constexpr char kUsage[] =
    "usage: vigil-replay --input FRAMES.jsonl --output INCIDENTS.jsonl "
    "[--rules FILE]\n";

int Usage(const std::string& message) {
  std::fprintf(stderr, "vigil-replay: %s\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {
      {"input", ""}, {"output", ""}, {"rules", ""}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg.rfind("--", 0) != 0) return Usage("unexpected argument " + arg);
    std::string name = arg.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= argc) return Usage("--" + name + " needs a value");
      value = argv[++i];
    }
    if (flags.find(name) == flags.end()) return Usage("unknown flag --" + name);
    flags[name] = value;
  }
  if (flags["input"].empty() || flags["output"].empty()) {
    return Usage("--input and --output are required");
  }

  vigil::ReplayOptions options;
  if (!flags["rules"].empty()) {
    std::ifstream file(flags["rules"]);
    std::stringstream text;
    text << file.rdbuf();
    if (!file) {
      std::fprintf(stderr, "vigil-replay: cannot read %s\n",
                   flags["rules"].c_str());
      return 2;
    }
    absl::StatusOr<vigil::RuleSet> rules = vigil::LoadRuleSet(text.str());
    if (!rules.ok()) {
      std::istringstream errors{std::string(rules.status().message())};
      for (std::string line; std::getline(errors, line);) {
        std::fprintf(stderr, "vigil-replay: %s: %s\n", flags["rules"].c_str(),
                     line.c_str());
      }
      return 2;
    }
    options.rules = std::move(*rules);
  }

  // "-": standard input (vigil-sim ... --output - | vigil-replay --input -).
  std::FILE* in = flags["input"] == "-" ? stdin
                                        : std::fopen(flags["input"].c_str(), "rb");
  if (in == nullptr) {
    std::fprintf(stderr, "vigil-replay: cannot open %s\n",
                 flags["input"].c_str());
    return 1;
  }
  std::FILE* out = flags["output"] == "-"
                       ? stdout
                       : std::fopen(flags["output"].c_str(), "wb");
  if (out == nullptr) {
    std::fprintf(stderr, "vigil-replay: cannot create %s\n",
                 flags["output"].c_str());
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
