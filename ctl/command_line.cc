#include "ctl/command_line.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/flags.h"

namespace vigil::ctl {
namespace {

// A command flag. Every command flag takes a value.
struct FlagSpec {
  std::string name;        // without the dashes
  std::string value_name;  // shown in the usage: "--state S"
  std::string help;
  // Checks one value; nullptr accepts any non-empty value.
  absl::Status (*check)(const std::string& value) = nullptr;
  bool required = false;
  bool repeated = false;
};

// Fields left out of the table below keep these defaults.
struct CommandSpec {
  std::string name;           // "silence add"
  std::string synopsis = "";  // arguments and flags after the name
  std::string summary = "";
  // What each required positional argument is: "incident ID".
  std::vector<std::string> args = {};
  std::vector<FlagSpec> flags = {};
  // Rules across flags and arguments; nullptr: none.
  absl::Status (*check)(const Invocation& invocation) = nullptr;
  std::string example = "";
};

absl::Status CheckState(const std::string& value) {
  if (value == "firing" || value == "resolved" || value == "all") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad state \"", value, "\": want firing, resolved or all"));
}

absl::Status CheckSeverities(const std::string& value) {
  return ParseSeverityList(value).status();
}

absl::Status CheckLimit(const std::string& value) {
  int limit = 0;
  if (absl::SimpleAtoi(value, &limit) && limit > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("bad limit \"", value, "\": want a whole number above 0"));
}

absl::Status CheckMatcher(const std::string& value) {
  return ParseMatcher(value).status();
}

absl::Status CheckDuration(const std::string& value) {
  return ParseDurationMinutes(value).status();
}

absl::Status CheckTime(const std::string& value) {
  return ParseRfc3339(value).status();
}

absl::Status CheckSilenceWindow(const Invocation& invocation) {
  const bool duration = invocation.flags.count("duration") > 0;
  const bool until = invocation.flags.count("until") > 0;
  if (duration == until) {
    return absl::InvalidArgumentError(
        duration ? "give --duration or --until, not both"
                 : "missing --duration or --until: how long should the "
                   "silence last?");
  }
  if (until && invocation.flags.count("start") > 0 &&
      *ParseRfc3339(invocation.Flag("until")) <=
          *ParseRfc3339(invocation.Flag("start"))) {
    return absl::InvalidArgumentError("--until must come after --start");
  }
  return absl::OkStatus();
}

const char* const kActions[] = {"checkpoint_then_pause_job", "pause_job",
                                "cordon_node", "uncordon_node",
                                "diagnostic_report"};

absl::Status CheckActionRun(const Invocation& invocation) {
  const std::string& action = invocation.args[0];
  if (std::find(std::begin(kActions), std::end(kActions), action) ==
      std::end(kActions)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown action \"", action, "\": want one of ",
                     absl::StrJoin(kActions, ", ")));
  }
  if (absl::EndsWith(action, "_node") && invocation.flags.count("node") == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(action, " needs --node: which node?"));
  }
  return absl::OkStatus();
}

const FlagSpec kCommentFlag = {"comment", "TEXT",
                               "a note for the timeline and audit log"};
const FlagSpec kIncidentFilter = {"incident", "ID", "only this incident's"};
const FlagSpec kNameFlag = {"name", "NAME",
                            "user name for the config snippet (default NAME)"};
const FlagSpec kRoleFlag = {"role", "ROLE",
                            "role for the config snippet (default operator)"};

