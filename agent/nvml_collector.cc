#include "agent/nvml_collector.h"

#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace vigil::agent {
namespace {

using nvml::kErrorGpuIsLost;
using nvml::kErrorNotSupported;
using nvml::kSuccess;

// Readings taken with one plain NVML call each; bit positions in
// Gpu::unsupported.
enum Plain : uint32_t {
  kUtilization,
  kPower,
  kTemperature,
  kSmClock,
  kMemoryClock,
  kClockEvents,
  kMemory,
  kPcieWidth,
  kPcieGeneration,
};

constexpr uint32_t Bit(Plain p) { return uint32_t{1} << p; }

// Series filled from the batched field values.
enum FieldMetric {
  kEccSbe,
  kEccDbe,
  kNvlinkCrc,
  kNvlinkReplay,
  kNvlinkRecovery,
  kMemoryTemperature,
  kPcieReplays,
  kNvlinkTx,
  kNvlinkRx,
  kRemapPending,
  kRemapFailure,
  kFieldMetrics,
};

constexpr const char* kFieldMetricName[kFieldMetrics] = {
    "gpu_ecc_sbe_total",
    "gpu_ecc_dbe_total",
    "gpu_nvlink_crc_errors_total",
    "gpu_nvlink_replay_errors_total",
    "gpu_nvlink_recovery_errors_total",
    "gpu_memory_temperature_celsius",
    "gpu_pcie_replays_total",
    "gpu_nvlink_tx_bytes_total",
    "gpu_nvlink_rx_bytes_total",
    "gpu_remapped_rows_pending",
    "gpu_remapped_rows_failure",
};

// One requested field: a metric is the sum of its fields times `scale`
// (flags are reduced to 0/1).
struct FieldSpec {
  unsigned int id;
  unsigned int scope;
  FieldMetric metric;
  double scale;
  bool flag;
};

constexpr FieldSpec kFields[] = {
    {nvml::kFieldEccSbeVolatileTotal, 0, kEccSbe, 1, false},
    {nvml::kFieldEccDbeVolatileTotal, 0, kEccDbe, 1, false},
    {nvml::kFieldNvlinkCrcFlitTotal, 0, kNvlinkCrc, 1, false},
    {nvml::kFieldNvlinkCrcDataTotal, 0, kNvlinkCrc, 1, false},
    {nvml::kFieldNvlinkReplayTotal, 0, kNvlinkReplay, 1, false},
    {nvml::kFieldNvlinkRecoveryTotal, 0, kNvlinkRecovery, 1, false},
    {nvml::kFieldMemoryTemp, 0, kMemoryTemperature, 1, false},
    {nvml::kFieldPcieReplayCounter, 0, kPcieReplays, 1, false},
    {nvml::kFieldNvlinkThroughputDataTx, nvml::kScopeAllLinks, kNvlinkTx, 1024,
     false},
    {nvml::kFieldNvlinkThroughputDataRx, nvml::kScopeAllLinks, kNvlinkRx, 1024,
     false},
    {nvml::kFieldRemappedPending, 0, kRemapPending, 1, true},
    {nvml::kFieldRemappedFailure, 0, kRemapFailure, 1, true},
};

const FieldSpec* SpecOf(unsigned int field_id) {
  for (const FieldSpec& s : kFields) {
    if (s.id == field_id) return &s;
  }
  return nullptr;
}

// The value a successful field carries, or nullopt for a type we do not
// know.
std::optional<double> ValueOf(const nvml::FieldValue& f) {
  switch (f.value_type) {
    case nvml::kValueDouble:
      return f.value.d;
    case nvml::kValueUnsignedInt:
      return f.value.ui;
    case nvml::kValueUnsignedLong:
      return static_cast<double>(f.value.ul);
    case nvml::kValueUnsignedLongLong:
      return static_cast<double>(f.value.ull);
    case nvml::kValueSignedLongLong:
      return static_cast<double>(f.value.sll);
    case nvml::kValueSignedInt:
      return f.value.si;
    default:
      return std::nullopt;
  }
}

constexpr double kEventRetrySeconds = 1.0;

}  // namespace

