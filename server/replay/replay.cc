#include "server/replay/replay.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/series_key.h"
#include "detector/frame.h"
#include "nlohmann/json.hpp"
#include "rules/incident_json.h"
#include "rules/pipeline.h"
#include "simdjson.h"

namespace vigil {
namespace {

// One (job, node): its series ids by "metric\0gpu\0dev", and the time of
// its last accepted frame.
struct NodeTable {
  std::string job;
  std::string node;
  absl::flat_hash_map<std::string, uint32_t> ids;
  double last_ts = -std::numeric_limits<double>::infinity();
};

// The double a sample's "v" holds: a number or "nan", "inf", "-inf".
std::optional<double> SampleValue(simdjson::dom::element v) {
  double d;
  if (v.get_double().get(d) == simdjson::SUCCESS) return d;
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

// The output line of an update that opened, raised or reopened an
// incident; "" for other updates. `step` is the step of the frame being
// replayed.
std::string UpdateLine(const IncidentUpdate& u, std::optional<int64_t> step) {
  const char* event = nullptr;
  switch (u.type) {
    case UpdateType::kOpened:
      return IncidentToJson(u.incident).dump() + "\n";
    case UpdateType::kSeverityRaised:
      event = "severity_raised";
      break;
    case UpdateType::kReopened:
      event = "reopened";
      break;
    case UpdateType::kEvidenceAdded:
    case UpdateType::kResolved:
      return "";
  }
  nlohmann::json j = IncidentToJson(u.incident);
  j["event"] = event;
  j["first_ts"] = j["ts"];
  j["first_step"] = j["step"];
  j["ts"] = u.ts;
  j["step"] = step ? nlohmann::json(*step) : nlohmann::json(nullptr);
  return j.dump() + "\n";
}

}  // namespace

struct Replayer::Impl {
  Impl(ReplayOptions o, ReplaySink s)
      : options(std::move(o)),
        sink(std::move(s)),
        pipeline(options.detector, options.rules) {}

  // Parses, checks and replays one complete line (no newline); reports it
  // if bad.
  void Line(std::string_view line);
  // Parses `line` into the frame scratch, registering new series. Returns
  // "" or why the line is bad.
  std::string Parse(std::string_view line);
  // Parses a frame's "job_end" into end_job/end_step/end_reason; "" or why
  // it is bad. Out of line: rare, and kept out of Parse's hot loop.
  std::string ParseJobEnd(simdjson::dom::element value);
  // The series id of a sample of `table`, registering it on first sight.
  absl::StatusOr<uint32_t> SeriesId(NodeTable* table, std::string_view metric,
                                    std::optional<int64_t> gpu,
                                    std::string_view dev);

  ReplayOptions options;
  ReplaySink sink;
  DetectionPipeline pipeline;
  ReplayStats stats;

  // A partial line carried between Feed calls; `overlong` while the rest
  // of a too-long line is being skipped.
  std::string pending;
  bool overlong = false;

  simdjson::dom::parser parser;
  std::unique_ptr<char[]> padded;  // the line, with simdjson's padding
  size_t padded_capacity = 0;

  std::vector<std::unique_ptr<NodeTable>> tables;
  absl::flat_hash_map<std::string, NodeTable*> table_of;  // "job\0node"
  std::string scratch_key;
  // Per series id: the frame number that last carried it (duplicates), and
  // its key (the detector forgets series of jobs that ended long ago; a
  // resumed job's series are registered again).
  std::vector<int64_t> seen_in_line;
  std::vector<SeriesKey> keys;
  uint32_t next_id = 0;
  double newest_ts = -std::numeric_limits<double>::infinity();

