#include "server/config/receiver_config.h"

#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/series_key.h"

namespace vigil {

void ParseRemoteWriteReceiverSection(const nlohmann::json& section, JsonConfigReader& reader,
                                     std::optional<RemoteWriteReceiverOptions>* out) {
  const std::string path = "remote_write_receiver";
  std::set<std::string> known = {"idle_job", "frame_grace_seconds", "max_decoded_bytes",
                                 "max_open_frames", "job_memory_seconds"};
  for (const std::string& key : promcompat::MappingKeys()) known.insert(key);
  const size_t errors = reader.errors().size();
  if (!reader.CheckObject(section, path, known)) return;
  RemoteWriteReceiverOptions o;
  promcompat::ParseMappingKeys(section, path, reader, &o.mapping);
  reader.String(section, path, "idle_job", &o.idle_job,
                "The job of a node whose series name none and that named none lately");
  reader.Positive(section, path, "frame_grace_seconds", 1, 600, &o.frame_grace_seconds,
                  "Seconds a frame waits for more of its pieces before it goes to "
                  "detection (Prometheus sends a shard's batch within "
                  "batch_send_deadline, 5 s)");
  reader.Integer(section, path, "max_decoded_bytes", 1024, int64_t{1} << 32, 1,
                 &o.max_decoded_bytes,
                 "Largest decompressed request, in bytes; a larger one gets 413");
  reader.Integer(section, path, "max_open_frames", 1, 100'000'000, 1, &o.max_open_frames,
                 "Frames waiting for their pieces at most (a memory bound); past it the "
                 "oldest go to detection early");
  reader.Positive(section, path, "job_memory_seconds", 1, 86400 * 7, &o.job_memory_seconds,
                  "Seconds a node's last named job holds for its series that name none");
  if (absl::Status s = ValidateLabelValue("job", o.idle_job); !s.ok())
    reader.Error(JsonConfigReader::Join(path, "idle_job"), std::string(s.message()));
  if (absl::StatusOr<std::unique_ptr<promcompat::MetricMapper>> m =
          promcompat::MetricMapper::Create(o.mapping);
      !m.ok())
    reader.Error(path, std::string(m.status().message()));
  if (reader.errors().size() == errors) *out = std::move(o);
}

}  // namespace vigil
