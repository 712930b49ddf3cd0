// Fuzzes what the agent reads to learn a process's job
// (agent/job_identity.h): /proc/PID/cgroup text, `scontrol pidinfo` and
// `squeue` output. The first byte picks the parser.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "agent/job_identity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      std::optional<uint32_t> uid;
      std::optional<vigil::agent::ProcessJob> job =
          vigil::agent::JobFromCgroup(text, &uid);
      if (job && job->job_id.empty()) __builtin_trap();
      break;
    }
    case 1:
      (void)vigil::agent::JobFromPidinfo(text);
      break;
    default:
      (void)vigil::agent::ParseSqueueJob(text);
      break;
  }
  return 0;
}
