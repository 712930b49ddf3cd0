// The actuator's HTTP endpoint: POST /v1/actions (to an ActionHandler),
// POST /v1/jobs/query (to a JobQueryHandler) and GET /healthz, on
// cpp-httplib.
#ifndef VIGIL_ACTUATOR_HTTP_SERVER_H_
#define VIGIL_ACTUATOR_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "actuator/action_handler.h"
#include "actuator/job_query_handler.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace vigil::actuator {

// Serves the webhook on one address until Stop(). Thread-compatible:
// Start and Stop from one thread; requests are served on httplib's pool.
class ActuatorHttpServer {
 public:
  // `handler` and `queries` must outlive this; `backend` is shown by
  // /healthz.
  ActuatorHttpServer(ActionHandler& handler, JobQueryHandler& queries,
                     std::string backend);
  ~ActuatorHttpServer();  // stops

  // Binds `listen` ("host:port"; port 0 picks a free one) and serves in a
  // background thread. kInvalidArgument for a malformed address;
  // kUnavailable when it cannot be bound.
  absl::Status Start(const std::string& listen);
  // The bound port (after a successful Start).
  int port() const { return port_; }
  // Stops serving and waits for the serving thread. Idempotent.
  void Stop();

 private:
  ActionHandler& handler_;
  JobQueryHandler& queries_;
  const std::string backend_;
  std::unique_ptr<httplib::Server> server_;
  std::thread serving_;
  std::atomic<bool> listen_returned_ = false;
  int port_ = 0;
};

// Splits "host:port" ("[v6]:port" too). kInvalidArgument when malformed.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_HTTP_SERVER_H_
