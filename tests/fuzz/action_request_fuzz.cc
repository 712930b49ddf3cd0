// Fuzzes the actuator's webhook checks (actuator/action_handler.h,
// notify/signing.h): the body parser, and signature verification of
// arbitrary headers. A request that parses must name what its action needs.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "actuator/action_handler.h"
#include "notify/signing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<vigil::actuator::ActionRequest> request =
      vigil::actuator::ParseActionRequest(body, 300);
  if (request.ok()) {
    using vigil::actuator::ActionType;
    if (request->id.empty()) __builtin_trap();
    if ((request->type == ActionType::kPause ||
         request->type == ActionType::kCheckpointThenPause) &&
        request->job.empty())
      __builtin_trap();
  }
  // Headers from the input's first bytes, the rest as the body.
  const size_t split = size / 3;
  std::string_view timestamp = body.substr(0, split / 2);
  std::string_view signature = body.substr(split / 2, split - split / 2);
  (void)vigil::VerifyWebhook("secret", timestamp, signature, body.substr(split),
                             1764000000, 300);
  (void)vigil::actuator::IsJsonContentType(body.substr(0, split));
  return 0;
}
