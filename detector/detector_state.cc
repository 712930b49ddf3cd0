// Snapshots of what the detector has learned: per-series baselines (learned,
// inherited, or the samples of one still learning), job and family
// profiles, and the runs in progress, so that a server restart (or a crash)
// does not send every running job back to learning.
//
// Format (little-endian): "VGDS", u32 version (3), then sections:
//   series:   groups of u32 n > 0 records, ended by a u32 0 (version 1: one
//             u32 count and its records); a record is
//             u32 id, u64 key hash, u8 stage, f32 widen, f64 level, spread,
//             learn_start_ts, i64 first_step, evaluated, learn_seen,
//             early_at, i32 stride, f64 diff_level, then a learning
//             series' samples as LearnSamples::SaveTo writes them (the
//             values exactly, or their scale and half codes; versions 1
//             and 2: u32 n + n f32 samples, at most every other one);
//             of two records of one id the later one counts
// and then u32 counts of:
//   profiles: str name, i32 nodes, u32 n x (str metric, u32 m x (f32, f32))
//   runs:     str job, str node, i64 step, run_start_step, f64 interval,
//             busy, run_start_ts, i32 busy_frames, u8 rewarm
//   jobs:     str name, f64 run_start_ts, last_checkpoint_ts,
//             longest_stall_s
// A string is u32 length + bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <regex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "detector/detector_impl.h"
#include "detector/fixed_bytes.h"

namespace vigil {

using detector_internal::JobState;
using detector_internal::kNaN;
using detector_internal::kNone;
using detector_internal::kNoStep;
using detector_internal::LearnSamples;
using detector_internal::LearnState;
using detector_internal::NodeState;
using detector_internal::Profile;
using detector_internal::ProfileEntry;
using detector_internal::SeriesState;
using detector_internal::Stage;

namespace {

constexpr char kMagic[] = "VGDS";
// Version 3 keeps a learning series' samples as the detector holds them
// (a run of one value in 9 bytes, half codes in 2 bytes a sample) instead
// of up to 256 floats; version 2 writes series in groups, so that a
// snapshot can be written in parts (Detector::SaveStatePart). Versions 1
// and 2 still restore.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kVersionFloatSamples = 2;
constexpr uint32_t kVersionOneCount = 1;
// The bytes of a series record before its samples, and the least bytes of
// one.
constexpr size_t kSeriesFixedBytes = 4 + 8 + 1 + 4 + 8 * 3 + 8 * 4 + 4 + 8;
constexpr size_t kSeriesRecordBytes = kSeriesFixedBytes + 1;

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    detector_internal::PutFixed(out_, v);
  }
  void Str(std::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_->append(s);
  }

 private:
  std::string* out_;
};

class Reader;
void WriteProfile(Writer& w, const std::string& name, const Profile& p);
absl::Status ReadProfiles(Reader& r, absl::flat_hash_map<std::string, Profile>* out);

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    return detector_internal::TakeFixed(&in_, v) || Fail();
  }
  bool Str(std::string* s) {
    uint32_t n;
    if (!Get(&n) || in_.size() < n) return Fail();
    s->assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  // A count of items at least `item_bytes` each: refuses counts the rest of
  // the input cannot hold (a corrupt snapshot never makes us allocate).
  bool Count(uint32_t* n, size_t item_bytes) {
    if (!Get(n)) return false;
    if (static_cast<uint64_t>(*n) * item_bytes > in_.size()) return Fail();
    return true;
  }
  // A learning series' samples (LearnSamples::SaveTo).
  bool Samples(LearnSamples* samples) {
    return samples->LoadFrom(&in_) || Fail();
  }
  bool ok() const { return ok_; }
  bool done() const { return in_.empty(); }

 private:
  bool Fail() {
    ok_ = false;
    return false;
  }
  std::string_view in_;
  bool ok_ = true;
};

