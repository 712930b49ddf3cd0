// The "remote_write_receiver" section of the server config: Prometheus
// remote write into Vigil (server/ingest/remote_write_receiver.h).
#ifndef VIGIL_SERVER_CONFIG_RECEIVER_CONFIG_H_
#define VIGIL_SERVER_CONFIG_RECEIVER_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/json_reader.h"
#include "promcompat/metric_mapping.h"

namespace vigil {

// The "remote_write_receiver" section of the server config. Plain data.
//   {"mapping keys": see promcompat/metric_mapping.h ParseMappingKeys,
//    "idle_job": "idle", "frame_grace_seconds": 10,
//    "max_decoded_bytes": 67108864, "max_open_frames": 200000,
//    "job_memory_seconds": 600}
struct RemoteWriteReceiverOptions {
  promcompat::MappingOptions mapping;
  // The job of a node whose series name none and who named none lately.
  std::string idle_job = "idle";
  // A frame goes to detection once no piece of it came for this long:
  // Prometheus sends a shard's batch at the latest batch_send_deadline
  // (5 s) after its first sample.
  double frame_grace_seconds = 10;
  // Largest decompressed request; a larger one gets kResourceExhausted.
  uint64_t max_decoded_bytes = 64u << 20;
  // Frames waiting for their pieces at most (memory bound).
  size_t max_open_frames = 200'000;
  // How long a node's last named job holds for its unlabelled series.
  double job_memory_seconds = 600;
};

// Reads the section into `*out`, recording problems with their key paths.
void ParseRemoteWriteReceiverSection(const nlohmann::json& section, JsonConfigReader& reader,
                                     std::optional<RemoteWriteReceiverOptions>* out);

}  // namespace vigil

#endif  // VIGIL_SERVER_CONFIG_RECEIVER_CONFIG_H_
