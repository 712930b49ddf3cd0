// The notice most notify tests send, and the time they send it at.
#ifndef VIGIL_TESTS_NOTIFY_SAMPLE_NOTICE_H_
#define VIGIL_TESTS_NOTIFY_SAMPLE_NOTICE_H_

#include "notify/notify.h"

namespace vigil::notify_test {

// 2025-11-24T16:00:00Z, a Monday.
inline constexpr double kNow = 1764000000.0;

// A P0 trigger for two people; the summary carries XML/HTML specials.
inline Notice SampleNotice() {
  Notice notice;
  notice.key = "inc-42/trigger/1";
  notice.event = "trigger";
  notice.incident_id = "inc-42";
  notice.severity = "P0";
  notice.kind = "xid_error";
  notice.job = "train-llama";
  notice.node = "gpu-node-7";
  notice.gpu = 3;
  notice.summary = "XID 79 & GPU fell off the bus <critical>";
  notice.hint = "drain the node";
  notice.state = "open";
  notice.incident_ts = kNow - 120;
  notice.url = "https://vigil.example/incidents/inc-42";
  notice.recipients = {{"alice", "+15550001", "alice@example.com", "U024BE7LH"},
                       {"bob", "+15550002", "bob@example.com", ""}};
  return notice;
}

}  // namespace vigil::notify_test

#endif  // VIGIL_TESTS_NOTIFY_SAMPLE_NOTICE_H_
