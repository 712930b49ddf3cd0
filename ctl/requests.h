// Turns a parsed vigilctl command into the vigil-server API request it
// stands for (the contract is in ctl/README.md).
#ifndef VIGIL_CTL_REQUESTS_H_
#define VIGIL_CTL_REQUESTS_H_

#include "absl/status/statusor.h"
#include "ctl/command_line.h"
#include "ctl/transport.h"

namespace vigil::ctl {

// The request for `invocation` (a server command that ParseCommandLine
// accepted), without the bearer token. `now` (Unix seconds) is when it is
// sent. kInvalidArgument when --until lies in the past at `now`, or when
// the command is not a server command (hash-token, gen-token, help).
absl::StatusOr<HttpRequest> BuildRequest(const Invocation& invocation,
                                         double now);

}  // namespace vigil::ctl

#endif  // VIGIL_CTL_REQUESTS_H_
