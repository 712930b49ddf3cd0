// Command lines of every Vigil binary: Abseil flags behind a thin wrapper
// that keeps the project's conventions (docs/CLI.md).
//
// A binary defines its flags with ABSL_FLAG in its main.cc, with
// underscores in the C++ name and dashes on the command line
// (ABSL_FLAG(std::string, data_dir, ...) is --data-dir), and calls
// ParseOrExit with a Program describing itself:
//
//   --name value, --name=value  a flag with a value (the next argument is
//                               taken as the value, whatever it looks like)
//   --name                      a switch (a bool flag); it takes no value,
//                               so --name=yes is an error
//   --help, -h                  usage on stdout, exit 0
//   --version                   "<program> <version>" on stdout, exit 0
//   --                          ends the flags
// A flag given twice keeps its last value. Anything wrong (an unknown flag,
// a missing value, a value the flag's type does not parse, a stray
// argument) prints "<program>: <what, naming the flag> (see --help)" on
// stderr and exits 2 (kExitUsage).
//
// Why not absl::ParseCommandLine: Debian 12's Abseil (20220623) has no
// ParseAbseilFlagsOnly, and ParseCommandLine (and flags_internal's
// ParseCommandLineImpl under it) prints its own "ERROR: ..." lines and
// exits with status 1 on a bad flag, where Vigil's binaries document 2
// (systemd does not restart on 2). It also knows nothing of dashed names.
// So the wrapper walks argv itself and hands every value to Abseil through
// the public absl::CommandLineFlag::ParseFrom: Abseil still owns the types,
// parsing, defaults, help texts and the registry.
//
// vigilctl's flags belong to its subcommands (and --match repeats), which
// process-wide Abseil flags cannot express: it keeps its command table
// (ctl/command_line.cc) but splits its command line with Tokenize below,
// and shares the exit codes and VersionText.
#ifndef VIGIL_COMMON_FLAGS_H_
#define VIGIL_COMMON_FLAGS_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::flags {

// Exit codes shared by the binaries: 0 done (and --help, --version); 2 the
// command line (or for most binaries the configuration) is wrong. Other
// failures keep each binary's own codes (1 for most).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;

// The project's version, CMake's project(vigil VERSION ...): "0.1.0".
std::string_view Version();

// What --version prints: "vigil-server 0.1.0\n".
std::string VersionText(std::string_view program);

// ---------------------------------------------------------------------------
// Splitting a command line (used by Parse, and by vigilctl directly).

// How the flag of a given name takes its value.
enum class Arity {
  kSwitch,         // none; a "--name=value" is passed on for the caller to refuse
  kValue,          // "--name=value" or "--name value"
  kOptionalValue,  // only as "--name=value"; bare "--name" has no value
  kUnknown,        // not a flag: kept (with a value only if given with '=')
};

// One argument (or flag and its value) of a command line.
struct Token {
  bool is_flag = false;
  // A flag's name without the dashes ("data-dir"; "help" for -h), or a word.
  std::string name = "";
  // The flag's value, if it has one.
  std::optional<std::string> value = std::nullopt;
  Arity arity = Arity::kUnknown;
};

// Splits `args` (argv without the program name) into flags and words.
// `arity` says how each flag name takes its value. "--" ends the flags
// (everything after it is a word); "-" alone is a word; "-h" is --help.
// kInvalidArgument naming the flag for "--name" of kValue at the end of
// the line ("--name needs a value") and for any other "-x" ("unknown flag
// \"-x\" (flags are spelt --name)").
absl::StatusOr<std::vector<Token>> Tokenize(
    const std::vector<std::string>& args,
    const std::function<Arity(std::string_view name)>& arity);

// ---------------------------------------------------------------------------
// A binary's command line over its Abseil flags.

struct Program {
  // "vigil-server": the prefix of every message and the --version line.
  std::string name = "";
  // The usage line(s) after "usage: ", e.g. "vigil-replay --input FILE
  // --output FILE [--rules FILE]".
  std::string synopsis = "";
  // What the program does, printed after the usage line.
  std::string about = "";
  // Printed after the flags (exit codes, formats, lists); may be empty.
  std::string notes = "";
  // The flags of the program are the Abseil flags defined in this file:
  // pass __FILE__ from the main.cc that defines them. Flags linked in from
  // elsewhere (Abseil's own --flagfile, ...) are not accepted.
  std::string flags_file = "";
  // Titled groups of flags for --help, in order, e.g.
  // {"simulated node", {"simulate", "job", "gpus"}}. Flags in no group are
  // listed first, under "flags:". Within a group, the order given.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups = {};
  // Flags that may also be given bare and then take this value:
  // {"simulate", "healthy"} makes "--simulate" mean "--simulate=healthy".
  // Such a flag takes a value only as "--name=value".
  std::map<std::string, std::string> implicit_values = {};
};

// What a successful parse asks for.
struct Parsed {
  enum class Action { kRun, kHelp, kVersion };
  Action action = Action::kRun;
  // The flags set on the command line (dashed names), so that a flag can
  // override a config file only when given.
  std::set<std::string> given = {};

  bool Given(std::string_view name) const { return given.count(std::string(name)) > 0; }
};

// Parses `args` (argv without the program name) into the program's Abseil
// flags. kInvalidArgument, naming the flag or argument, for anything wrong;
// flags keep the values they were given before the error. --help and
// --version win over unknown flags, bad values and stray arguments
// elsewhere on the line (and set no flag).
absl::StatusOr<Parsed> Parse(const Program& program, const std::vector<std::string>& args);

// --help's text, from the registered flags: the usage line, `about`, one
// line per flag ("  --data-dir DIR   help text (default: X)") and `notes`.
// A flag's help text may start with the name of its value and ": "
// ("DIR: where the store lives"), shown after the flag; without one the
// value is shown as N (numbers) or VALUE. Switches show no value and no
// default; other flags show a non-empty default.
std::string UsageText(const Program& program);

// For main(): Parse, then print usage or the version on stdout and exit 0,
// or print "<program>: <error> (see --help)" on stderr and exit 2.
// Returns only when the program should run.
Parsed ParseOrExit(const Program& program, int argc, char** argv);

}  // namespace vigil::flags

#endif  // VIGIL_COMMON_FLAGS_H_
