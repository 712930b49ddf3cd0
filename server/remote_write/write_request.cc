#include "server/remote_write/write_request.h"

#include <algorithm>

#include <google/protobuf/arena.h>
#include <snappy.h>

#include "absl/strings/str_cat.h"
#include "prometheus/remote_write.pb.h"

namespace vigil {

std::string ExportName(std::string_view metric, ExportKind kind) {
  const char* suffix = "";
  switch (kind) {
    case ExportKind::kRaw: return std::string(metric);
    case ExportKind::kMin: suffix = ":min_1m"; break;
    case ExportKind::kMax: suffix = ":max_1m"; break;
    case ExportKind::kAvg: suffix = ":avg_1m"; break;
    case ExportKind::kCount: suffix = ":count_1m"; break;
  }
  return absl::StrCat(absl::string_view(metric.data(), metric.size()), suffix);
}

std::string EncodeWriteRequest(const std::vector<ExportSeries>& series) {
  static const std::string kNameLabel = "__name__";
  // One arena for the whole message: a request holds tens of thousands of
  // small strings and messages, and malloc/free was most of the cost.
  google::protobuf::ArenaOptions arena_options;
  arena_options.start_block_size = 64 << 10;
  arena_options.max_block_size = 1 << 20;
  google::protobuf::Arena arena(arena_options);
  auto* request =
      google::protobuf::Arena::CreateMessage<prometheus::WriteRequest>(&arena);
  request->mutable_timeseries()->Reserve(static_cast<int>(series.size()));
  for (const ExportSeries& s : series) {
    prometheus::TimeSeries* ts = request->add_timeseries();
    const std::vector<Label>& labels = s.key->labels;
    // The key's labels are sorted; "__name__" goes where it sorts (label
    // names may start with capitals, which sort before '_').
    const auto name_at = std::lower_bound(
        labels.begin(), labels.end(), kNameLabel,
        [](const Label& l, const std::string& name) { return l.first < name; });
    ts->mutable_labels()->Reserve(static_cast<int>(labels.size() + 1));
    for (auto it = labels.begin(); it != labels.end(); ++it) {
      if (it == name_at) {
        prometheus::Label* name = ts->add_labels();
        name->set_name(kNameLabel);
        name->set_value(ExportName(s.key->metric, s.kind));
      }
      prometheus::Label* label = ts->add_labels();
      label->set_name(it->first);
      label->set_value(it->second);
    }
    if (name_at == labels.end()) {
      prometheus::Label* name = ts->add_labels();
      name->set_name(kNameLabel);
      name->set_value(ExportName(s.key->metric, s.kind));
    }
    ts->mutable_samples()->Reserve(static_cast<int>(s.samples.size()));
    for (const auto& [ms, value] : s.samples) {
      prometheus::Sample* sample = ts->add_samples();
      sample->set_timestamp(ms);
      sample->set_value(value);
    }
  }
  const std::string plain = request->SerializeAsString();
  std::string body;
  snappy::Compress(plain.data(), plain.size(), &body);
  return body;
}

}  // namespace vigil
