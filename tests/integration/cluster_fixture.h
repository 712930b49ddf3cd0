// Helpers for end-to-end tests: simulated agents that remember every sample
// they enqueued, and an HTTP reader that fetches them back from the server.
#ifndef VIGIL_TESTS_INTEGRATION_CLUSTER_FIXTURE_H_
#define VIGIL_TESTS_INTEGRATION_CLUSTER_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/sim/scenarios.h"
#include "agent/sim/simulator.h"
#include "agent/stream_client.h"
#include "storage/series_store.h"

namespace vigil::testing_util {

// Every sample one node sent, by the series' Prometheus text (job and node
// labels included, as the server names it).
using SentSamples = std::map<std::string, std::vector<Sample>>;

// A simulated node streaming through a real StreamClient.
class SimulatedAgent {
 public:
  // `fault` (a fault kind of agent::FaultKindNames, empty for none) starts
  // `fault_at_seconds` after the agent's first tick.
  SimulatedAgent(const std::string& node, const std::string& job, int seed,
                 const std::string& server, const std::string& fault = "",
                 double fault_at_seconds = 0);
  ~SimulatedAgent();
  // Enqueues the frames of ticks `first_ts`, `first_ts`+1, ... (count ticks).
  void EnqueueTicks(double first_ts, int count);
  // Waits until every enqueued batch is acked; false on timeout.
  bool WaitAllAcked(double timeout_seconds);
  const SentSamples& sent() const { return sent_; }
  agent::StreamClient& client() { return *client_; }

 private:
  std::string node_;
  std::unique_ptr<agent::FaultScenario> scenario_;
  std::unique_ptr<agent::Simulator> sim_;
  std::unique_ptr<agent::StreamClient> client_;
  std::vector<uint32_t> ids_;
  std::vector<std::string> names_;
  uint64_t last_seq_ = 0;
  SentSamples sent_;
};

// Fetches every series of `node` from the HTTP API on 127.0.0.1:`http_port`
// with samples in [from, to), keyed like SentSamples. Fails the current test
// on HTTP errors.
SentSamples FetchNode(int http_port, const std::string& node, double from,
                      double to);

// Bitwise equality, so NaN == NaN.
bool SameSamples(const std::vector<Sample>& a, const std::vector<Sample>& b);

}  // namespace vigil::testing_util

#endif  // VIGIL_TESTS_INTEGRATION_CLUSTER_FIXTURE_H_