// One profile: str name, i32 nodes, u32 n x (str metric, u32 m x (f32, f32)).
void WriteProfile(Writer& w, const std::string& name, const Profile& p) {
  w.Str(name);
  w.Put<int32_t>(p.nodes);
  w.Put<uint32_t>(static_cast<uint32_t>(p.by_metric.size()));
  for (const auto& [metric, e] : p.by_metric) {
    w.Str(metric);
    w.Put<uint32_t>(static_cast<uint32_t>(e.samples.size()));
    for (const auto& [level, spread] : e.samples) {
      w.Put<float>(level);
      w.Put<float>(spread);
    }
  }
}

// A u32 count of profiles, then each as WriteProfile wrote it.
absl::Status ReadProfiles(Reader& r, absl::flat_hash_map<std::string, Profile>* out) {
  uint32_t n;
  if (!r.Count(&n, 4 + 4 + 4)) return absl::DataLossError("corrupt profiles");
  for (uint32_t i = 0; i < n; ++i) {
    std::string name;
    int32_t nodes;
    uint32_t metrics;
    if (!r.Str(&name) || !r.Get(&nodes) || !r.Count(&metrics, 8)) {
      return absl::DataLossError("corrupt snapshot (profiles)");
    }
    Profile& p = (*out)[name];
    p.nodes = nodes;
    for (uint32_t k = 0; k < metrics; ++k) {
      std::string metric;
      uint32_t count;
      if (!r.Str(&metric) || !r.Count(&count, 8)) {
        return absl::DataLossError("corrupt snapshot (profile)");
      }
      ProfileEntry& e = p.by_metric[metric];
      for (uint32_t c = 0; c < count; ++c) {
        float level, spread;
        if (!r.Get(&level) || !r.Get(&spread)) {
          return absl::DataLossError("corrupt snapshot (profile samples)");
        }
        if (e.samples.size() < detector_internal::kProfileSamples) {
          e.samples.emplace_back(level, spread);
        }
      }
    }
  }
  return absl::OkStatus();
}

constexpr char kProfilesMagic[] = "VGPF";
constexpr uint32_t kProfilesVersion = 1;

uint64_t KeyHash(const SeriesKey& key) {
  return std::hash<std::string>()(key.ToString());
}

std::string PairKey(std::string_view job, std::string_view node) {
  return absl::StrCat(detector_internal::AbslView(job),
                      absl::string_view("\0", 1),
                      detector_internal::AbslView(node));
}

}  // namespace

// Anything but a series still learning with nothing learned yet.
bool Detector::Impl::InSnapshot(uint32_t d) const {
  const SeriesState& s = series[d];
  if (s.id >= dense_of_id.size() || dense_of_id[s.id] != d) return false;
  return s.stage != Stage::kLearning ||
         (s.learning != nullptr && !s.learning->samples.empty());
}

bool Detector::Impl::StillToLearn(uint32_t d) const {
  const SeriesState& s = series[d];
  if (s.id >= dense_of_id.size() || dense_of_id[s.id] != d || s.learned() ||
      s.node == kNone || !LearnsBaseline(*s.traits)) {
    return false;
  }
  const NodeState& n = nodes[s.node];
  return !n.free && !n.retired && !n.ended;
}

void Detector::Impl::AppendSeriesRecord(uint32_t d, std::string* out) const {
  const SeriesState& s = series[d];
  Writer w(out);
  w.Put<uint32_t>(s.id);
  w.Put<uint64_t>(KeyHash(KeyOf(d)));
  w.Put<uint8_t>(static_cast<uint8_t>(s.stage));
  w.Put<float>(s.widen);
  w.Put<double>(s.level);
  w.Put<double>(s.spread);
  w.Put<double>(s.learn_start_ts);
  w.Put<int64_t>(s.first_step);
  w.Put<int64_t>(s.evaluated);
  static const LearnState kLearned;  // what a learned series writes
  const LearnState& l = s.learning != nullptr ? *s.learning : kLearned;
  w.Put<int64_t>(l.seen);
  w.Put<int64_t>(l.early_at);
  w.Put<int32_t>(s.stride);
  w.Put<double>(s.aux != kNone ? aux[s.aux].diff_level : kNaN);
  l.samples.SaveTo(out);
}

