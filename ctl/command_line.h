// vigilctl's command line: global flags, commands, their flags and
// arguments, checked before anything is sent, plus the usage texts.
//
//   vigilctl [--server URL] [--token T | --token-file PATH] [--ca-cert PEM]
//            [--json] COMMAND [ARGS] [FLAGS]
//
// Global flags may appear anywhere; "--flag value" and "--flag=value" both
// work; "--" ends the flags (the line is split by common/flags.h's Tokenize,
// as every Vigil binary's is). Every error message names the flag, argument
// or command at fault.
#ifndef VIGIL_CTL_COMMAND_LINE_H_
#define VIGIL_CTL_COMMAND_LINE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vigil::ctl {

// What vigilctl takes from its environment; main() fills it from getenv.
struct Environment {
  std::optional<std::string> server = std::nullopt;  // $VIGIL_SERVER
  std::optional<std::string> token = std::nullopt;   // $VIGIL_TOKEN
};

// Connection and output settings shared by every command.
struct GlobalOptions {
  // Base URL: --server, else $VIGIL_SERVER, else this default.
  std::string server = "http://127.0.0.1:8080";
  // Bearer token: --token, else $VIGIL_TOKEN. Empty: neither was given.
  std::string token;
  // --token-file: read only when `token` is empty. Empty: none given.
  std::string token_file;
  // --ca-cert: PEM file of CAs for an https:// server. Empty: the system's.
  std::string ca_cert_file;
  // --json: print the server's JSON verbatim instead of tables.
  bool json = false;
  // Connect and read timeout. Default 10 s (not a flag).
  double timeout_seconds = 10;
};

// One parsed command line.
struct Invocation {
  GlobalOptions global;
  // Canonical command: "incidents", "silence add", "remediation reset",
  // "hash-token", ...; "" with `help` set for the overview.
  std::string command;
  // Positional arguments after the command words (IDs, ACTION, TOKEN).
  std::vector<std::string> args;
  // Command flags by name (no dashes); repeatable flags keep every value
  // in the order given.
  std::map<std::string, std::vector<std::string>> flags;
  // --help, -h or "help": print the usage of `command` and run nothing.
  bool help = false;
  // --version: print "vigilctl <version>" and run nothing (unless `help`).
  bool version = false;

  // The single value of command flag `name`, or "" when not given.
  std::string Flag(std::string_view name) const;
};

// Parses `args` (argv without the program name). kInvalidArgument, with a
// message naming the culprit, for an unknown command or flag, a missing or
// extra argument, a flag without its value, a repeated flag, or a value
// that does not parse (duration, matcher, time, limit, ...). With --help
// only the command itself must be known; with --version nothing is checked
// but the flags' spelling.
absl::StatusOr<Invocation> ParseCommandLine(
    const std::vector<std::string>& args, const Environment& env);

// Usage of `command` (a command, or "silence" for its subcommands) with
// its flags; "" gives the overview of every command and the global flags.
std::string UsageText(std::string_view command);

// A silence matcher: `value` is exact, or a prefix when it ends in '*'.
struct LabelMatcher {
  std::string name;
  std::string value;
};

// Parses "name=value". kInvalidArgument unless name is job, node, gpu,
// kind or severity and value is non-empty and not just "*"; severity
// values must be P0..P3 (returned upper-case).
absl::StatusOr<LabelMatcher> ParseMatcher(std::string_view text);

// Parses a duration such as "30m", "2h", "1d" or "1h30m" into whole
// minutes. kInvalidArgument for anything else, for zero and for more than
// 3650 days.
absl::StatusOr<int64_t> ParseDurationMinutes(std::string_view text);

// Parses an RFC 3339 time ("2026-11-30T09:00:00Z", offsets allowed) into
// Unix seconds. kInvalidArgument when it does not parse.
absl::StatusOr<double> ParseRfc3339(std::string_view text);

// Parses a comma-separated severity list ("p0,P1") into its canonical
// form ("P0,P1"). kInvalidArgument for anything but P0..P3.
absl::StatusOr<std::string> ParseSeverityList(std::string_view text);

}  // namespace vigil::ctl

#endif  // VIGIL_CTL_COMMAND_LINE_H_