// Everything that went wrong in one Collect: all messages, and the first
// code, or kUnavailable if any (a lost or missing GPU outranks the rest).
class NvmlCollector::Problems {
 public:
  void Add(const Gpu& gpu, const absl::Status& s) {
    Add(s.code(), absl::StrCat("gpu ", gpu.index, ": ", s.message()));
  }
  void Add(absl::StatusCode code, const std::string& text) {
    if (code_ == absl::StatusCode::kOk ||
        code == absl::StatusCode::kUnavailable) {
      code_ = code;
    }
    absl::StrAppend(&text_, text_.empty() ? "" : "; ", text);
  }
  absl::Status ToStatus() const { return absl::Status(code_, text_); }

 private:
  absl::StatusCode code_ = absl::StatusCode::kOk;
  std::string text_;
};

NvmlCollector::NvmlCollector(NvmlCollectorOptions options)
    : options_(std::move(options)) {}

NvmlCollector::~NvmlCollector() { Stop(); }

absl::Status NvmlCollector::Start(EventSink* events) {
  if (lib_ != nullptr) return absl::FailedPreconditionError("already started");
  absl::StatusOr<std::unique_ptr<nvml::Library>> lib =
      nvml::Library::Open(options_.library_path);
  if (!lib.ok()) return lib.status();
  lib_ = std::move(*lib);
  events_ = options_.events ? events : nullptr;
  const nvml::Api& a = lib_->api();
  const std::pair<bool, Plain> present[] = {
      {a.utilization != nullptr, kUtilization},
      {a.power_usage != nullptr, kPower},
      {a.temperature != nullptr, kTemperature},
      {a.clock_info != nullptr, kSmClock},
      {a.clock_info != nullptr, kMemoryClock},
      {a.clock_event_reasons != nullptr, kClockEvents},
      {a.memory_info != nullptr, kMemory},
      {a.pcie_link_width != nullptr, kPcieWidth},
      {a.pcie_link_generation != nullptr, kPcieGeneration}};
  for (const auto& [ok, plain] : present) {
    if (!ok) base_unsupported_ |= Bit(plain);
  }
  absl::Status s = Initialize();
  if (s.ok()) return s;
  if (options_.init_retry_seconds <= 0) {
    lib_.reset();
    return s;
  }
  init_error_ = s;
  next_init_ = options_.clock->Now() + options_.init_retry_seconds;
  Log(absl::StrCat("NVML not initialized (", s.message(), "); retrying every ",
                   options_.init_retry_seconds, " s"));
  return absl::OkStatus();
}

absl::Status NvmlCollector::Initialize() {
  VIGIL_RETURN_IF_ERROR(lib_->Init());
  unsigned int count = 0;
  VIGIL_RETURN_IF_ERROR(
      lib_->Check(lib_->api().device_count(&count), "nvmlDeviceGetCount_v2"));
  if (count == 0) return absl::NotFoundError("NVML reports no GPU");
  StartEvents();
  Problems ignored;  // Collect reports what persists
  while (gpus_.size() < count) {
    AddGpu();
    Acquire(gpus_.back(), &ignored);
  }
  initialized_ = true;
  return absl::OkStatus();
}

void NvmlCollector::StartEvents() {
  if (events_ == nullptr) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
  }
  const nvml::Api& a = lib_->api();
  if (a.event_set_create == nullptr || a.register_events == nullptr ||
      a.event_set_wait == nullptr || a.event_set_free == nullptr) {
    Log("events off: the library lacks the nvmlEventSet functions");
    return;
  }
  absl::Status s =
      lib_->Check(a.event_set_create(&event_set_), "nvmlEventSetCreate");
  if (!s.ok()) {
    event_set_ = nullptr;
    Log(absl::StrCat("events off: ", s.message()));
    return;
  }
  event_thread_ = std::thread([this] { EventLoop(); });
}

void NvmlCollector::AddGpu() {
  Gpu g;
  g.index = static_cast<unsigned int>(gpus_.size());
  g.labels = {{"gpu", std::to_string(g.index)}};
  g.unsupported = base_unsupported_;
  if (lib_->api().field_values != nullptr) {
    for (const FieldSpec& s : kFields) {
      nvml::FieldValue f{};
      f.field_id = s.id;
      f.scope_id = s.scope;
      g.fields.push_back(f);
    }
  }
  gpus_.push_back(std::move(g));
  std::lock_guard<std::mutex> l(mu_);
  watch_.emplace_back();
}