void Detector::Impl::AppendSnapshotRest(std::string* out) const {
  const Impl& m = *this;
  Writer w(out);
  w.Put<uint32_t>(static_cast<uint32_t>(m.profiles.size()));
  for (const auto& [name, p] : m.profiles) WriteProfile(w, name, p);
  uint32_t runs = 0;
  for (const NodeState& n : m.nodes) runs += !n.free && !n.retired && !n.ended;
  w.Put<uint32_t>(runs);
  for (const NodeState& n : m.nodes) {
    if (n.free || n.retired || n.ended) continue;
    w.Str(m.jobs[n.job].name);
    w.Str(n.name);
    w.Put<int64_t>(n.step);
    w.Put<int64_t>(n.run_start_step);
    w.Put<double>(n.interval);
    w.Put<double>(n.busy);
    w.Put<double>(n.run_start_ts);
    w.Put<int32_t>(n.busy_frames);
    w.Put<uint8_t>(n.rewarm ? 1 : 0);
  }
  uint32_t jobs = 0;
  for (const JobState& j : m.jobs) jobs += !j.free && !j.ended;
  w.Put<uint32_t>(jobs);
  for (const JobState& j : m.jobs) {
    if (j.free || j.ended) continue;
    w.Str(j.name);
    w.Put<double>(j.run_start_ts);
    w.Put<double>(j.last_checkpoint_ts);
    w.Put<double>(j.longest_stall_s);
  }
}

absl::Status Detector::SaveState(std::string* out) const {
  out->clear();
  SnapshotCursor cursor;
  while (!cursor.done()) SaveStatePart(&cursor, size_t{1} << 40, out);
  return absl::OkStatus();
}

void Detector::SaveStatePart(SnapshotCursor* cursor, size_t max_bytes,
                             std::string* out) const {
  const Impl& m = *impl_;
  const size_t limit = out->size() + max_bytes;
  Writer w(out);
  if (cursor->section == 0) {
    out->append(kMagic, 4);
    w.Put<uint32_t>(kVersion);
    // Series still waiting for their saved state first: one registered
    // while later parts are written is then in them (or was already here).
    cursor->pending.clear();
    for (const auto& [id, blob] : m.pending_series) cursor->pending.push_back(id);
    std::sort(cursor->pending.begin(), cursor->pending.end());
    cursor->next = 0;
    cursor->still_to_learn = 0;
    cursor->section = 1;
  }
  while ((cursor->section == 1 || cursor->section == 2) && out->size() < limit) {
    const size_t count_at = out->size();
    w.Put<uint32_t>(0);
    uint32_t count = 0;
    if (cursor->section == 1) {
      for (; cursor->next < cursor->pending.size() && out->size() < limit; ++cursor->next) {
        auto it = m.pending_series.find(cursor->pending[cursor->next]);
        if (it == m.pending_series.end()) continue;  // registered since
        out->append(it->second);  // already encoded, id first
        ++count;
      }
      if (cursor->next == cursor->pending.size()) {
        cursor->pending = {};
        cursor->next = 0;
        cursor->section = 2;
      }
    } else {
      for (; cursor->next < m.series.size() && out->size() < limit; ++cursor->next) {
        const uint32_t d = static_cast<uint32_t>(cursor->next);
        cursor->still_to_learn += m.StillToLearn(d);
        if (!m.InSnapshot(d)) continue;
        m.AppendSeriesRecord(d, out);
        ++count;
      }
      if (cursor->next >= m.series.size()) cursor->section = 3;
    }
    if (count == 0) {
      out->resize(count_at);  // a zero count ends the series
    } else {
      std::memcpy(out->data() + count_at, &count, sizeof(count));
    }
  }
  if (cursor->section == 3 && out->size() < limit) {
    w.Put<uint32_t>(0);
    m.AppendSnapshotRest(out);
    cursor->section = 4;
  }
}

