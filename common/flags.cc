#include "common/flags.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#ifndef VIGIL_VERSION
#error "VIGIL_VERSION comes from CMake's project(vigil VERSION ...) (common/CMakeLists.txt)"
#endif

namespace vigil::flags {
namespace {

// Abseil's names use underscores (C++ identifiers); the command line dashes.
std::string Dashed(absl::string_view name) {
  std::string dashed(name.data(), name.size());
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  return dashed;
}

// A file name as Abseil reports it (its default normalize_filename drops
// leading slashes), so that a flag's Filename() and __FILE__ compare.
std::string_view WithoutLeadingSlashes(std::string_view path) {
  size_t start = path.find_first_not_of("/\\");
  return start == std::string_view::npos ? std::string_view() : path.substr(start);
}

// The flags `program` defines (those of its flags_file), by dashed name.
std::map<std::string, absl::CommandLineFlag*> ProgramFlags(const Program& program) {
  std::map<std::string, absl::CommandLineFlag*> flags;
  const std::string_view file = WithoutLeadingSlashes(program.flags_file);
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string defined_in = flag->Filename();
    if (WithoutLeadingSlashes(defined_in) != file) continue;
    flags[Dashed(name)] = flag;
  }
  return flags;
}

enum class ValueKind { kSwitch, kInteger, kCount, kNumber, kOther };

template <typename T>
bool IsOfTypeOrOptional(const absl::CommandLineFlag& flag) {
  return flag.IsOfType<T>() || flag.IsOfType<std::optional<T>>();
}

ValueKind KindOf(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return ValueKind::kSwitch;
  if (IsOfTypeOrOptional<int>(flag) || IsOfTypeOrOptional<int64_t>(flag)) {
    return ValueKind::kInteger;
  }
  if (IsOfTypeOrOptional<unsigned>(flag) || IsOfTypeOrOptional<uint64_t>(flag)) {
    return ValueKind::kCount;
  }
  if (IsOfTypeOrOptional<double>(flag) || IsOfTypeOrOptional<float>(flag)) {
    return ValueKind::kNumber;
  }
  return ValueKind::kOther;
}

// "--nodes: bad value 'four' (want a whole number)".
std::string BadValue(const std::string& name, const std::string& value,
                     const absl::CommandLineFlag& flag, const std::string& absl_error) {
  std::string want;
  switch (KindOf(flag)) {
    case ValueKind::kInteger:
      want = "a whole number";
      break;
    case ValueKind::kCount:
      want = "a whole number >= 0";
      break;
    case ValueKind::kNumber:
      want = "a number";
      break;
    default:
      return absl::StrCat("--", name, ": bad value '", value, "' (", absl_error, ")");
  }
  return absl::StrCat("--", name, ": bad value '", value, "' (want ", want, ")");
}

// A help text's leading value name: "DIR: where ..." -> {"DIR", "where ..."}.
// The name has no blanks and starts with two capitals (or is one capital).
std::pair<std::string, std::string> SplitValueName(const std::string& help) {
  const size_t colon = help.find(": ");
  if (colon != std::string::npos && colon > 0) {
    const std::string head = help.substr(0, colon);
    const bool capitals =
        std::isupper(static_cast<unsigned char>(head[0])) &&
        (head.size() == 1 || !std::islower(static_cast<unsigned char>(head[1])));
    if (capitals && head.find_first_of(" \t\n") == std::string::npos) {
      return {head, help.substr(colon + 2)};
    }
  }
  return {"", help};
}

// "  --data-dir DIR" and the text after it, for one flag.
std::pair<std::string, std::string> FlagLine(const std::string& name,
                                             const absl::CommandLineFlag& flag,
                                             const Program& program) {
  auto [value_name, help] = SplitValueName(flag.Help());
  const ValueKind kind = KindOf(flag);
  std::string left = absl::StrCat("  --", name);
  if (kind != ValueKind::kSwitch) {
    if (value_name.empty()) {
      value_name = kind == ValueKind::kOther ? "VALUE" : "N";
    }
    if (auto it = program.implicit_values.find(name); it != program.implicit_values.end()) {
      absl::StrAppend(&left, "[=", value_name, "]");
      absl::StrAppend(&help, " (bare: ", it->second, ")");
    } else {
      absl::StrAppend(&left, " ", value_name);
      const std::string default_value = flag.DefaultValue();
      if (!default_value.empty()) absl::StrAppend(&help, " (default: ", default_value, ")");
    }
  }
  return {left, help};
}

}  // namespace

std::string_view Version() { return VIGIL_VERSION; }

std::string VersionText(std::string_view program) {
  return absl::StrCat(absl::string_view(program.data(), program.size()), " ", VIGIL_VERSION,
                      "\n");
}

