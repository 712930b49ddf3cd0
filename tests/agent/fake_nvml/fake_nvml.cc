// A stand-in for the driver's libnvidia-ml.so.1: exports the NVML entry
// points vigil-agent calls, with GPUs whose readings, failures, losses and
// events tests script through the fake_nvml_* functions below (reached by
// dlopen'ing the same file, hence the same state). Thread-safe: one mutex.
//
// Declarations are written from the NVML ABI, independently of
// agent/nvml.h, so that a layout mistake there shows up as a test failure.
//
// Unscripted, with FAKE_NVML_GPUS=N in the environment, it presents N
// healthy H100-like GPUs whose NVLink and PCIe counters grow on every read
// (for benchmarks and demos). Any fake_nvml_* call makes it scripted.
//
// Variants: FAKE_NVML_LEGACY leaves out nvmlDeviceGetFieldValues,
// nvmlDeviceGetCurrentClocksEventReasons and the event functions (an old
// driver); FAKE_NVML_BROKEN leaves out nvmlDeviceGetCount_v2.
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// --- NVML ABI ---------------------------------------------------------------
typedef int nvmlReturn_t;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;

struct FakeDevice {
  int index;
};
typedef FakeDevice* nvmlDevice_t;
struct FakeEventSet;
typedef FakeEventSet* nvmlEventSet_t;

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
};
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
static_assert(offsetof(nvmlFieldValue_t, timestamp) == 8);
static_assert(offsetof(nvmlFieldValue_t, valueType) == 24);
static_assert(offsetof(nvmlFieldValue_t, nvmlReturn) == 28);
static_assert(sizeof(nvmlFieldValue_t) == 40);
constexpr int NVML_VALUE_TYPE_DOUBLE = 0;
constexpr int NVML_VALUE_TYPE_UNSIGNED_INT = 1;
constexpr int NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(offsetof(nvmlEventData_t, eventType) == 8);
static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24);
static_assert(sizeof(nvmlEventData_t) == 32);
constexpr unsigned long long kSupportedEvents = 0x1 | 0x2 | 0x4 | 0x8;

// Field ids the fake knows, and their value types.
constexpr unsigned int kFieldMemoryTemp = 82;
constexpr unsigned int kFieldPcieReplays = 94;
constexpr unsigned int kFieldNvlinkTx = 138;
constexpr unsigned int kFieldNvlinkRx = 139;
constexpr unsigned int kFieldRemapPending = 144;
constexpr unsigned int kFieldRemapFailure = 145;
// ECC SBE/DBE volatile, NVLink CRC flit/data, replay, recovery totals, HBM
// temperature, PCIe replays, NVLink TX/RX, remap pending/failure.
constexpr unsigned int kKnownFields[] = {3,  4,  38,  45,  52,  59,
                                         82, 94, 138, 139, 144, 145};

// --- State ------------------------------------------------------------------
constexpr int kMaxGpus = 64;

struct Gpu {
  bool lost = false;
  std::map<std::string, double> values;
  std::map<unsigned int, double> fields;
  std::map<unsigned int, int> field_fails;  // field id -> nvmlReturn
};

struct Event {
  int gpu;
  unsigned long long type;
  unsigned long long data;
};

struct FakeEventSet {
  unsigned long long registered[kMaxGpus] = {};
  std::deque<Event> queue;
};

const char* const kValueNames[] = {
    "utilization_gpu",     "utilization_memory", "power_mw",
    "temperature",         "sm_clock_mhz",       "memory_clock_mhz",
    "clock_event_reasons", "memory_used",        "memory_total",
    "pcie_width",          "pcie_generation",    "event_types"};

Gpu HealthyGpu(int index) {
  Gpu g;
  g.values = {{"utilization_gpu", 97},
              {"utilization_memory", 40},
              {"power_mw", 650000},
              {"temperature", 60.0 + index},
              {"sm_clock_mhz", 1980},
              {"memory_clock_mhz", 2619},
              {"clock_event_reasons", 0},
              {"memory_used", 60.0 * (1ull << 30)},
              {"memory_total", 81559.0 * (1ull << 20)},
              {"pcie_width", 16},
              {"pcie_generation", 5},
              {"event_types", static_cast<double>(kSupportedEvents)}};
  for (unsigned int id : kKnownFields) g.fields[id] = 0;
  g.fields[kFieldMemoryTemp] = 70;
  return g;
}

