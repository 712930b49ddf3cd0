#include "agent/infiniband_collector.h"

#include <charconv>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vigil::agent {
namespace {

// A counter series of a port, as documented in the header.
struct CounterSpec {
  const char* metric;
  double scale;
  // Files summed, relative to the port dir; unused entries are null.
  const char* files[5];
};

const CounterSpec kCounters[] = {
    {"net_tx_bytes_total", 4, {"counters/port_xmit_data"}},
    {"net_rx_bytes_total", 4, {"counters/port_rcv_data"}},
    {"net_drops_total",
     1,
     {"counters/port_xmit_discards", "counters/port_rcv_errors"}},
    {"net_retransmits_total",
     1,
     {"hw_counters/out_of_sequence", "hw_counters/packet_seq_err",
      "hw_counters/local_ack_timeout_err", "hw_counters/implied_nak_seq_err",
      "hw_counters/roce_adp_retrans"}},
    {"net_link_downed_total", 1, {"counters/link_downed"}},
    {"net_symbol_errors_total", 1, {"counters/symbol_error"}},
    {"net_link_error_recovery_total", 1, {"counters/link_error_recovery"}},
};

constexpr int kStateActive = 4;

// The state code of a `state` file ("4: ACTIVE" -> 4), or nullopt.
std::optional<uint64_t> ParseState(std::string_view text) {
  text = TrimSpace(text);
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  return ParseU64(text.substr(0, colon));
}

// The Gb/s of a `rate` file ("400 Gb/sec (4X NDR)" -> 400), or nullopt.
std::optional<double> ParseRate(std::string_view text) {
  text = TrimSpace(text);
  double gbps = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, gbps);
  if (ec != std::errc() || !std::isfinite(gbps) || gbps < 0) {
    return std::nullopt;
  }
  constexpr std::string_view kUnit = " Gb/sec";
  if (std::string_view(ptr, end - ptr).substr(0, kUnit.size()) != kUnit) {
    return std::nullopt;
  }
  return gbps;
}

// Opens `path` into `*file`; a missing file leaves it empty quietly.
// Returns false (and records why) if it exists but cannot be opened.
bool OpenOptional(std::string path, std::optional<HostFile>* file,
                  ProblemList* problems) {
  absl::StatusOr<HostFile> f = HostFile::Open(std::move(path));
  if (f.ok()) {
    file->emplace(std::move(*f));
  } else if (!absl::IsNotFound(f.status())) {
    problems->Add(f.status());
    return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InfinibandCollector>>
InfinibandCollector::Create(InfinibandOptions options) {
  if (!(options.rescan_seconds >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("infiniband: rescan_seconds must be >= 0, got ",
                     options.rescan_seconds));
  }
  return std::unique_ptr<InfinibandCollector>(
      new InfinibandCollector(std::move(options)));
}

InfinibandCollector::InfinibandCollector(InfinibandOptions options)
    : options_(std::move(options)), rescan_(options_.rescan_seconds) {}

std::string InfinibandCollector::ClassDir() const {
  return options_.sys_root + "/class/infiniband";
}

absl::Status InfinibandCollector::Start(EventSink* events) {
  (void)events;
  absl::StatusOr<std::vector<std::string>> devices = ListDir(ClassDir());
  if (absl::IsNotFound(devices.status())) {
    return absl::NotFoundError(absl::StrCat(
        "infiniband: no RDMA stack: ", ClassDir(), " does not exist"));
  }
  return devices.status();
}

void InfinibandCollector::Discover(ProblemList* problems) {
  ports_.clear();
  absl::StatusOr<std::vector<std::string>> devices = ListDir(ClassDir());
  if (!devices.ok()) {
    problems->Add(devices.status());
    return;
  }
  for (const std::string& device : *devices) {
    const std::string ports_dir =
        absl::StrCat(ClassDir(), "/", device, "/ports");
    absl::StatusOr<std::vector<std::string>> port_names = ListDir(ports_dir);
    if (!port_names.ok()) {
      problems->Add(port_names.status());
      continue;
    }
    for (const std::string& port_name : *port_names) {
      const std::string dir = absl::StrCat(ports_dir, "/", port_name, "/");
      Port port;
      port.labels = {{"dev", port_names->size() == 1
                                 ? device
                                 : absl::StrCat(device, ":", port_name)}};
      for (const CounterSpec& spec : kCounters) {
        Series series{spec.metric, spec.scale, {}};
        bool usable = true;
        for (const char* file : spec.files) {
          if (file == nullptr) break;
          std::optional<HostFile> f;
          usable &= OpenOptional(dir + file, &f, problems);
          if (f) series.files.push_back(std::move(*f));
        }
        if (usable && !series.files.empty()) {
          port.counters.push_back(std::move(series));
        }
      }
      OpenOptional(dir + "state", &port.state, problems);
      OpenOptional(dir + "rate", &port.rate, problems);
      ports_.push_back(std::move(port));
    }
  }
}

absl::Status InfinibandCollector::Collect(Tick* tick) {
  ProblemList problems;
  if (rescan_.Due(tick->ts)) Discover(&problems);
  for (const Port& port : ports_) CollectPort(port, tick, &problems);
  return problems.ToStatus();
}

void InfinibandCollector::CollectPort(const Port& port, Tick* tick,
                                      ProblemList* problems) {
  for (const Series& series : port.counters) {
    double sum = 0;
    bool ok = true;
    for (const HostFile& file : series.files) {
      absl::StatusOr<uint64_t> v = file.ReadU64(&buf_);
      if (!v.ok()) {
        problems->Add(v.status());
        ok = false;
        break;
      }
      sum += static_cast<double>(*v);
    }
    if (ok) tick->Add(series.metric, port.labels, sum * series.scale);
  }
  if (!port.state) return;
  absl::StatusOr<std::string_view> state = port.state->Read(&buf_);
  if (!state.ok()) {
    problems->Add(state.status());
    return;
  }
  std::optional<uint64_t> code = ParseState(*state);
  if (!code) {
    problems->Add(absl::DataLossError(absl::StrCat(
        port.state->path(), ": not a port state: ", QuoteForError(*state))));
    return;
  }
  const bool up = *code == kStateActive;
  tick->Add("net_link_up", port.labels, up ? 1 : 0);
  if (!up || !port.rate) return;
  absl::StatusOr<std::string_view> rate = port.rate->Read(&buf_);
  if (!rate.ok()) {
    problems->Add(rate.status());
    return;
  }
  std::optional<double> gbps = ParseRate(*rate);
  if (!gbps) {
    problems->Add(absl::DataLossError(absl::StrCat(
        port.rate->path(), ": not a link rate: ", QuoteForError(*rate))));
    return;
  }
  tick->Add("net_link_rate_gbps", port.labels, *gbps);
}

}  // namespace vigil::agent