const std::vector<CommandSpec>& Commands() {
  static const auto* const kCommands = new std::vector<CommandSpec>{
      {.name = "incidents",
       .synopsis = "[--state firing|resolved|all] [--severity P0,P1] "
                   "[--job JOB] [--node NODE] [--limit N]",
       .summary = "List incidents, most severe first, then newest.",
       .flags = {{"state", "S", "firing, resolved or all", CheckState},
                 {"severity", "LIST", "only these severities, e.g. P0,P1",
                  CheckSeverities},
                 {"job", "JOB", "only incidents of this job"},
                 {"node", "NODE", "only incidents on this node"},
                 {"limit", "N", "at most N incidents", CheckLimit}},
       .example = "vigilctl incidents --severity P0,P1 --job llama-70b"},
      {.name = "incident",
       .synopsis = "ID",
       .summary = "Show one incident with its timeline and escalation.",
       .args = {"incident ID"}},
      {.name = "ack",
       .synopsis = "ID [--comment TEXT]",
       .summary = "Acknowledge an incident: re-paging stops.",
       .args = {"incident ID"},
       .flags = {kCommentFlag},
       .example = "vigilctl ack inc-42 --comment \"looking at node-17\""},
      {.name = "unack",
       .synopsis = "ID [--comment TEXT]",
       .summary = "Undo an acknowledgement: escalation starts again.",
       .args = {"incident ID"},
       .flags = {kCommentFlag}},
      {.name = "resolve",
       .synopsis = "ID [--comment TEXT]",
       .summary = "Close an incident (detection may reopen it).",
       .args = {"incident ID"},
       .flags = {kCommentFlag}},
      {.name = "silences", .summary = "List silences that have not ended."},
      {.name = "silence add",
       .synopsis = "--match NAME=VALUE [--match ...] (--duration D | "
                   "--until TIME) [--start TIME] --comment TEXT",
       .summary = "Stop paging for matching incidents for a while.\nA "
                  "future --start makes a maintenance window.",
       .flags = {{"match", "NAME=VALUE",
                  "NAME is job, node, gpu, kind or severity; a trailing * "
                  "makes VALUE a prefix; all matchers must match",
                  CheckMatcher, /*required=*/true, /*repeated=*/true},
                 {"duration", "D", "how long: 30m, 2h, 1d, 1h30m",
                  CheckDuration},
                 {"until", "TIME", "end, RFC 3339: 2026-11-30T09:00:00Z",
                  CheckTime},
                 {"start", "TIME", "start, RFC 3339 (default now)", CheckTime},
                 {"comment", "TEXT", "why (required)", nullptr,
                  /*required=*/true}},
       .check = CheckSilenceWindow,
       .example = "vigilctl silence add --match job=llama-70b "
                  "--match node=gpu-node-1* --duration 2h --comment \"NCCL "
                  "upgrade\""},
      {.name = "silence expire",
       .synopsis = "ID",
       .summary = "End a silence now.",
       .args = {"silence ID"}},
      {.name = "deliveries",
       .synopsis = "[--incident ID]",
       .summary = "List notification deliveries (pages, emails, webhooks).",
       .flags = {kIncidentFilter}},
      {.name = "actions",
       .synopsis = "[--incident ID]",
       .summary = "List remediation actions and their verdicts.",
       .flags = {kIncidentFilter}},
      {.name = "action run",
       .synopsis = "ACTION --job JOB [--node NODE] [--incident ID] "
                   "--reason TEXT",
       .summary = "Ask for a remediation action; the interlocks still "
                  "apply.\nACTION: checkpoint_then_pause_job, pause_job, "
                  "cordon_node, uncordon_node or diagnostic_report.",
       .args = {"ACTION"},
       .flags = {{"job", "JOB", "the job", nullptr, /*required=*/true},
                 {"node", "NODE", "the node (required for *_node actions)"},
                 {"incident", "ID", "the incident this is for"},
                 {"reason", "TEXT", "why (required)", nullptr,
                  /*required=*/true}},
       .check = CheckActionRun,
       .example = "vigilctl action run cordon_node --job llama-70b --node "
                  "gpu-node-17 --reason \"XID 79\""},
      {.name = "approve",
       .synopsis = "ACTION_ID",
       .summary = "Approve an action waiting for a human.",
       .args = {"action ID"}},
      {.name = "remediation",
       .summary = "Show the remediation circuit breaker and dry-run mode."},
      {.name = "remediation reset",
       .summary = "Close the tripped circuit breaker (admin)."},
      {.name = "reload",
       .summary = "Make the server read its config file again (admin)."},
      {.name = "audit",
       .synopsis = "[--limit N]",
       .summary = "Show the audit log, newest first.",
       .flags = {{"limit", "N", "at most N entries", CheckLimit}}},
      {.name = "oncall", .summary = "Who is on call now, per schedule."},
      {.name = "whoami", .summary = "The user and role of your token."},
      {.name = "hash-token",
       .synopsis = "TOKEN [--name NAME] [--role ROLE]",
       .summary = "Print TOKEN's SHA-256 and server config entry (local).",
       .args = {"TOKEN"},
       .flags = {kNameFlag, kRoleFlag}},
      {.name = "gen-token",
       .synopsis = "[--name NAME] [--role ROLE]",
       .summary = "Make a random token, with its config entry (local).",
       .flags = {kNameFlag, kRoleFlag},
       .example = "vigilctl gen-token --name alice --role operator"},
  };
  return *kCommands;
}