struct State {
  std::mutex mu;
  std::condition_variable events_cv;
  bool scripted = false;
  bool configured = false;  // defaults applied (scripted or from env)
  bool growing = false;     // FAKE_NVML_GPUS: counters grow per read
  int init_count = 0;
  int device_count = 0;
  FakeDevice devices[kMaxGpus];
  Gpu gpus[kMaxGpus];
  // function -> gpu (-1: any) -> nvmlReturn to answer
  std::map<std::string, std::map<int, int>> fails;
  std::map<std::string, long> calls;
  std::map<unsigned int, long> field_reads;
  std::vector<std::unique_ptr<FakeEventSet>> sets;

  State() {
    for (int i = 0; i < kMaxGpus; ++i) devices[i].index = i;
  }

  // Restores every GPU to healthy and forgets scripts, counters and sets.
  void Reset(int count) {
    init_count = 0;
    device_count = count;
    for (int i = 0; i < kMaxGpus; ++i) gpus[i] = HealthyGpu(i);
    fails.clear();
    calls.clear();
    field_reads.clear();
    sets.clear();
    configured = true;
  }

  // Applies FAKE_NVML_GPUS on first use unless a test scripted the fake.
  void Configure() {
    if (configured) return;
    const char* env = std::getenv("FAKE_NVML_GPUS");
    const int n = env ? std::atoi(env) : 0;
    Reset(n < 0 ? 0 : (n > kMaxGpus ? kMaxGpus : n));
    growing = n > 0;
  }

  // Marks the fake scripted (its first control call resets it).
  void Script() {
    if (!scripted) {
      scripted = true;
      growing = false;
      Reset(0);
    }
  }

  int GpuOf(nvmlDevice_t d) const {
    if (d < devices || d >= devices + kMaxGpus) return -1;
    return d->index;
  }

  // Counts a call of `fn` and returns what it must answer before doing
  // anything: not initialized, a scripted failure, a bad or lost device.
  nvmlReturn_t Enter(const char* fn, int gpu, bool needs_gpu) {
    Configure();
    ++calls[fn];
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (needs_gpu && (gpu < 0 || gpu >= device_count)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    auto f = fails.find(fn);
    if (f != fails.end()) {
      auto g = f->second.find(gpu);
      if (g == f->second.end()) g = f->second.find(-1);
      if (g != f->second.end()) return g->second;
    }
    if (needs_gpu && gpus[gpu].lost) return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
  }

  double Value(int gpu, const char* name) { return gpus[gpu].values[name]; }
};

// Destroyed when the library is unloaded, so that nothing it holds looks
// leaked once its memory is gone.
State& S() {
  static State state;
  return state;
}

// Runs the common prologue of a device call; returns early on failure.
#define ENTER_DEVICE(fn, device)          \
  State& s = S();                         \
  std::lock_guard<std::mutex> lock(s.mu); \
  const int gpu = s.GpuOf(device);        \
  if (nvmlReturn_t r = s.Enter(fn, gpu, true); r != NVML_SUCCESS) return r

}  // namespace

// --- NVML entry points ------------------------------------------------------

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Configure();
  ++s.calls["nvmlInit_v2"];
  auto f = s.fails.find("nvmlInit_v2");
  if (f != s.fails.end() && f->second.count(-1)) return f->second[-1];
  ++s.init_count;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = s.Enter("nvmlShutdown", -1, false); r != NVML_SUCCESS) {
    return r;
  }
  --s.init_count;
  return NVML_SUCCESS;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 9:
      return "Driver Not Loaded";
    case 10:
      return "Timeout";
    case 15:
      return "GPU is lost";
    case 18:
      return "RM has detected an NVML/RM version mismatch.";
    default:
      return "Unknown Error";
  }
}

