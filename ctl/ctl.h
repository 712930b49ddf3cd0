// vigilctl, the operator CLI over vigil-server's HTTP API, as a library:
// main() only gathers argv and the environment and calls RunVigilCtl.
// The clock, the HTTP transport and the randomness come in through
// Dependencies, so tests run every command against a local server or a
// fake, at a fixed time.
#ifndef VIGIL_CTL_CTL_H_
#define VIGIL_CTL_CTL_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "ctl/command_line.h"
#include "ctl/tokens.h"
#include "ctl/transport.h"

namespace vigil::ctl {

// Exit codes of vigilctl.
inline constexpr int kExitOk = 0;
// The server could not be reached, answered a non-2xx status (its error
// text and status are printed) or answered something that is not JSON; or
// gen-token found no randomness.
inline constexpr int kExitServerError = 1;
// The command line is wrong; the message names the flag or argument.
inline constexpr int kExitUsage = 2;

// What vigilctl uses from outside itself.
struct Dependencies {
  // "Now", for ages and silence windows. Default: the real clock.
  Clock* clock = RealClock();
  // Opens a transport to the server. Default: cpp-httplib.
  std::function<absl::StatusOr<std::unique_ptr<HttpTransport>>(
      const TransportOptions&)>
      connect = NewHttpTransport;
  // Random bytes for gen-token. Default: /dev/urandom.
  std::function<absl::StatusOr<std::string>(size_t)> random_bytes = ReadUrandom;
};

// Runs vigilctl on `args` (argv without the program name): results go to
// `out`, errors (prefixed "vigilctl: ") to `err`. Returns kExitOk,
// kExitServerError or kExitUsage.
int RunVigilCtl(const std::vector<std::string>& args, const Environment& env,
                const Dependencies& deps, std::ostream& out, std::ostream& err);

}  // namespace vigil::ctl

#endif  // VIGIL_CTL_CTL_H_