bool NvmlCollector::Acquire(Gpu& gpu, Problems* problems) {
  nvml::Device handle = nullptr;
  nvml::Return r = lib_->api().device_by_index(gpu.index, &handle);
  if (r != kSuccess) {
    absl::Status s = lib_->Check(r, "nvmlDeviceGetHandleByIndex_v2");
    if (r == kErrorGpuIsLost) SetHealth(gpu, Health::kLost, s.message());
    problems->Add(gpu, s);
    return false;
  }
  gpu.handle = handle;
  RegisterEvents(gpu);
  return true;
}

void NvmlCollector::RegisterEvents(const Gpu& gpu) {
  const nvml::Api& a = lib_->api();
  unsigned long long mask = 0;
  nvml::Return r = kErrorNotSupported;
  if (event_set_ != nullptr) {
    // Not single-bit ECC: corrected errors can come in storms, and the
    // counter is read every tick anyway.
    mask = nvml::kEventXidCritical | nvml::kEventDoubleBitEcc;
    unsigned long long supported = 0;
    if (a.supported_event_types != nullptr &&
        a.supported_event_types(gpu.handle, &supported) == kSuccess) {
      mask &= supported;
    }
    if (mask != 0) r = a.register_events(gpu.handle, mask, event_set_);
    if (r != kSuccess) {
      Log(absl::StrCat("gpu ", gpu.index, ": events not watched (",
                       lib_->Check(r, "nvmlDeviceRegisterEvents").message(),
                       ")"));
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  Watch& w = watch_[gpu.index];
  w.handle = gpu.handle;
  w.xid = r == kSuccess && (mask & nvml::kEventXidCritical) != 0;
}

absl::Status NvmlCollector::Collect(Tick* tick) {
  if (lib_ == nullptr) return absl::FailedPreconditionError("not started");
  if (!initialized_) {
    const double now = options_.clock->Now();
    if (now >= next_init_) {
      absl::Status s = Initialize();
      if (s.ok()) {
        Log(absl::StrCat("NVML initialized, ", gpus_.size(), " GPUs"));
      } else {
        init_error_ = s;
        next_init_ = now + options_.init_retry_seconds;
      }
    }
    if (!initialized_) {
      return absl::UnavailableError(
          absl::StrCat("NVML not initialized: ", init_error_.message()));
    }
  }
  unsigned int count = 0;
  VIGIL_RETURN_IF_ERROR(
      lib_->Check(lib_->api().device_count(&count), "nvmlDeviceGetCount_v2"));
  Problems problems;
  while (gpus_.size() < count) {
    AddGpu();
    Log(absl::StrCat("gpu ", gpus_.back().index, " appeared"));
    Acquire(gpus_.back(), &problems);
  }
  for (Gpu& g : gpus_) {
    if (g.index >= count) {
      const std::string why = absl::StrCat("NVML reports ", count, " GPUs");
      SetHealth(g, Health::kMissing, why);
      problems.Add(absl::StatusCode::kUnavailable,
                   absl::StrCat("gpu ", g.index, ": missing, ", why));
      g.handle = nullptr;
      continue;
    }
    if (g.handle == nullptr && !Acquire(g, &problems)) continue;
    const size_t mark = tick->samples.size();
    if (const char* call = ReadGpu(g, tick, &problems)) {
      tick->samples.erase(tick->samples.begin() + mark, tick->samples.end());
      g.handle = nullptr;
      absl::Status lost = lib_->Check(kErrorGpuIsLost, call);
      SetHealth(g, Health::kLost, lost.message());
      problems.Add(g, lost);
      continue;
    }
    SetHealth(g, Health::kReadable, "");
  }
  return problems.ToStatus();
}

const char* NvmlCollector::ReadGpu(Gpu& g, Tick* tick, Problems* problems) {
  const nvml::Api& a = lib_->api();
  const char* lost = nullptr;
  // Runs `call` unless the reading is known unsupported or the GPU lost,
  // then `emit` on success.
  auto read = [&](Plain which, const char* name, auto&& call, auto&& emit) {
    if (lost != nullptr || (g.unsupported & Bit(which)) != 0) return;
    const nvml::Return r = call();
    if (r == kSuccess) {
      emit();
    } else if (r == kErrorGpuIsLost) {
      lost = name;
    } else if (r == kErrorNotSupported) {
      g.unsupported |= Bit(which);
    } else {
      problems->Add(g, lib_->Check(r, name));
    }
  };
  auto add = [&](const char* metric, double value) {
    tick->Add(metric, g.labels, value);
  };
  nvml::Device d = g.handle;
  nvml::Utilization util{};
  read(
      kUtilization, "nvmlDeviceGetUtilizationRates",
      [&] { return a.utilization(d, &util); },
      [&] { add("gpu_utilization_ratio", util.gpu / 100.0); });
  unsigned int u = 0;
  read(
      kPower, "nvmlDeviceGetPowerUsage", [&] { return a.power_usage(d, &u); },
      [&] { add("gpu_power_watts", u / 1000.0); });
  read(
      kTemperature, "nvmlDeviceGetTemperature",
      [&] { return a.temperature(d, nvml::kTemperatureGpu, &u); },
      [&] { add("gpu_temperature_celsius", u); });
  read(
      kSmClock, "nvmlDeviceGetClockInfo",
      [&] { return a.clock_info(d, nvml::kClockSm, &u); },
      [&] { add("gpu_sm_clock_mhz", u); });
  read(
      kMemoryClock, "nvmlDeviceGetClockInfo",
      [&] { return a.clock_info(d, nvml::kClockMem, &u); },
      [&] { add("gpu_memory_clock_mhz", u); });
  unsigned long long reasons = 0;
  read(
      kClockEvents, "nvmlDeviceGetCurrentClocksEventReasons",
      [&] { return a.clock_event_reasons(d, &reasons); },
      [&] { add("gpu_throttle_reasons", static_cast<double>(reasons)); });
  nvml::Memory mem{};
  read(
      kMemory, "nvmlDeviceGetMemoryInfo",
      [&] { return a.memory_info(d, &mem); },
      [&] {
        add("gpu_memory_used_bytes", static_cast<double>(mem.used));
        add("gpu_memory_total_bytes", static_cast<double>(mem.total));
      });
  read(
      kPcieWidth, "nvmlDeviceGetCurrPcieLinkWidth",
      [&] { return a.pcie_link_width(d, &u); },
      [&] { add("gpu_pcie_link_width", u); });
  read(
      kPcieGeneration, "nvmlDeviceGetCurrPcieLinkGeneration",
      [&] { return a.pcie_link_generation(d, &u); },
      [&] { add("gpu_pcie_link_generation", u); });
  if (lost == nullptr) lost = ReadFields(g, tick, problems);
  if (lost == nullptr) {
    std::lock_guard<std::mutex> l(mu_);
    const Watch& w = watch_[g.index];
    if (w.xid) {
      add("gpu_xid_errors_total", static_cast<double>(w.xid_count));
      add("gpu_xid_last", static_cast<double>(w.xid_last));
    }
  }
  return lost;
}

const char* NvmlCollector::ReadFields(Gpu& g, Tick* tick, Problems* problems) {
  static constexpr char kCall[] = "nvmlDeviceGetFieldValues";
  if (g.fields.empty()) return nullptr;
  const nvml::Return r = lib_->api().field_values(
      g.handle, static_cast<int>(g.fields.size()), g.fields.data());
  if (r == kErrorGpuIsLost) return kCall;
  if (r == kErrorNotSupported) {
    g.fields.clear();
    return nullptr;
  }
  if (r != kSuccess) {
    problems->Add(g, lib_->Check(r, kCall));
    return nullptr;
  }
  enum State : char { kNone, kRead, kFailed };
  double sum[kFieldMetrics] = {};
  State state[kFieldMetrics] = {};
  bool drop = false;
  for (const nvml::FieldValue& f : g.fields) {
    const FieldSpec* spec = SpecOf(f.field_id);
    if (f.result == kErrorGpuIsLost) return kCall;
    if (f.result == kErrorNotSupported) {
      drop = true;
      continue;
    }
    State& st = state[spec->metric];
    std::optional<double> v;
    if (f.result == kSuccess) v = ValueOf(f);
    if (!v.has_value()) {
      problems->Add(
          g, f.result == kSuccess
                 ? absl::InternalError(absl::StrCat("field ", f.field_id,
                                                    " has unknown value type ",
                                                    f.value_type))
                 : lib_->Check(f.result, absl::StrCat("field ", f.field_id)));
      st = kFailed;
      continue;
    }
    if (spec->flag) v = *v != 0 ? 1 : 0;
    sum[spec->metric] += *v * spec->scale;
    if (st == kNone) st = kRead;
  }
  if (drop) {
    std::erase_if(g.fields, [](const nvml::FieldValue& f) {
      return f.result == kErrorNotSupported;
    });
  }
  for (int m = 0; m < kFieldMetrics; ++m) {
    if (state[m] == kRead) tick->Add(kFieldMetricName[m], g.labels, sum[m]);
  }
  return nullptr;
}

void NvmlCollector::SetHealth(Gpu& gpu, Health health, absl::string_view why) {
  if (gpu.health == health) return;
  switch (health) {
    case Health::kReadable:
      Log(absl::StrCat("gpu ", gpu.index, " is readable again"));
      break;
    case Health::kLost:
      Log(absl::StrCat("gpu ", gpu.index, " lost (", why,
                       "); its samples stop"));
      break;
    case Health::kMissing:
      Log(absl::StrCat("gpu ", gpu.index, " missing (", why,
                       "); its samples stop"));
      break;
  }
  gpu.health = health;
}

void NvmlCollector::EventLoop() {
  const nvml::Api& a = lib_->api();
  bool failing = false;
  while (true) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
    nvml::EventData event{};
    const nvml::Return r =
        a.event_set_wait(event_set_, &event, options_.event_wait_ms);
    if (r == kSuccess) {
      failing = false;
      HandleEvent(event);
      continue;
    }
    if (r == nvml::kErrorTimeout) continue;
    if (!failing) {
      Log(absl::StrCat("waiting for events failed (",
                       lib_->Check(r, "nvmlEventSetWait_v2").message(),
                       "); retrying every ", kEventRetrySeconds, " s"));
    }
    failing = true;
    std::unique_lock<std::mutex> l(mu_);
    const double until = options_.clock->Now() + kEventRetrySeconds;
    while (!stop_ && options_.clock->Now() < until) {
      options_.clock->WaitUntil(l, stop_cv_, until);
    }
  }
}

void NvmlCollector::HandleEvent(const nvml::EventData& event) {
  Tick t;
  t.ts = options_.clock->Now();
  std::vector<Label> labels;
  {
    std::lock_guard<std::mutex> l(mu_);
    size_t i = 0;
    while (i < watch_.size() && watch_[i].handle != event.device) ++i;
    if (i == watch_.size()) return;
    labels = {{"gpu", std::to_string(i)}};
    if ((event.type & nvml::kEventXidCritical) != 0) {
      Watch& w = watch_[i];
      ++w.xid_count;
      w.xid_last = event.data;
      t.Add("gpu_xid_errors_total", labels, static_cast<double>(w.xid_count));
      t.Add("gpu_xid_last", labels, static_cast<double>(w.xid_last));
    }
  }
  const nvml::Api& a = lib_->api();
  if ((event.type & nvml::kEventDoubleBitEcc) != 0 &&
      a.field_values != nullptr) {
    nvml::FieldValue ecc[2] = {};
    ecc[0].field_id = nvml::kFieldEccSbeVolatileTotal;
    ecc[1].field_id = nvml::kFieldEccDbeVolatileTotal;
    if (a.field_values(event.device, 2, ecc) == kSuccess) {
      for (const nvml::FieldValue& f : ecc) {
        std::optional<double> v;
        if (f.result == kSuccess) v = ValueOf(f);
        if (v.has_value()) {
          t.Add(kFieldMetricName[SpecOf(f.field_id)->metric], labels, *v);
        }
      }
    }
  }
  if (!t.samples.empty()) events_->Deliver(std::move(t));
}

void NvmlCollector::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (event_thread_.joinable()) event_thread_.join();
  if (event_set_ != nullptr) {
    lib_->api().event_set_free(event_set_);
    event_set_ = nullptr;
  }
}

void NvmlCollector::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "vigil-agent: nvml: %s\n", line.c_str());
  }
}

}  // namespace vigil::agent
