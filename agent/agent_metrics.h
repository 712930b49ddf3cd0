// The agent's own health in the Prometheus text format, served on
// --metrics-listen (loopback by default): delivery counters of the stream
// client, each collector's state, and the process's CPU and memory.
#ifndef VIGIL_AGENT_AGENT_METRICS_H_
#define VIGIL_AGENT_AGENT_METRICS_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "agent/collect_runner.h"
#include "agent/stream_client.h"
#include "common/process_usage.h"

namespace vigil::agent {

// Renders the agent's metrics.
std::string RenderAgentMetrics(const StreamClientStats& client,
                               const CollectRunnerStats& runner,
                               const ProcessUsage& usage);

// A minimal HTTP/1.1 server answering GET /metrics with `render()`, one
// request per connection, one connection at a time: it serves a scraper,
// not the public. Anything else gets 404 or 405; a client that sends more
// than 8 KiB of headers or stalls for 5 s is dropped. Start and Stop are
// called from the owning thread.
class MetricsEndpoint {
 public:
  explicit MetricsEndpoint(std::function<std::string()> render);
  ~MetricsEndpoint();

  // Listens on IPV4:PORT (port 0 picks one) and serves from a thread;
  // returns the bound port. kInvalidArgument if `listen` is not an IPv4
  // address and port (e.g. 127.0.0.1:9465), kUnavailable if it cannot
  // bind, kFailedPrecondition if already started.
  absl::StatusOr<int> Start(const std::string& listen);
  // Stops serving and joins the thread. Idempotent.
  void Stop();

 private:
  void Serve();
  void Answer(int fd);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that Stop() signals
  std::thread thread_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_AGENT_METRICS_H_
