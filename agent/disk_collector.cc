#include "agent/disk_collector.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vigil::agent {
namespace {

// Columns of a diskstats line: major, minor, name, then the fields of
// Documentation/admin-guide/iostats.rst from 1.
constexpr size_t kName = 2;
constexpr size_t kReads = 3;
constexpr size_t kSectorsRead = 5;
constexpr size_t kMsReading = 6;
constexpr size_t kWrites = 7;
constexpr size_t kSectorsWritten = 9;
constexpr size_t kMsWriting = 10;
constexpr size_t kMsDoingIo = 12;
constexpr size_t kColumnsNeeded = kMsDoingIo + 1;

constexpr double kSectorBytes = 512;
constexpr double kMsPerSecond = 1000;

bool HasSpace(const std::string& s) {
  return s.find_first_of(" \t\n\r") != std::string::npos;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskCollector>> DiskCollector::Create(
    DiskOptions options) {
  if (!(options.rescan_seconds >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk: rescan_seconds must be >= 0, got ", options.rescan_seconds));
  }
  std::vector<std::string> sorted = options.devices;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].empty() || HasSpace(sorted[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("disk: bad device name ", QuoteForError(sorted[i])));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("disk: device ", sorted[i], " listed twice"));
    }
  }
  for (const std::string& prefix : options.excluded_prefixes) {
    if (prefix.empty()) {
      return absl::InvalidArgumentError(
          "disk: an empty excluded prefix would exclude every disk");
    }
  }
  return std::unique_ptr<DiskCollector>(new DiskCollector(std::move(options)));
}

DiskCollector::DiskCollector(DiskOptions options)
    : options_(std::move(options)), rescan_(options_.rescan_seconds) {}

absl::Status DiskCollector::Start(EventSink* events) {
  (void)events;
  return OpenDiskstats();
}

absl::Status DiskCollector::OpenDiskstats() {
  absl::StatusOr<HostFile> f =
      HostFile::Open(options_.proc_root + "/diskstats");
  if (!f.ok()) return f.status();
  diskstats_.emplace(std::move(*f));
  return absl::OkStatus();
}

void DiskCollector::Discover(ProblemList* problems) {
  std::vector<std::string> names = options_.devices;
  if (names.empty()) {
    absl::StatusOr<std::vector<std::string>> entries =
        ListDir(options_.sys_root + "/block");
    if (!entries.ok()) {
      problems->Add(entries.status());
      return;  // keep the disks found before
    }
    for (std::string& entry : *entries) {
      const bool excluded = std::any_of(
          options_.excluded_prefixes.begin(), options_.excluded_prefixes.end(),
          [&](const std::string& p) { return entry.rfind(p, 0) == 0; });
      if (excluded) continue;
      // sysfs spells a '/' in a device name (cciss/c0d0) as '!'.
      std::replace(entry.begin(), entry.end(), '!', '/');
      names.push_back(std::move(entry));
    }
  }
  std::sort(names.begin(), names.end());
  disks_.clear();
  for (std::string& name : names) {
    std::vector<Label> labels = {{"dev", name}};
    disks_.push_back(Disk{std::move(name), std::move(labels)});
  }
}

DiskCollector::Disk* DiskCollector::Find(std::string_view name) {
  auto it = std::lower_bound(
      disks_.begin(), disks_.end(), name,
      [](const Disk& d, std::string_view n) { return d.name < n; });
  return it != disks_.end() && it->name == name ? &*it : nullptr;
}

absl::Status DiskCollector::Collect(Tick* tick) {
  ProblemList problems;
  if (rescan_.Due(tick->ts)) Discover(&problems);
  if (!diskstats_) {
    absl::Status s = OpenDiskstats();
    if (!s.ok()) return s;
  }
  absl::StatusOr<std::string_view> text = diskstats_->Read(&buf_);
  if (!text.ok()) return text.status();
  for (Disk& disk : disks_) disk.seen = false;
  std::string_view rest = *text;
  while (!rest.empty()) {
    const size_t eol = rest.find('\n');
    CollectLine(rest.substr(0, eol), tick, &problems);
    rest = eol == std::string_view::npos ? std::string_view()
                                         : rest.substr(eol + 1);
  }
  for (const Disk& disk : disks_) {
    if (!disk.seen) {
      problems.Add(absl::NotFoundError(
          absl::StrCat("disk ", disk.name, " is not in ", diskstats_->path())));
    }
  }
  return problems.ToStatus();
}

void DiskCollector::CollectLine(std::string_view line, Tick* tick,
                                ProblemList* problems) {
  std::array<std::string_view, kColumnsNeeded> cols;
  size_t n = 0;
  size_t pos = 0;
  while (n < cols.size()) {
    pos = line.find_first_not_of(" \t", pos);
    if (pos == std::string_view::npos) break;
    const size_t end = std::min(line.find_first_of(" \t", pos), line.size());
    cols[n++] = line.substr(pos, end - pos);
    pos = end;
  }
  if (n <= kName) return;  // a blank or truncated line names no device
  Disk* disk = Find(cols[kName]);
  if (disk == nullptr || disk->seen) return;
  disk->seen = true;
  std::array<double, kColumnsNeeded> v{};
  for (size_t i = kName + 1; i < n; ++i) {
    std::optional<uint64_t> x = ParseU64(cols[i]);
    if (!x) {
      n = 0;
      break;
    }
    v[i] = static_cast<double>(*x);
  }
  if (n < kColumnsNeeded) {
    problems->Add(absl::DataLossError(
        absl::StrCat(diskstats_->path(), ": line of ", disk->name,
                     " does not parse: ", QuoteForError(line))));
    return;
  }
  tick->Add("disk_reads_total", disk->labels, v[kReads]);
  tick->Add("disk_read_bytes_total", disk->labels,
            v[kSectorsRead] * kSectorBytes);
  tick->Add("disk_read_seconds_total", disk->labels,
            v[kMsReading] / kMsPerSecond);
  tick->Add("disk_writes_total", disk->labels, v[kWrites]);
  tick->Add("disk_write_bytes_total", disk->labels,
            v[kSectorsWritten] * kSectorBytes);
  tick->Add("disk_write_seconds_total", disk->labels,
            v[kMsWriting] / kMsPerSecond);
  tick->Add("disk_io_seconds_total", disk->labels,
            v[kMsDoingIo] / kMsPerSecond);
}

}  // namespace vigil::agent