  // The frame being parsed.
  NodeTable* table = nullptr;
  double ts = 0;
  std::optional<int64_t> step;
  std::string_view end_job, end_reason;
  std::optional<int64_t> end_step;
  std::vector<uint32_t> ids;
  std::vector<double> values;
  std::vector<IncidentUpdate> updates;
};

absl::StatusOr<uint32_t> Replayer::Impl::SeriesId(NodeTable* t,
                                                  std::string_view metric,
                                                  std::optional<int64_t> gpu,
                                                  std::string_view dev) {
  scratch_key.assign(metric);
  scratch_key.push_back('\0');
  if (gpu) absl::StrAppend(&scratch_key, *gpu);
  scratch_key.push_back('\0');
  scratch_key.append(dev);
  auto it = t->ids.find(scratch_key);
  if (it != t->ids.end()) return it->second;

  SeriesKey key;
  key.metric = std::string(metric);
  key.labels = {{"job", t->job}, {"node", t->node}};
  if (gpu) key.labels.push_back({"gpu", absl::StrCat(*gpu)});
  if (!dev.empty()) key.labels.push_back({"dev", std::string(dev)});
  if (absl::Status s = NormalizeSeriesKey(&key); !s.ok()) return s;
  if (absl::Status s = pipeline.RegisterSeries(next_id, key); !s.ok()) {
    return s;
  }
  const uint32_t id = next_id++;
  t->ids.emplace(scratch_key, id);
  seen_in_line.push_back(-1);
  keys.push_back(std::move(key));
  ++stats.series;
  return id;
}

__attribute__((noinline)) std::string Replayer::Impl::ParseJobEnd(
    simdjson::dom::element value) {
  if (value.is_null()) return "";
  simdjson::dom::object end;
  if (value.get_object().get(end)) return "\"job_end\" must be an object";
  for (auto [ek, ev] : end) {
    if (ek == "job") {
      if (ev.get_string().get(end_job) || end_job.empty()) {
        return "\"job_end.job\" must be a non-empty string";
      }
    } else if (ek == "step") {
      if (ev.is_null()) continue;
      int64_t s;
      if (ev.get_int64().get(s)) return "\"job_end.step\" must be an integer";
      end_step = s;
    } else if (ek == "reason") {
      if (ev.is_null()) continue;
      if (ev.get_string().get(end_reason)) {
        return "\"job_end.reason\" must be a string";
      }
    }
  }
  if (end_job.empty()) return "\"job_end\" needs \"job\"";
  if (end_job.size() > kMaxLabelValueLength) {
    return absl::StrCat("\"job_end.job\" must be at most ",
                        kMaxLabelValueLength, " bytes");
  }
  return "";
}

std::string Replayer::Impl::Parse(std::string_view line) {
  using simdjson::dom::element;
  using simdjson::dom::element_type;
  if (padded_capacity < line.size() + simdjson::SIMDJSON_PADDING) {
    padded_capacity = 2 * line.size() + simdjson::SIMDJSON_PADDING;
    padded = std::make_unique<char[]>(padded_capacity);
  }
  std::memcpy(padded.get(), line.data(), line.size());
  std::memset(padded.get() + line.size(), 0, simdjson::SIMDJSON_PADDING);
  element doc;
  if (auto err = parser.parse(padded.get(), line.size(), false).get(doc)) {
    return absl::StrCat("invalid JSON: ", simdjson::error_message(err));
  }
  simdjson::dom::object obj;
  if (doc.get_object().get(obj)) return "not a JSON object";

  std::optional<double> frame_ts;
  std::string_view node, job;
  bool has_node = false, has_job = false;
  std::optional<simdjson::dom::array> samples;
  step.reset();
  end_job = end_reason = {};
  end_step.reset();
  for (auto [key, value] : obj) {
    if (key == "ts") {
      double d;
      if (value.get_double().get(d) || !std::isfinite(d)) {
        return "\"ts\" must be a finite number";
      }
      frame_ts = d;
    } else if (key == "node") {
      if (value.get_string().get(node) || node.empty()) {
        return "\"node\" must be a non-empty string";
      }
      has_node = true;
    } else if (key == "job") {
      if (value.get_string().get(job) || job.empty()) {
        return "\"job\" must be a non-empty string";
      }
      has_job = true;
    } else if (key == "step") {
      if (value.is_null()) continue;
      int64_t s;
      if (value.get_int64().get(s)) return "\"step\" must be an integer";
      step = s;
    } else if (key == "samples") {
      simdjson::dom::array a;
      if (value.get_array().get(a)) return "\"samples\" must be an array";
      samples = a;
    } else if (key == "job_end") {
      if (std::string e = ParseJobEnd(value); !e.empty()) return e;
    }
  }
  if (!frame_ts) return "missing \"ts\"";
  if (!has_node) return "missing \"node\"";
  if (!has_job) return "missing \"job\"";
  if (!samples) return "missing \"samples\"";
  if (node.size() > kMaxLabelValueLength || job.size() > kMaxLabelValueLength) {
    return absl::StrCat("\"node\" and \"job\" must be at most ",
                        kMaxLabelValueLength, " bytes");
  }
  ts = *frame_ts;

  scratch_key.assign(job);
  scratch_key.push_back('\0');
  scratch_key.append(node);
  auto tit = table_of.find(scratch_key);
  if (tit == table_of.end()) {
    auto t = std::make_unique<NodeTable>();
    t->job = std::string(job);
    t->node = std::string(node);
    tit = table_of.emplace(scratch_key, t.get()).first;
    tables.push_back(std::move(t));
  }
  table = tit->second;

  ids.clear();
  values.clear();
  const int64_t line_no = stats.lines;
  size_t index = 0;
  for (element sample : *samples) {
    const size_t i = index++;
    auto where = [i] { return absl::StrCat("samples[", i, "]"); };
    simdjson::dom::object so;
    if (sample.get_object().get(so)) return where() + " must be an object";
    std::string_view metric, dev;
    bool has_metric = false;
    std::optional<int64_t> gpu;
    std::optional<double> value;
    bool has_value = false;
    for (auto [key, v] : so) {
      if (key == "m") {
        if (v.get_string().get(metric)) return where() + ".m must be a string";
        has_metric = true;
      } else if (key == "v") {
        value = SampleValue(v);
        if (!value) {
          return where() + ".v must be a number or \"nan\", \"inf\", \"-inf\"";
        }
        has_value = true;
      } else if (key == "gpu") {
        if (v.is_null()) continue;
        int64_t g;
        if (v.get_int64().get(g) || g < 0) {
          return where() + ".gpu must be a non-negative integer";
        }
        gpu = g;
      } else if (key == "dev") {
        if (v.is_null()) continue;
        if (v.get_string().get(dev) || dev.empty()) {
          return where() + ".dev must be a non-empty string";
        }
      }
    }
    if (!has_metric) return where() + ": missing \"m\"";
    if (!has_value) return where() + ": missing \"v\"";
    absl::StatusOr<uint32_t> id = SeriesId(table, metric, gpu, dev);
    if (!id.ok()) return absl::StrCat(where(), ": ", id.status().message());
    if (seen_in_line[*id] == line_no) {
      return absl::StrCat(where(), ": the same series is given twice");
    }
    seen_in_line[*id] = line_no;
    ids.push_back(*id);
    values.push_back(*value);
  }
  if (ts < newest_ts - options.max_ts_regression_s) {
    return absl::StrFormat("ts %.3f is more than %g s before an earlier "
                           "frame's %.3f",
                           ts, options.max_ts_regression_s, newest_ts);
  }
  if (ts <= table->last_ts) {
    return absl::StrFormat("ts %.3f is not after node %s's previous frame "
                           "at %.3f",
                           ts, table->node, table->last_ts);
  }
  return "";
}

void Replayer::Impl::Line(std::string_view line) {
  ++stats.lines;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string reason = line.empty() ? "empty line" : Parse(line);
  if (!reason.empty()) {
    ++stats.bad_lines;
    if (sink.bad_line) sink.bad_line(stats.lines, reason);
    return;
  }
  table->last_ts = ts;
  newest_ts = std::max(newest_ts, ts);
  ++stats.frames;
  stats.samples += static_cast<int64_t>(ids.size());
  for (uint32_t id : ids) {
    if (!pipeline.HasSeries(id)) (void)pipeline.RegisterSeries(id, keys[id]);
  }
  FrameView frame;
  frame.node = table->node;
  frame.job = table->job;
  frame.step = step;
  frame.ts = ts;
  frame.ids = ids;
  frame.values = values;
  frame.job_end.job = end_job;
  frame.job_end.step = end_step;
  frame.job_end.reason = end_reason;
  updates.clear();
  pipeline.ProcessFrame(frame, &updates);
  for (const IncidentUpdate& u : updates) {
    if (u.type == UpdateType::kOpened) ++stats.incidents;
    if (u.type == UpdateType::kSeverityRaised) ++stats.severity_rises;
    if (u.type == UpdateType::kReopened) ++stats.reopens;
    std::string out = UpdateLine(u, step);
    if (!out.empty() && sink.write) sink.write(out);
  }
}

Replayer::Replayer(ReplayOptions options, ReplaySink sink)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(sink))) {}