#ifndef FAKE_NVML_BROKEN
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = s.Enter("nvmlDeviceGetCount_v2", -1, false);
      r != NVML_SUCCESS) {
    return r;
  }
  *count = static_cast<unsigned int>(s.device_count);
  return NVML_SUCCESS;
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                       nvmlDevice_t* device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const int gpu = index < kMaxGpus ? static_cast<int>(index) : INT_MAX;
  if (nvmlReturn_t r = s.Enter("nvmlDeviceGetHandleByIndex_v2", gpu, true);
      r != NVML_SUCCESS) {
    return r;
  }
  *device = &s.devices[gpu];
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                       nvmlUtilization_t* out) {
  ENTER_DEVICE("nvmlDeviceGetUtilizationRates", device);
  out->gpu = static_cast<unsigned int>(s.Value(gpu, "utilization_gpu"));
  out->memory = static_cast<unsigned int>(s.Value(gpu, "utilization_memory"));
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device,
                                                 unsigned int* mw) {
  ENTER_DEVICE("nvmlDeviceGetPowerUsage", device);
  *mw = static_cast<unsigned int>(s.Value(gpu, "power_mw"));
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                  int sensor,
                                                  unsigned int* celsius) {
  ENTER_DEVICE("nvmlDeviceGetTemperature", device);
  if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
  *celsius = static_cast<unsigned int>(s.Value(gpu, "temperature"));
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type,
                                                unsigned int* mhz) {
  ENTER_DEVICE("nvmlDeviceGetClockInfo", device);
  if (type == 1) {
    *mhz = static_cast<unsigned int>(s.Value(gpu, "sm_clock_mhz"));
  } else if (type == 2) {
    *mhz = static_cast<unsigned int>(s.Value(gpu, "memory_clock_mhz"));
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_LEGACY
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(
    nvmlDevice_t device, unsigned long long* reasons) {
  ENTER_DEVICE("nvmlDeviceGetCurrentClocksEventReasons", device);
  *reasons =
      static_cast<unsigned long long>(s.Value(gpu, "clock_event_reasons"));
  return NVML_SUCCESS;
}
#endif

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(
    nvmlDevice_t device, unsigned long long* reasons) {
  ENTER_DEVICE("nvmlDeviceGetCurrentClocksThrottleReasons", device);
  *reasons =
      static_cast<unsigned long long>(s.Value(gpu, "clock_event_reasons"));
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                 nvmlMemory_t* out) {
  ENTER_DEVICE("nvmlDeviceGetMemoryInfo", device);
  out->total = static_cast<unsigned long long>(s.Value(gpu, "memory_total"));
  out->used = static_cast<unsigned long long>(s.Value(gpu, "memory_used"));
  out->free = out->total - out->used;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device,
                                                        unsigned int* width) {
  ENTER_DEVICE("nvmlDeviceGetCurrPcieLinkWidth", device);
  *width = static_cast<unsigned int>(s.Value(gpu, "pcie_width"));
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(
    nvmlDevice_t device, unsigned int* generation) {
  ENTER_DEVICE("nvmlDeviceGetCurrPcieLinkGeneration", device);
  *generation = static_cast<unsigned int>(s.Value(gpu, "pcie_generation"));
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_LEGACY
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device,
                                                  int count,
                                                  nvmlFieldValue_t* values) {
  ENTER_DEVICE("nvmlDeviceGetFieldValues", device);
  if (count <= 0 || values == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Gpu& g = s.gpus[gpu];
  if (s.growing) {
    g.fields[kFieldNvlinkTx] += 20e6;  // KiB: ~20 GB per read
    g.fields[kFieldNvlinkRx] += 20e6;
  }
  for (int i = 0; i < count; ++i) {
    nvmlFieldValue_t& v = values[i];
    ++s.field_reads[v.fieldId];
    v.timestamp = 0;
    v.latencyUsec = 0;
    auto fail = g.field_fails.find(v.fieldId);
    auto known = g.fields.find(v.fieldId);
    const bool per_link =
        v.fieldId == kFieldNvlinkTx || v.fieldId == kFieldNvlinkRx;
    if (fail != g.field_fails.end()) {
      v.nvmlReturn = fail->second;
    } else if (known == g.fields.end()) {
      v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    } else if (per_link && v.scopeId != UINT_MAX) {
      v.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;  // the fake has no links
    } else if (v.fieldId == kFieldMemoryTemp ||
               v.fieldId == kFieldRemapPending ||
               v.fieldId == kFieldRemapFailure) {
      v.nvmlReturn = NVML_SUCCESS;
      v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
      v.value.uiVal = static_cast<unsigned int>(known->second);
    } else if (v.fieldId == kFieldPcieReplays) {
      v.nvmlReturn = NVML_SUCCESS;
      v.valueType = NVML_VALUE_TYPE_DOUBLE;  // exercises another type
      v.value.dVal = known->second;
    } else {
      v.nvmlReturn = NVML_SUCCESS;
      v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
      v.value.ullVal = static_cast<unsigned long long>(known->second);
    }
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(
    nvmlDevice_t device, unsigned long long* types) {
  ENTER_DEVICE("nvmlDeviceGetSupportedEventTypes", device);
  *types = static_cast<unsigned long long>(s.Value(gpu, "event_types"));
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = s.Enter("nvmlEventSetCreate", -1, false);
      r != NVML_SUCCESS) {
    return r;
  }
  s.sets.push_back(std::make_unique<FakeEventSet>());
  *set = s.sets.back().get();
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                  unsigned long long types,
                                                  nvmlEventSet_t set) {
  ENTER_DEVICE("nvmlDeviceRegisterEvents", device);
  const auto supported =
      static_cast<unsigned long long>(s.Value(gpu, "event_types"));
  if ((types & ~supported) != 0) return NVML_ERROR_NOT_SUPPORTED;
  set->registered[gpu] |= types;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set,
                                             nvmlEventData_t* data,
                                             unsigned int timeout_ms) {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = s.Enter("nvmlEventSetWait_v2", -1, false);
      r != NVML_SUCCESS) {
    return r;
  }
  if (!s.events_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [&] { return !set->queue.empty(); })) {
    return NVML_ERROR_TIMEOUT;
  }
  const Event e = set->queue.front();
  set->queue.pop_front();
  data->device = &s.devices[e.gpu];
  data->eventType = e.type;
  data->eventData = e.data;
  data->gpuInstanceId = 0xFFFFFFFFu;
  data->computeInstanceId = 0xFFFFFFFFu;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = s.Enter("nvmlEventSetFree", -1, false);
      r != NVML_SUCCESS) {
    return r;
  }
  std::erase_if(s.sets, [set](const std::unique_ptr<FakeEventSet>& p) {
    return p.get() == set;
  });
  return NVML_SUCCESS;
}
#endif  // FAKE_NVML_LEGACY

// --- Control functions for tests --------------------------------------------

// Forgets every script, call count and event set; no GPUs, not initialized.
FAKE_EXPORT void fake_nvml_reset() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.scripted = true;
  s.growing = false;
  s.Reset(0);
}

// Presents `n` GPUs (0..64). GPUs beyond it keep their state for later.
FAKE_EXPORT void fake_nvml_set_device_count(int n) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  s.device_count = n < 0 ? 0 : (n > kMaxGpus ? kMaxGpus : n);
}