namespace {

// Reads one series record of snapshot version `version` into `blob`, as
// this version writes it; false for a truncated or corrupt one.
bool ReadSeriesRecord(Reader& r, uint32_t version, std::string* blob) {
  Writer w(blob);
  uint32_t id;
  uint64_t hash;
  uint8_t stage;
  float widen;
  double level, spread, start, diff;
  int64_t first, evaluated, seen, early;
  int32_t stride;
  if (!r.Get(&id) || !r.Get(&hash) || !r.Get(&stage) || !r.Get(&widen) ||
      !r.Get(&level) || !r.Get(&spread) || !r.Get(&start) ||
      !r.Get(&first) || !r.Get(&evaluated) || !r.Get(&seen) ||
      !r.Get(&early) || !r.Get(&stride) || !r.Get(&diff) ||
      stage > static_cast<uint8_t>(Stage::kLearned)) {
    return false;
  }
  w.Put(id), w.Put(hash), w.Put(stage), w.Put(widen), w.Put(level);
  w.Put(spread), w.Put(start), w.Put(first), w.Put(evaluated), w.Put(seen);
  w.Put(early), w.Put(stride), w.Put(diff);
  LearnSamples samples;
  if (version > kVersionFloatSamples) {
    if (!r.Samples(&samples)) return false;
  } else {
    uint32_t n;
    if (!r.Count(&n, 4)) return false;
    std::vector<float> values(n);
    for (float& x : values) {
      if (!r.Get(&x)) return false;
    }
    samples.Assign(values);
  }
  samples.SaveTo(blob);
  return true;
}

}  // namespace

absl::Status Detector::RestoreState(std::string_view data) {
  Impl& m = *impl_;
  if (data.size() < 4 || data.substr(0, 4) != std::string_view(kMagic, 4)) {
    return absl::DataLossError("not a detector snapshot (bad magic)");
  }
  Reader r(data.substr(4));
  uint32_t version;
  if (!r.Get(&version)) return absl::DataLossError("truncated snapshot");
  if (version < kVersionOneCount || version > kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("detector snapshot version ", version, ", expected ",
                     kVersion));
  }
  // Decode everything first: a bad snapshot changes nothing.
  absl::flat_hash_map<uint32_t, std::string> series;
  uint32_t n;
  for (;;) {  // groups of records (version 1: exactly one)
    if (!r.Count(&n, kSeriesRecordBytes)) {
      return absl::DataLossError("truncated snapshot (series)");
    }
    if (n == 0 && version != kVersionOneCount) break;
    for (uint32_t i = 0; i < n; ++i) {
      std::string blob;
      if (!ReadSeriesRecord(r, version, &blob)) {
        return absl::DataLossError("corrupt snapshot (series)");
      }
      uint32_t id;
      std::memcpy(&id, blob.data(), sizeof(id));
      series[id] = std::move(blob);
    }
    if (version == kVersionOneCount) break;
  }
  absl::flat_hash_map<std::string, Profile> profiles;
  if (absl::Status read = ReadProfiles(r, &profiles); !read.ok()) return read;
  absl::flat_hash_map<std::string, Impl::PendingRun> runs;
  if (!r.Count(&n, 8 + 8 * 2 + 8 * 3 + 4 + 1)) {
    return absl::DataLossError("corrupt snapshot (runs)");
  }
  for (uint32_t i = 0; i < n; ++i) {
    std::string job, node;
    Impl::PendingRun run;
    uint8_t rewarm;
    if (!r.Str(&job) || !r.Str(&node) || !r.Get(&run.step) ||
        !r.Get(&run.run_start_step) || !r.Get(&run.interval) ||
        !r.Get(&run.busy) || !r.Get(&run.run_start_ts) ||
        !r.Get(&run.busy_frames) || !r.Get(&rewarm)) {
      return absl::DataLossError("corrupt snapshot (runs)");
    }
    run.rewarm = rewarm != 0;
    runs[PairKey(job, node)] = run;
  }
  absl::flat_hash_map<std::string, Impl::PendingJob> jobs;
  if (!r.Count(&n, 4 + 8 * 3)) return absl::DataLossError("corrupt jobs");
  for (uint32_t i = 0; i < n; ++i) {
    std::string name;
    Impl::PendingJob job;
    if (!r.Str(&name) || !r.Get(&job.run_start_ts) ||
        !r.Get(&job.last_checkpoint_ts) || !r.Get(&job.longest_stall_s)) {
      return absl::DataLossError("corrupt snapshot (jobs)");
    }
    jobs[name] = job;
  }
  if (!r.ok() || !r.done()) {
    return absl::DataLossError("corrupt snapshot (trailing bytes)");
  }
  // Apply: series already registered take their state now, the others when
  // they are registered (RegisterSeries); runs and jobs when they report.
  for (auto& [id, blob] : series) {
    if (id < m.dense_of_id.size() && m.dense_of_id[id] != kNone) {
      m.ApplySeries(m.dense_of_id[id], blob);
    } else {
      m.pending_series[id] = std::move(blob);
    }
  }
  for (auto& [name, p] : profiles) m.profiles[name] = std::move(p);
  for (auto& [key, run] : runs) m.pending_runs[key] = run;
  for (auto& [name, job] : jobs) m.pending_jobs[name] = job;
  m.pending_since = kNaN;  // waits from the next Forget on
  return absl::OkStatus();
}

