// Fuzzes the server's JSON inputs written by people: the config file
// (server/config/config.h, which includes escalation, receivers and auth), rule
// files (rules/rule.h) and silences (escalation/escalation.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "escalation/escalation.h"
#include "nlohmann/json.hpp"
#include "rules/rule.h"
#include "server/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      vigil::ServerOptions options;
      if (vigil::ParseServerConfig(text, &options).ok())
        (void)vigil::ValidateServerOptions(options);
      break;
    }
    case 1:
      (void)vigil::LoadRuleSet(text);
      break;
    default: {
      nlohmann::json body = nlohmann::json::parse(text, nullptr, false);
      if (!body.is_discarded()) (void)vigil::ParseSilence(body, 1764000000);
      break;
    }
  }
  return 0;
}