const CommandSpec* FindCommand(std::string_view name) {
  for (const CommandSpec& spec : Commands()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// Names of the subcommands of `group` ("silence" -> "add", "expire").
std::vector<std::string> Subcommands(std::string_view group) {
  std::vector<std::string> names;
  const std::string prefix = absl::StrCat(std::string(group), " ");
  for (const CommandSpec& spec : Commands()) {
    if (absl::StartsWith(spec.name, prefix)) {
      names.push_back(spec.name.substr(prefix.size()));
    }
  }
  return names;
}

// Whether some command has a flag called `name`.
bool IsCommandFlag(std::string_view name) {
  for (const CommandSpec& spec : Commands()) {
    for (const FlagSpec& flag : spec.flags) {
      if (flag.name == name) return true;
    }
  }
  return false;
}

absl::Status Usage(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// Resolves the command words at the front of `words` (removing them) into
// a command name.
absl::StatusOr<std::string> TakeCommand(std::vector<std::string>* words,
                                        bool help) {
  const std::string first = words->front();
  if (words->size() > 1) {
    std::string two = absl::StrCat(first, " ", (*words)[1]);
    if (FindCommand(two) != nullptr) {
      words->erase(words->begin(), words->begin() + 2);
      return two;
    }
  }
  const std::vector<std::string> subcommands = Subcommands(first);
  if (FindCommand(first) != nullptr || (help && !subcommands.empty())) {
    words->erase(words->begin());
    return first;
  }
  if (subcommands.empty()) {
    return Usage(absl::StrCat("unknown command \"", first, "\""));
  }
  const std::string choices = absl::StrJoin(subcommands, " or ");
  if (words->size() == 1) {
    return Usage(absl::StrCat(first, ": missing subcommand (", choices, ")"));
  }
  return Usage(absl::StrCat(first, ": unknown subcommand \"", (*words)[1],
                            "\" (", choices, ")"));
}

// Checks the flags and arguments of `invocation` against `spec`.
absl::Status CheckInvocation(const CommandSpec& spec,
                             const Invocation& invocation) {
  const std::string& command = spec.name;
  for (const auto& [name, values] : invocation.flags) {
    const FlagSpec* flag = nullptr;
    for (const FlagSpec& f : spec.flags) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return Usage(absl::StrCat(command, ": unknown flag --", name));
    }
    if (values.size() > 1 && !flag->repeated) {
      return Usage(absl::StrCat(command, ": --", name, " given twice"));
    }
    for (const std::string& value : values) {
      if (value.empty()) {
        return Usage(absl::StrCat(command, ": --", name, " is empty"));
      }
      if (flag->check == nullptr) continue;
      if (absl::Status s = flag->check(value); !s.ok()) {
        return Usage(absl::StrCat(command, ": --", name, ": ", s.message()));
      }
    }
  }
  for (const FlagSpec& flag : spec.flags) {
    if (flag.required && invocation.flags.count(flag.name) == 0) {
      return Usage(absl::StrCat(command, ": missing --", flag.name, " ",
                                flag.value_name));
    }
  }
  if (invocation.args.size() < spec.args.size()) {
    return Usage(
        absl::StrCat(command, ": missing ", spec.args[invocation.args.size()]));
  }
  if (invocation.args.size() > spec.args.size()) {
    return Usage(absl::StrCat(command, ": unexpected argument \"",
                              invocation.args[spec.args.size()], "\""));
  }
  for (const std::string& arg : invocation.args) {
    if (arg.empty()) return Usage(absl::StrCat(command, ": empty argument"));
  }
  if (spec.check != nullptr) {
    if (absl::Status s = spec.check(invocation); !s.ok()) {
      return Usage(absl::StrCat(command, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

// A flag's usage line: "  --state S        firing, resolved or all".
std::string FlagLine(std::string_view flag, std::string_view help) {
  std::string line = absl::StrCat("  ", std::string(flag));
  line.resize(std::max<size_t>(line.size() + 2, 24), ' ');
  return absl::StrCat(line, std::string(help), "\n");
}

std::string CommandUsage(const CommandSpec& spec) {
  std::string text = absl::StrCat("usage: vigilctl [global flags] ", spec.name);
  if (!spec.synopsis.empty()) {
    absl::StrAppend(&text, " ", spec.synopsis);
  }
  absl::StrAppend(&text, "\n\n", spec.summary, "\n");
  if (!spec.flags.empty()) absl::StrAppend(&text, "\nflags:\n");
  for (const FlagSpec& flag : spec.flags) {
    text += FlagLine(absl::StrCat("--", flag.name, " ", flag.value_name),
                     flag.help);
  }
  if (!spec.example.empty()) {
    absl::StrAppend(&text, "\nexample:\n  ", spec.example, "\n");
  }
  return text;
}

constexpr char kGlobalFlags[] =
    "global flags (anywhere on the line):\n"
    "  --server URL          vigil-server base URL (default $VIGIL_SERVER, "
    "else http://127.0.0.1:8080)\n"
    "  --token TOKEN         bearer token (default $VIGIL_TOKEN)\n"
    "  --token-file PATH     read the token from PATH when neither --token "
    "nor $VIGIL_TOKEN is set\n"
    "  --ca-cert PEM         CA certificates for an https:// server\n"
    "  --json                print the server's JSON as is\n"
    "  --help                usage; 'vigilctl COMMAND --help' for one "
    "command\n"
    "  --version             print the version and exit\n"
    "exit codes: 0 ok, 1 server or HTTP error, 2 usage error\n";

std::string Overview() {
  std::string text =
      "vigilctl: the operator CLI of vigil-server.\n\n"
      "usage: vigilctl [global flags] COMMAND [ARGS] [FLAGS]\n\ncommands:\n";
  for (const CommandSpec& spec : Commands()) {
    std::string name = spec.name;
    for (const std::string& arg : spec.args) {
      absl::StrAppend(&name, " ",
                      absl::AsciiStrToUpper(arg.substr(arg.rfind(' ') + 1)));
    }
    text += FlagLine(name, spec.summary.substr(0, spec.summary.find('\n')));
  }
  return absl::StrCat(text, "\n", kGlobalFlags);
}

}  // namespace

std::string Invocation::Flag(std::string_view name) const {
  auto it = flags.find(std::string(name));
  return it == flags.end() || it->second.empty() ? "" : it->second.front();
}

absl::StatusOr<Invocation> ParseCommandLine(
    const std::vector<std::string>& args, const Environment& env) {
  Invocation invocation;
  GlobalOptions& global = invocation.global;
  if (env.server && !env.server->empty()) global.server = *env.server;
  if (env.token && !env.token->empty()) global.token = *env.token;
  std::map<std::string, std::string*> global_values = {
      {"server", &global.server},
      {"token", &global.token},
      {"token-file", &global.token_file},
      {"ca-cert", &global.ca_cert_file}};
  // Every command flag takes a value; a name no command knows takes none,
  // so that the word after it stays a word and the error names the flag.
  absl::StatusOr<std::vector<flags::Token>> tokens =
      flags::Tokenize(args, [&](std::string_view name) {
        if (name == "json" || name == "help" || name == "version") {
          return flags::Arity::kSwitch;
        }
        if (global_values.count(std::string(name)) || IsCommandFlag(name)) {
          return flags::Arity::kValue;
        }
        return flags::Arity::kUnknown;
      });
  if (!tokens.ok()) return tokens.status();
  std::vector<std::string> words;
  std::string unknown_flag;  // the first flag no command knows
  for (flags::Token& token : *tokens) {
    if (!token.is_flag) {
      words.push_back(std::move(token.name));
      continue;
    }
    const std::string& name = token.name;
    if (name == "help" || name == "version") {
      (name == "help" ? invocation.help : invocation.version) = true;
      continue;
    }
    if (name == "json") {
      if (token.value) return Usage("--json takes no value");
      global.json = true;
      continue;
    }
    if (token.arity == flags::Arity::kUnknown && unknown_flag.empty()) {
      unknown_flag = name;
    }
    const std::string value = token.value.value_or("");
    if (auto it = global_values.find(name); it != global_values.end()) {
      if (value.empty()) return Usage(absl::StrCat("--", name, " is empty"));
      *it->second = value;
    } else {
      invocation.flags[name].push_back(value);
    }
  }
  if (!words.empty() && words.front() == "help") {
    invocation.help = true;
    words.erase(words.begin());
  }
  // --version needs nothing else (--help, below, wins over it).
  if (invocation.version && !invocation.help) return invocation;
  if (words.empty()) {
    if (invocation.help) return invocation;
    if (!unknown_flag.empty()) return Usage(absl::StrCat("unknown flag --", unknown_flag));
    return Usage("no command given");
  }
  auto command = TakeCommand(&words, invocation.help);
  if (!command.ok()) return command.status();
  invocation.command = *command;
  invocation.args = std::move(words);
  if (invocation.help) return invocation;
  if (absl::Status s =
          CheckInvocation(*FindCommand(invocation.command), invocation);
      !s.ok()) {
    return s;
  }
  return invocation;
}

std::string UsageText(std::string_view command) {
  if (command.empty()) return Overview();
  if (const CommandSpec* spec = FindCommand(command)) {
    return absl::StrCat(CommandUsage(*spec), "\n", kGlobalFlags);
  }
  std::string text;
  for (const std::string& sub : Subcommands(command)) {
    absl::StrAppend(&text, text.empty() ? "" : "\n",
                    CommandUsage(*FindCommand(
                        absl::StrCat(std::string(command), " ", sub))));
  }
  return absl::StrCat(text, "\n", kGlobalFlags);
}

absl::StatusOr<LabelMatcher> ParseMatcher(std::string_view text) {
  const auto bad = [text](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad matcher \"", std::string(text), "\": ", std::string(why)));
  };
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    return bad("want NAME=VALUE, e.g. job=llama-70b or node=gpu-node-1*");
  }
  LabelMatcher matcher{std::string(text.substr(0, eq)),
                       std::string(text.substr(eq + 1))};
  static const char* const kNames[] = {"job", "node", "gpu", "kind",
                                       "severity"};
  if (std::find(std::begin(kNames), std::end(kNames), matcher.name) ==
      std::end(kNames)) {
    return bad(absl::StrCat("unknown name \"", matcher.name,
                            "\": want job, node, gpu, kind or severity"));
  }
  if (matcher.value.empty()) return bad("empty value");
  if (matcher.value == "*") {
    return bad("\"*\" alone would match everything; give a value or prefix");
  }
  if (matcher.name == "severity") {
    matcher.value = absl::AsciiStrToUpper(matcher.value);
    if (matcher.value.size() != 2 || matcher.value[0] != 'P' ||
        matcher.value[1] < '0' || matcher.value[1] > '3') {
      return bad("severity is P0, P1, P2 or P3");
    }
  }
  return matcher;
}

absl::StatusOr<int64_t> ParseDurationMinutes(std::string_view text) {
  const auto bad = [text](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad duration \"", std::string(text), "\": ", std::string(why)));
  };
  constexpr int64_t kMaxMinutes = 3650 * 24 * 60;
  constexpr std::string_view kWant =
      "want a number and a unit m, h or d, like 30m, 2h, 1d or 1h30m";
  if (text.empty()) return bad(kWant);
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t digits_end =
        std::min(text.find_first_not_of("0123456789", i), text.size());
    if (digits_end == i || digits_end == text.size()) return bad(kWant);
    int64_t number = 0;
    if (!absl::SimpleAtoi(std::string(text.substr(i, digits_end - i)),
                          &number) ||
        number > kMaxMinutes) {
      return bad("longer than 3650d");
    }
    switch (text[digits_end]) {
      case 'm':
        break;
      case 'h':
        number *= 60;
        break;
      case 'd':
        number *= 24 * 60;
        break;
      default:
        return bad(kWant);
    }
    total += number;
    if (total > kMaxMinutes) return bad("longer than 3650d");
    i = digits_end + 1;
  }
  if (total == 0) return bad("must be longer than 0");
  return total;
}

absl::StatusOr<double> ParseRfc3339(std::string_view text) {
  absl::Time time;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &time, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad time \"", std::string(text),
                     "\": want RFC 3339 like 2026-11-30T09:00:00Z or "
                     "2026-11-30T10:00:00+01:00 (",
                     error, ")"));
  }
  return absl::ToDoubleSeconds(time - absl::UnixEpoch());
}

absl::StatusOr<std::string> ParseSeverityList(std::string_view text) {
  std::vector<std::string> severities;
  for (absl::string_view part : absl::StrSplit(std::string(text), ',')) {
    std::string severity = absl::AsciiStrToUpper(part);
    if (severity.size() != 2 || severity[0] != 'P' || severity[1] < '0' ||
        severity[1] > '3') {
      return absl::InvalidArgumentError(
          absl::StrCat("bad severity \"", std::string(part),
                       "\": want P0, P1, P2 or P3, comma-separated"));
    }
    severities.push_back(std::move(severity));
  }
  return absl::StrJoin(severities, ",");
}

}  // namespace vigil::ctl
