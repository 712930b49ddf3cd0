// The webhook logic of the actuator, free of any HTTP library: checks the
// Vigil signature and replay window, validates the action, makes repeats
// idempotent, performs the action on a Scheduler and audits every request.
// The contract: actuator/README.md.
#ifndef VIGIL_ACTUATOR_ACTION_HANDLER_H_
#define VIGIL_ACTUATOR_ACTION_HANDLER_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "actuator/audit_log.h"
#include "actuator/scheduler.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace vigil::actuator {

struct ActionHandlerOptions {
  // The shared HMAC secret (notify/signing.h). Required.
  std::string secret;
  // Requests whose X-Vigil-Timestamp is further than this from the clock
  // are refused. Default 300 s.
  double replay_window_seconds = 300;
  // Checkpoint wait when the request names none. Default 300 s.
  double default_checkpoint_timeout_seconds = 300;
  // Called with every audit record after it is written (e.g. to echo it
  // on stderr); may be empty.
  std::function<void(const nlohmann::json& record)> on_record;
  // Requests refused for their signature (anyone who reaches the port can
  // send them) audited per clock minute; past it they are counted, and one
  // "refused_unaudited" record with the count follows, so a flood of
  // forged requests cannot fill the disk. Signed requests are always
  // audited.
  int max_unsigned_audits_per_minute = 60;
};

// One signed POST (/v1/actions, /v1/jobs/query) as it arrived.
struct WebhookRequest {
  std::string timestamp;        // X-Vigil-Timestamp
  std::string signature;        // X-Vigil-Signature
  std::string idempotency_key;  // Idempotency-Key (audited only)
  std::string content_type;     // Content-Type
  std::string body;
  std::string remote;  // "address:port" of the sender
};

// The answer to send back.
struct WebhookReply {
  int http_status = 200;
  nlohmann::json body = nlohmann::json::object();
  // True when this is the stored answer of an earlier request with the
  // same id (sent as the header Idempotent-Replayed: true).
  bool replayed = false;
};

// True when `content_type` is application/json (parameters and case
// ignored) or empty.
bool IsJsonContentType(std::string_view content_type);

// The action in `body` with defaults applied (received_at is left 0).
// kInvalidArgument naming the bad field: not JSON, not an object, id
// missing or not 1-128 of A-Z a-z 0-9 . _ : -, unknown action, job or node
// missing for the action, a field of the wrong type or over 1024 bytes,
// checkpoint_timeout_seconds not in (0, 86400].
absl::StatusOr<ActionRequest> ParseActionRequest(
    std::string_view body, double default_checkpoint_timeout_seconds);

// Handles webhook requests. Thread-safe: requests are handled
// concurrently; a request whose id is being acted on waits for that
// action and gets its answer.
class ActionHandler {
 public:
  // Reads back the done answers in audit.existing_records(). `scheduler`,
  // `audit` and `clock` must outlive this.
  ActionHandler(ActionHandlerOptions options, Scheduler& scheduler,
                AuditLog& audit, Clock& clock);

  // The answer to `request` (see actuator/README.md for every status).
  WebhookReply Handle(const WebhookRequest& request);

  // How many done actions are remembered (and answered without acting).
  size_t remembered_answers() const;

 private:
  // An action being performed; requests repeating its id wait for it.
  struct Attempt {
    bool finished = false;
    WebhookReply reply;
  };
  struct StoredAnswer {
    std::string body_sha256;
    nlohmann::json response;
  };

  void Restore(const std::vector<nlohmann::json>& records);
  // Writes `record` to the audit log and passes it to on_record.
  absl::Status Audit(const nlohmann::json& record);
  // Audit, reporting a failure on stderr.
  void AuditOrWarn(const nlohmann::json& record);
  WebhookReply Refuse(int http_status, const std::string& error,
                      nlohmann::json record);
  // Performs `action` and builds the reply (not yet stored).
  // Performs `action` (after CheckJobOnNode) and maps the outcome to the
  // webhook's answer.
  WebhookReply Act(ActionRequest action);
  // Pause actions only. A request naming a node (the one whose agent
  // verified the job) is checked with the scheduler: the job must be
  // running (or suspended) there, and `action.job` becomes the scheduler's
  // id of that one job. An automatic request (requested_by "vigil") naming
  // no node is refused; an operator's is not checked. `*note` says what was
  // checked. kFailedPrecondition when refused (422), kUnavailable when the
  // scheduler could not answer (502, retried).
  absl::Status CheckJobOnNode(ActionRequest& action, std::string* note);

  // Whether a refusal of an unsigned request at `now` is audited (see
  // max_unsigned_audits_per_minute); writes the summary of the previous
  // minute's unaudited ones when a new minute starts.
  bool AuditUnsigned(double now);

  const ActionHandlerOptions options_;
  Scheduler& scheduler_;
  AuditLog& audit_;
  Clock& clock_;

  std::mutex unsigned_mu_;
  double unsigned_minute_ ABSL_GUARDED_BY(unsigned_mu_) = -1;
  int unsigned_audited_ ABSL_GUARDED_BY(unsigned_mu_) = 0;
  uint64_t unsigned_unaudited_ ABSL_GUARDED_BY(unsigned_mu_) = 0;

  mutable std::mutex mu_;
  std::condition_variable attempt_finished_;
  // Done actions by id.
  std::map<std::string, StoredAnswer> answers_ ABSL_GUARDED_BY(mu_);
  // The body hash of every id ever accepted (done, failed or in flight).
  std::map<std::string, std::string> body_hashes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Attempt>> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_ACTION_HANDLER_H_