absl::StatusOr<std::vector<Token>> Tokenize(
    const std::vector<std::string>& args,
    const std::function<Arity(std::string_view name)>& arity) {
  std::vector<Token> tokens;
  bool flags_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-') {
      tokens.push_back({.is_flag = false, .name = arg});
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    Token token{.is_flag = true};
    if (arg == "-h") {
      token.name = "help";
    } else if (arg[1] != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag \"", arg, "\" (flags are spelt --name)"));
    } else {
      token.name = arg.substr(2);
      if (size_t eq = token.name.find('='); eq != std::string::npos) {
        token.value = token.name.substr(eq + 1);
        token.name.resize(eq);
      }
    }
    token.arity = arity(token.name);
    if (token.arity == Arity::kValue && !token.value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", token.name, " needs a value"));
      }
      token.value = args[++i];
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

absl::StatusOr<Parsed> Parse(const Program& program, const std::vector<std::string>& args) {
  const std::map<std::string, absl::CommandLineFlag*> flags = ProgramFlags(program);
  absl::StatusOr<std::vector<Token>> tokens =
      Tokenize(args, [&](std::string_view name) {
        if (name == "help" || name == "version") return Arity::kSwitch;
        auto it = flags.find(std::string(name));
        if (it == flags.end()) return Arity::kUnknown;
        if (program.implicit_values.count(std::string(name))) return Arity::kOptionalValue;
        return it->second->IsOfType<bool>() ? Arity::kSwitch : Arity::kValue;
      });
  if (!tokens.ok()) return tokens.status();

  Parsed parsed;
  for (const Token& token : *tokens) {
    if (token.is_flag && token.name == "help") {
      parsed.action = Parsed::Action::kHelp;
      return parsed;
    }
  }
  for (const Token& token : *tokens) {
    if (token.is_flag && token.name == "version") {
      parsed.action = Parsed::Action::kVersion;
      return parsed;
    }
  }
  for (const Token& token : *tokens) {
    if (!token.is_flag) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", token.name, "'"));
    }
    auto it = flags.find(token.name);
    if (it == flags.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", token.name));
    }
    std::string value;
    switch (token.arity) {
      case Arity::kSwitch:
        if (token.value.has_value()) {
          return absl::InvalidArgumentError(absl::StrCat("--", token.name, " takes no value"));
        }
        value = "true";
        break;
      case Arity::kOptionalValue:
        value = token.value.has_value() ? *token.value
                                        : program.implicit_values.at(token.name);
        break;
      default:
        value = token.value.value_or("");
        break;
    }
    std::string error;
    if (!it->second->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(BadValue(token.name, value, *it->second, error));
    }
    parsed.given.insert(token.name);
  }
  return parsed;
}

std::string UsageText(const Program& program) {
  const std::map<std::string, absl::CommandLineFlag*> flags = ProgramFlags(program);
  // Sections of (left column, help) lines: ungrouped flags, the groups in
  // order, then --help and --version.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> sections;
  std::set<std::string> grouped;
  for (const auto& [title, names] : program.groups) {
    for (const std::string& name : names) grouped.insert(name);
  }
  sections.push_back({"flags", {}});
  for (const auto& [name, flag] : flags) {
    if (!grouped.count(name)) sections.back().second.push_back(FlagLine(name, *flag, program));
  }
  if (sections.back().second.empty()) sections.pop_back();
  for (const auto& [title, names] : program.groups) {
    sections.push_back({title, {}});
    for (const std::string& name : names) {
      if (auto it = flags.find(name); it != flags.end()) {
        sections.back().second.push_back(FlagLine(name, *it->second, program));
      }
    }
  }
  sections.push_back({"general",
                      {{"  --help", "print this help and exit"},
                       {"  --version", absl::StrCat("print \"", program.name, " ",
                                                    VIGIL_VERSION, "\" and exit")}}});
  size_t width = 0;
  for (const auto& [title, lines] : sections) {
    for (const auto& [left, help] : lines) width = std::max(width, left.size());
  }
  width = std::min<size_t>(width + 2, 40);

  std::string text = absl::StrCat("usage: ", program.synopsis, "\n");
  if (!program.about.empty()) absl::StrAppend(&text, "\n", program.about, "\n");
  for (const auto& [title, lines] : sections) {
    absl::StrAppend(&text, "\n", title, ":\n");
    for (const auto& [left, help] : lines) {
      std::string line = left;
      line.resize(std::max(width, left.size() + 2), ' ');
      absl::StrAppend(&text, line, help, "\n");
    }
  }
  if (!program.notes.empty()) absl::StrAppend(&text, "\n", program.notes, "\n");
  return text;
}

Parsed ParseOrExit(const Program& program, int argc, char** argv) {
  absl::StatusOr<Parsed> parsed =
      Parse(program, std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program.name.c_str(),
                 std::string(parsed.status().message()).c_str());
    std::exit(kExitUsage);
  }
  if (parsed->action == Parsed::Action::kHelp) {
    std::fputs(UsageText(program).c_str(), stdout);
    std::fflush(stdout);
    std::exit(kExitOk);
  }
  if (parsed->action == Parsed::Action::kVersion) {
    std::fputs(VersionText(program.name).c_str(), stdout);
    std::fflush(stdout);
    std::exit(kExitOk);
  }
  return *parsed;
}

}  // namespace vigil::flags