bool Detector::Impl::ApplySeries(uint32_t dense, std::string_view blob) {
  Reader r(blob);
  SeriesState& s = series[dense];
  uint32_t id = 0;
  uint64_t hash = 0;
  uint8_t stage = 0;
  float widen = 1;
  double level = 0, spread = 0, start = 0, diff = 0;
  int64_t first = 0, evaluated = 0, seen = 0, early = 0;
  int32_t stride = 1;
  r.Get(&id), r.Get(&hash), r.Get(&stage), r.Get(&widen), r.Get(&level);
  r.Get(&spread), r.Get(&start), r.Get(&first), r.Get(&evaluated);
  r.Get(&seen), r.Get(&early), r.Get(&stride), r.Get(&diff);
  // The store reuses no id for another key; a mismatch means a snapshot of
  // another store: learn afresh.
  if (!r.ok() || hash != KeyHash(KeyOf(dense))) return false;
  s.stage = static_cast<Stage>(stage);
  s.widen = widen;
  s.level = level;
  s.spread = spread;
  s.learn_start_ts = start;
  s.first_step = first;
  s.evaluated = evaluated;
  s.stride = std::max(1, stride);
  s.learning.reset();
  if (!s.learned()) {
    s.learning = std::make_unique<LearnState>();
    LearnState& l = *s.learning;
    l.seen = seen;
    l.early_at = early;
    r.Samples(&l.samples);  // validated as the blob was read
  }
  if (s.aux != kNone) aux[s.aux].diff_level = diff;
  return true;
}


std::string Detector::ExportProfiles(std::string_view job) const {
  const Impl& m = *impl_;
  std::string out(kProfilesMagic, 4);
  Writer w(&out);
  w.Put<uint32_t>(kProfilesVersion);
  std::vector<std::string> names = {std::string(job)};
  if (m.family_re) {
    std::match_results<std::string_view::const_iterator> match;
    if (std::regex_match(job.begin(), job.end(), match, *m.family_re) && match.size() > 1 &&
        match[1].length() > 0)
      names.push_back(match[1].str());
  }
  std::vector<std::pair<const std::string*, const Profile*>> found;
  for (const std::string& name : names) {
    auto it = m.profiles.find(name);
    if (it != m.profiles.end()) found.emplace_back(&it->first, &it->second);
  }
  w.Put<uint32_t>(static_cast<uint32_t>(found.size()));
  for (const auto& [name, p] : found) WriteProfile(w, *name, *p);
  return out;
}

absl::Status Detector::ImportProfiles(std::string_view data) {
  if (data.size() < 8 || data.substr(0, 4) != std::string_view(kProfilesMagic, 4))
    return absl::InvalidArgumentError("not a profiles export (bad magic)");
  Reader r(data.substr(4));
  uint32_t version;
  if (!r.Get(&version) || version != kProfilesVersion)
    return absl::FailedPreconditionError("profiles export of another format version");
  absl::flat_hash_map<std::string, Profile> profiles;
  if (absl::Status read = ReadProfiles(r, &profiles); !read.ok()) return read;
  if (!r.done()) return absl::DataLossError("trailing bytes after the profiles");
  for (auto& [name, p] : profiles) impl_->profiles.try_emplace(name, std::move(p));
  return absl::OkStatus();
}

}  // namespace vigil