Replayer::~Replayer() = default;

void Replayer::Feed(std::string_view chunk) {
  Impl& m = *impl_;
  while (!chunk.empty()) {
    const size_t nl = chunk.find('\n');
    const std::string_view part = chunk.substr(0, nl);
    if (!m.overlong) {
      if (m.pending.size() + part.size() > m.options.max_line_bytes) {
        m.overlong = true;
        m.pending.clear();
      } else if (nl != std::string_view::npos && m.pending.empty()) {
        m.Line(part);  // the common case: no copy into `pending`
      } else {
        m.pending.append(part);
        if (nl != std::string_view::npos) {
          m.Line(m.pending);
          m.pending.clear();
        }
      }
    }
    if (nl == std::string_view::npos) return;
    if (m.overlong) {
      ++m.stats.lines;
      ++m.stats.bad_lines;
      if (m.sink.bad_line) {
        m.sink.bad_line(m.stats.lines,
                        absl::StrCat("longer than ", m.options.max_line_bytes,
                                     " bytes"));
      }
      m.overlong = false;
    }
    chunk.remove_prefix(nl + 1);
  }
}

void Replayer::Finish() {
  Impl& m = *impl_;
  if (m.overlong) {
    Feed("\n");
  } else if (!m.pending.empty()) {
    std::string last = std::move(m.pending);
    m.pending.clear();
    m.Line(last);
  }
}

ReplayStats Replayer::stats() const { return impl_->stats; }

absl::StatusOr<ReplayStats> ReplayStream(std::FILE* in, std::FILE* out,
                                         std::FILE* errors,
                                         const ReplayOptions& options) {
  bool write_failed = false;
  ReplaySink sink;
  sink.write = [out, &write_failed](std::string_view line) {
    if (std::fwrite(line.data(), 1, line.size(), out) != line.size()) {
      write_failed = true;
    }
  };
  sink.bad_line = [errors](int64_t line, std::string_view reason) {
    std::fprintf(errors, "line %lld: %.*s\n", static_cast<long long>(line),
                 static_cast<int>(reason.size()), reason.data());
  };
  Replayer replayer(options, std::move(sink));
  std::vector<char> buf(4 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
    replayer.Feed(std::string_view(buf.data(), n));
    if (write_failed) return absl::DataLossError("cannot write the output");
  }
  if (std::ferror(in)) return absl::DataLossError("cannot read the input");
  replayer.Finish();
  if (write_failed || std::fflush(out) != 0 || std::ferror(out)) {
    return absl::DataLossError("cannot write the output");
  }
  return replayer.stats();
}

}  // namespace vigil
