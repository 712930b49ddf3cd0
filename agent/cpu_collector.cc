#include "agent/cpu_collector.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vigil::agent {
namespace {

// Fields of the "cpu " line, in order (proc(5)); guest and guest_nice
// follow but are already counted in user and nice.
enum Field {
  kUser,
  kNice,
  kSystem,
  kIdle,
  kIowait,
  kIrq,
  kSoftirq,
  kSteal,
  kFields
};

double Ratio(uint64_t part, uint64_t total) {
  return std::clamp(static_cast<double>(part) / static_cast<double>(total), 0.0,
                    1.0);
}

// `later - earlier`, or 0 if the counter went back.
uint64_t Delta(uint64_t later, uint64_t earlier) {
  return later > earlier ? later - earlier : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuCollector>> CpuCollector::Create(
    CpuOptions options) {
  int64_t user_hz = options.user_hz;
  if (user_hz < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu: user_hz must be >= 0, got ", user_hz));
  }
  if (user_hz == 0) {
    user_hz = sysconf(_SC_CLK_TCK);
    if (user_hz <= 0) {
      return absl::InternalError("cpu: sysconf(_SC_CLK_TCK) failed");
    }
  }
  return std::unique_ptr<CpuCollector>(
      new CpuCollector(std::move(options), user_hz));
}

CpuCollector::CpuCollector(CpuOptions options, int64_t user_hz)
    : options_(std::move(options)), user_hz_(user_hz) {}

absl::Status CpuCollector::Start(EventSink* events) {
  (void)events;
  return OpenStat();
}

absl::Status CpuCollector::OpenStat() {
  absl::StatusOr<HostFile> f = HostFile::Open(options_.proc_root + "/stat");
  if (!f.ok()) return f.status();
  stat_.emplace(std::move(*f));
  return absl::OkStatus();
}

absl::StatusOr<CpuCollector::Times> CpuCollector::Parse(
    std::string_view text) const {
  const std::string_view line = text.substr(0, text.find('\n'));
  std::array<uint64_t, kFields> v{};
  size_t n = 0;
  size_t pos = 0;
  if (line.substr(0, 4) == "cpu ") {
    pos = 4;
    while (n < v.size()) {
      pos = line.find_first_not_of(' ', pos);
      if (pos == std::string_view::npos) break;
      const size_t end = std::min(line.find(' ', pos), line.size());
      std::optional<uint64_t> x = ParseU64(line.substr(pos, end - pos));
      if (!x) break;
      v[n++] = *x;
      pos = end;
    }
  }
  if (n < v.size()) {
    return absl::DataLossError(absl::StrCat(
        stat_->path(), ": first line is not a \"cpu\" line with ",
        static_cast<int>(kFields), " counters: ", QuoteForError(line)));
  }
  Times t;
  t.iowait = v[kIowait];
  t.busy = v[kUser] + v[kNice] + v[kSystem] + v[kIrq] + v[kSoftirq] + v[kSteal];
  t.total = t.busy + v[kIdle] + v[kIowait];
  return t;
}

absl::Status CpuCollector::Collect(Tick* tick) {
  if (!stat_) {
    absl::Status s = OpenStat();
    if (!s.ok()) return s;
  }
  absl::StatusOr<std::string_view> text = stat_->Read(&buf_);
  if (!text.ok()) return text.status();
  absl::StatusOr<Times> now = Parse(*text);
  if (!now.ok()) return now.status();
  tick->Add("host_cpu_iowait_seconds_total", {},
            static_cast<double>(now->iowait) / static_cast<double>(user_hz_));
  if (last_ && now->total > last_->total) {
    const uint64_t total = now->total - last_->total;
    tick->Add("host_cpu_iowait_ratio", {},
              Ratio(Delta(now->iowait, last_->iowait), total));
    tick->Add("host_cpu_busy_ratio", {},
              Ratio(Delta(now->busy, last_->busy), total));
  }
  last_ = *now;
  return absl::OkStatus();
}

}  // namespace vigil::agent
