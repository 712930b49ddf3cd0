// Fuzzes the training socket's line protocol (agent/training_protocol.h):
// every line any local user can write. Each input is split into lines that
// are parsed, and the messages that parse are applied to one node's ranks,
// which are then collected, as the endpoint does.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "agent/training_protocol.h"
#include "agent/training_ranks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  vigil::agent::TrainingRanks ranks({.staleness_seconds = 300,
                                     .default_job = "idle",
                                     .max_ranks = 16,
                                     .disconnect_grace_seconds = 5});
  std::optional<vigil::agent::HelloMessage> hello;
  double now = 1000;
  while (!input.empty()) {
    const size_t newline = input.find('\n');
    std::string_view line = input.substr(0, newline);
    input.remove_prefix(newline == std::string_view::npos ? input.size()
                                                          : newline + 1);
    (void)vigil::agent::QuoteNonFiniteTokens(line);
    absl::StatusOr<vigil::agent::TrainingMessage> message =
        vigil::agent::ParseTrainingMessage(line);
    if (!message.ok()) continue;
    if (auto* h = std::get_if<vigil::agent::HelloMessage>(&*message);
        h != nullptr && !h->job.empty() && h->job[0] == 'v') {
      h->verified_job_id = "42";  // some hellos play verified ranks
    }
    std::optional<vigil::agent::Tick> event;
    (void)ranks.Apply(*message, now, &hello, &event);
    now += 1;
    if (line.size() % 7 == 0) {
      vigil::agent::Tick tick;
      ranks.Collect(now, &tick);
    }
  }
  vigil::agent::Tick tick;
  ranks.Collect(now + 10, &tick);
  return 0;
}