// Sets a plain reading of `gpu` (one of kValueNames). -1 for an unknown
// name or GPU.
FAKE_EXPORT int fake_nvml_set_value(int gpu, const char* what, double value) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  if (gpu < 0 || gpu >= kMaxGpus) return -1;
  for (const char* name : kValueNames) {
    if (std::strcmp(name, what) == 0) {
      s.gpus[gpu].values[name] = value;
      return 0;
    }
  }
  return -1;
}

// Sets field `field_id` of `gpu`; the field becomes supported if it was not.
FAKE_EXPORT int fake_nvml_set_field(int gpu, unsigned int field_id,
                                    double value) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  if (gpu < 0 || gpu >= kMaxGpus) return -1;
  s.gpus[gpu].fields[field_id] = value;
  return 0;
}

// Makes every call on `gpu` (handle lookup included) answer GPU_IS_LOST
// while `lost` is non-zero.
FAKE_EXPORT void fake_nvml_set_lost(int gpu, int lost) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  if (gpu >= 0 && gpu < kMaxGpus) s.gpus[gpu].lost = lost != 0;
}

// Makes `function` answer `code` for `gpu` (-1: every GPU, or the calls
// that take none); code 0 removes the script.
FAKE_EXPORT void fake_nvml_fail(const char* function, int gpu, int code) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  if (code == 0) {
    s.fails[function].erase(gpu);
  } else {
    s.fails[function][gpu] = code;
  }
}

// Makes field `field_id` of `gpu` answer `code` inside a successful
// nvmlDeviceGetFieldValues; 0 removes the script.
FAKE_EXPORT void fake_nvml_fail_field(int gpu, unsigned int field_id,
                                      int code) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  if (gpu < 0 || gpu >= kMaxGpus) return;
  if (code == 0) {
    s.gpus[gpu].field_fails.erase(field_id);
  } else {
    s.gpus[gpu].field_fails[field_id] = code;
  }
}

// Queues an event of `type` (with `data`, the XID for an XID event) on
// every event set where `gpu` registered for it; returns how many.
FAKE_EXPORT int fake_nvml_push_event(int gpu, unsigned long long type,
                                     unsigned long long data) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  if (gpu < 0 || gpu >= kMaxGpus) return 0;
  int queued = 0;
  for (auto& set : s.sets) {
    if ((set->registered[gpu] & type) == 0) continue;
    set->queue.push_back(Event{gpu, type, data});
    ++queued;
  }
  s.events_cv.notify_all();
  return queued;
}

// Calls of `function` since the last reset; null or "" for all functions.
FAKE_EXPORT long fake_nvml_calls(const char* function) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  if (function == nullptr || *function == '\0') {
    long total = 0;
    for (const auto& [name, n] : s.calls) total += n;
    return total;
  }
  auto it = s.calls.find(function);
  return it == s.calls.end() ? 0 : it->second;
}

// How often field `field_id` was asked for since the last reset.
FAKE_EXPORT long fake_nvml_field_reads(unsigned int field_id) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  auto it = s.field_reads.find(field_id);
  return it == s.field_reads.end() ? 0 : it->second;
}

// nvmlInit_v2 calls not yet balanced by nvmlShutdown.
FAKE_EXPORT int fake_nvml_init_count() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.Script();
  return s.init_count;
}
