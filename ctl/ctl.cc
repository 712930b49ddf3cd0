#include "ctl/ctl.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "ctl/output.h"
#include "ctl/requests.h"
#include "nlohmann/json.hpp"

namespace vigil::ctl {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxQuotedBody = 300;

// Prints `message` as a usage error and returns kExitUsage.
int UsageError(std::ostream& err, absl::string_view message) {
  err << "vigilctl: " << message
      << "\nrun 'vigilctl --help' for the commands, 'vigilctl COMMAND "
         "--help' for one\n";
  return kExitUsage;
}

// Who a new token is for: --name and --role, defaulted.
struct TokenOwner {
  std::string name;
  std::string role;
};

TokenOwner Owner(const Invocation& invocation) {
  const std::string name = invocation.Flag("name");
  const std::string role = invocation.Flag("role");
  return {name.empty() ? "NAME" : name, role.empty() ? "operator" : role};
}

Json ConfigJson(const TokenOwner& owner, const std::string& hash) {
  return {{"name", owner.name}, {"role", owner.role}, {"sha256", hash}};
}

int HashToken(const Invocation& invocation, std::ostream& out) {
  const std::string hash = TokenSha256Hex(invocation.args[0]);
  const TokenOwner owner = Owner(invocation);
  if (invocation.global.json) {
    out << Json{{"sha256", hash}, {"config", ConfigJson(owner, hash)}}.dump()
        << "\n";
    return kExitOk;
  }
  out << "sha256: " << hash
      << "\nconfig: " << TokenConfigEntry(owner.name, owner.role, hash) << "\n";
  return kExitOk;
}

int GenToken(const Invocation& invocation, const Dependencies& deps,
             std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::string> random = deps.random_bytes(kTokenBytes);
  if (!random.ok() || random->size() != kTokenBytes) {
    err << "vigilctl: gen-token: "
        << (random.ok() ? "short read of random bytes"
                        : std::string(random.status().message()))
        << "\n";
    return kExitServerError;
  }
  const std::string token = EncodeToken(*random);
  const std::string hash = TokenSha256Hex(token);
  const TokenOwner owner = Owner(invocation);
  if (invocation.global.json) {
    out << Json{{"token", token},
                {"sha256", hash},
                {"config", ConfigJson(owner, hash)}}
               .dump()
        << "\n";
    return kExitOk;
  }
  out << "token:  " << token << "\nsha256: " << hash
      << "\nconfig: " << TokenConfigEntry(owner.name, owner.role, hash)
      << "\nHand the token to its user; the server config gets only the "
         "config line.\n";
  return kExitOk;
}

// The bearer token: --token or $VIGIL_TOKEN, else the first line of
// --token-file. kInvalidArgument naming --token-file when it cannot be
// read or is empty.
absl::StatusOr<std::string> ResolveToken(const GlobalOptions& global) {
  if (!global.token.empty() || global.token_file.empty()) return global.token;
  std::ifstream file(global.token_file);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token-file ", global.token_file,
                     ": cannot read it: ", std::strerror(errno)));
  }
  std::string token;
  std::getline(file, token);
  absl::StripAsciiWhitespace(&token);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token-file ", global.token_file, ": its first line is empty"));
  }
  return token;
}

// `body` cut to kMaxQuotedBody bytes, for error messages.
std::string Quote(std::string body) {
  absl::StripAsciiWhitespace(&body);
  if (body.empty()) return "(empty body)";
  if (body.size() > kMaxQuotedBody) {
    body.resize(kMaxQuotedBody);
    body += "...";
  }
  return body;
}

// Explains a non-2xx answer: the server's {"error": ...} text (or its
// body), the status, and what to do about 401 and 403.
std::string DescribeHttpError(const HttpRequest& request,
                              const HttpResponse& response) {
  const Json body = Json::parse(response.body, nullptr, false);
  const std::string what =
      body.is_object() && body.contains("error") && body["error"].is_string()
          ? body["error"].get<std::string>()
          : Quote(response.body);
  std::string text = absl::StrCat(request.method, " ", request.target,
                                  ": HTTP ", response.status, ": ", what);
  if (response.status == 401) {
    absl::StrAppend(&text,
                    "\n(give a valid token: --token, $VIGIL_TOKEN or "
                    "--token-file)");
  } else if (response.status == 403) {
    absl::StrAppend(&text,
                    "\n(your token's role may not do this; see 'vigilctl "
                    "whoami')");
  }
  return text;
}

}  // namespace

int RunVigilCtl(const std::vector<std::string>& args, const Environment& env,
                const Dependencies& deps, std::ostream& out,
                std::ostream& err) {
  if (args.empty()) {
    err << UsageText("");
    return kExitUsage;
  }
  absl::StatusOr<Invocation> parsed = ParseCommandLine(args, env);
  if (!parsed.ok()) return UsageError(err, parsed.status().message());
  const Invocation& invocation = *parsed;
  if (invocation.help) {
    out << UsageText(invocation.command);
    return kExitOk;
  }
  if (invocation.version) {
    out << flags::VersionText("vigilctl");
    return kExitOk;
  }
  if (invocation.command == "hash-token") return HashToken(invocation, out);
  if (invocation.command == "gen-token") {
    return GenToken(invocation, deps, out, err);
  }

  const double now = deps.clock->Now();
  absl::StatusOr<HttpRequest> request = BuildRequest(invocation, now);
  if (!request.ok()) return UsageError(err, request.status().message());
  absl::StatusOr<std::string> token = ResolveToken(invocation.global);
  if (!token.ok()) return UsageError(err, token.status().message());
  request->bearer_token = *token;
  TransportOptions transport_options;
  transport_options.base_url = invocation.global.server;
  transport_options.ca_cert_file = invocation.global.ca_cert_file;
  transport_options.timeout_seconds = invocation.global.timeout_seconds;
  absl::StatusOr<std::unique_ptr<HttpTransport>> transport =
      deps.connect(transport_options);
  if (!transport.ok()) {
    return UsageError(err,
                      absl::StrCat("--server: ", transport.status().message()));
  }

  absl::StatusOr<HttpResponse> response = (*transport)->Send(*request);
  if (!response.ok()) {
    err << "vigilctl: " << response.status().message() << "\n";
    return kExitServerError;
  }
  if (response->status < 200 || response->status > 299) {
    err << "vigilctl: " << DescribeHttpError(*request, *response) << "\n";
    return kExitServerError;
  }
  if (invocation.global.json) {
    out << response->body;
    if (response->body.empty() || response->body.back() != '\n') out << "\n";
    return kExitOk;
  }
  const Json body = Json::parse(response->body, nullptr, false);
  if (body.is_discarded()) {
    err << "vigilctl: " << request->method << " " << request->target
        << ": HTTP " << response->status
        << " but the body is not JSON: " << Quote(response->body) << "\n";
    return kExitServerError;
  }
  out << FormatResponse(invocation, body, now);
  return kExitOk;
}

}  // namespace vigil::ctl
