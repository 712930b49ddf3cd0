// The slice of NVML (the NVIDIA Management Library) that vigil-agent uses,
// declared here and loaded at run time with dlopen, so the agent builds and
// runs on machines without a GPU driver. Only what the NVML collector calls
// is declared; numbers and layouts follow the driver's ABI.
#ifndef VIGIL_AGENT_NVML_H_
#define VIGIL_AGENT_NVML_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vigil::agent::nvml {

// nvmlReturn_t, and the codes the agent tells apart.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorLibRmVersionMismatch = 18;
inline constexpr Return kErrorMemory = 20;
inline constexpr Return kErrorUnknown = 999;

// Opaque handles (nvmlDevice_t, nvmlEventSet_t).
struct DeviceOpaque;
using Device = DeviceOpaque*;
struct EventSetOpaque;
using EventSet = EventSetOpaque*;

// nvmlTemperatureSensors_t / nvmlClockType_t values used.
inline constexpr int kTemperatureGpu = 0;
inline constexpr int kClockSm = 1;
inline constexpr int kClockMem = 2;

// nvmlUtilization_t: percentages over the driver's last sample period.
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlMemory_t (v1): framebuffer bytes.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlValueType_t: which member of Value a FieldValue carries.
inline constexpr int kValueDouble = 0;
inline constexpr int kValueUnsignedInt = 1;
inline constexpr int kValueUnsignedLong = 2;
inline constexpr int kValueUnsignedLongLong = 3;
inline constexpr int kValueSignedLongLong = 4;
inline constexpr int kValueSignedInt = 5;

// nvmlValue_t.
union Value {
  double d;
  int si;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
};

// nvmlFieldValue_t: field_id and scope_id are inputs, the rest outputs;
// `value` is meaningful only when `result` is kSuccess.
struct FieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp_us;
  long long latency_us;
  int value_type;
  Return result;
  Value value;
};
static_assert(sizeof(FieldValue) == 40 && offsetof(FieldValue, value) == 32,
              "FieldValue must match nvmlFieldValue_t");

// NVML_FI_DEV_* field ids read in one nvmlDeviceGetFieldValues call.
inline constexpr unsigned int kFieldEccSbeVolatileTotal = 3;
inline constexpr unsigned int kFieldEccDbeVolatileTotal = 4;
inline constexpr unsigned int kFieldNvlinkCrcFlitTotal = 38;
inline constexpr unsigned int kFieldNvlinkCrcDataTotal = 45;
inline constexpr unsigned int kFieldNvlinkReplayTotal = 52;
inline constexpr unsigned int kFieldNvlinkRecoveryTotal = 59;
inline constexpr unsigned int kFieldMemoryTemp = 82;
inline constexpr unsigned int kFieldPcieReplayCounter = 94;
// Cumulative KiB; scope_id kScopeAllLinks sums over every link.
inline constexpr unsigned int kFieldNvlinkThroughputDataTx = 138;
inline constexpr unsigned int kFieldNvlinkThroughputDataRx = 139;
inline constexpr unsigned int kFieldRemappedPending = 144;
inline constexpr unsigned int kFieldRemappedFailure = 145;
inline constexpr unsigned int kScopeAllLinks = 0xFFFFFFFFu;

// Event type bits (nvmlEventType*).
inline constexpr unsigned long long kEventDoubleBitEcc = 0x2;
inline constexpr unsigned long long kEventXidCritical = 0x8;

// nvmlEventData_t: for an XID event, `data` is the XID code.
struct EventData {
  Device device;
  unsigned long long type;
  unsigned long long data;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
static_assert(sizeof(EventData) == 32 && offsetof(EventData, data) == 16,
              "EventData must match nvmlEventData_t");

// The entry points, resolved by Library::Open. The first five are required
// and never null; any other is null when the library lacks it, which
// disables just the readings that need it.
struct Api {
  Return (*init)();                                   // nvmlInit_v2
  Return (*shutdown)();                               // nvmlShutdown
  const char* (*error_string)(Return);                // nvmlErrorString
  Return (*device_count)(unsigned int*);              // nvmlDeviceGetCount_v2
  Return (*device_by_index)(unsigned int, Device*);   // ..GetHandleByIndex_v2
  Return (*field_values)(Device, int, FieldValue*);   // ..GetFieldValues
  Return (*utilization)(Device, Utilization*);        // ..GetUtilizationRates
  Return (*power_usage)(Device, unsigned int*);       // ..GetPowerUsage (mW)
  Return (*temperature)(Device, int, unsigned int*);  // ..GetTemperature
  Return (*clock_info)(Device, int, unsigned int*);   // ..GetClockInfo (MHz)
  // nvmlDeviceGetCurrentClocksEventReasons, or on drivers before R535 the
  // older name nvmlDeviceGetCurrentClocksThrottleReasons.
  Return (*clock_event_reasons)(Device, unsigned long long*);
  Return (*memory_info)(Device, Memory*);            // ..GetMemoryInfo
  Return (*pcie_link_width)(Device, unsigned int*);  // ..GetCurrPcieLinkWidth
  Return (*pcie_link_generation)(Device, unsigned int*);
  Return (*supported_event_types)(Device, unsigned long long*);
  Return (*register_events)(Device, unsigned long long, EventSet);
  Return (*event_set_create)(EventSet*);
  Return (*event_set_wait)(EventSet, EventData*, unsigned int);  // _v2, ms
  Return (*event_set_free)(EventSet);
};

// The absl code for an NVML return code: kUnimplemented for NOT_SUPPORTED,
// kUnavailable for a lost GPU or a missing / mismatched driver,
// kDeadlineExceeded for TIMEOUT, and so on; kUnknown for codes it does not
// know.
absl::StatusCode StatusCodeOf(Return r);

// A loaded NVML library. Calls through api() go straight to NVML, which is
// thread-safe; Init is not and is called from one thread.
class Library {
 public:
  // Loads the library at `path` (a file name is searched on the loader
  // path) and resolves its symbols; does not call nvmlInit. kNotFound with
  // the loader's message if it cannot be loaded; kFailedPrecondition naming
  // the symbol if a required one is missing.
  static absl::StatusOr<std::unique_ptr<Library>> Open(const std::string& path);
  // Calls nvmlShutdown if Init succeeded, then unloads the library.
  ~Library();

  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // Calls nvmlInit_v2 unless an earlier call succeeded. Its error (as from
  // Check) otherwise.
  absl::Status Init();
  // The resolved entry points.
  const Api& api() const { return api_; }
  // OK for kSuccess; otherwise a status with StatusCodeOf(r) and the message
  // "<call>: <nvmlErrorString text> (NVML error <r>)".
  absl::Status Check(Return r, std::string_view call) const;

 private:
  explicit Library(void* handle) : handle_(handle) {}

  void* handle_;
  Api api_{};
  bool initialized_ = false;
};

}  // namespace vigil::agent::nvml

#endif  // VIGIL_AGENT_NVML_H_
