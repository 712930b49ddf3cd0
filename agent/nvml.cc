#include "agent/nvml.h"

#include <dlfcn.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace vigil::agent::nvml {
namespace {

// Sets `*slot` to the address of `name` in `handle`, or null.
template <typename Fn>
void Resolve(void* handle, const char* name, Fn** slot) {
  *slot = reinterpret_cast<Fn*>(dlsym(handle, name));
}

}  // namespace

absl::StatusCode StatusCodeOf(Return r) {
  switch (r) {
    case kSuccess:
      return absl::StatusCode::kOk;
    case kErrorUninitialized:
      return absl::StatusCode::kFailedPrecondition;
    case kErrorInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case kErrorNotSupported:
    case kErrorFunctionNotFound:
      return absl::StatusCode::kUnimplemented;
    case kErrorNoPermission:
      return absl::StatusCode::kPermissionDenied;
    case kErrorNotFound:
    case kErrorLibraryNotFound:
      return absl::StatusCode::kNotFound;
    case kErrorInsufficientSize:
    case kErrorMemory:
      return absl::StatusCode::kResourceExhausted;
    case kErrorTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    case kErrorDriverNotLoaded:
    case kErrorGpuIsLost:
    case kErrorResetRequired:
    case kErrorLibRmVersionMismatch:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kUnknown;
  }
}

absl::StatusOr<std::unique_ptr<Library>> Library::Open(
    const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(absl::StrCat("cannot load NVML from ", path,
                                            ": ", why ? why : "unknown"));
  }
  std::unique_ptr<Library> lib(new Library(handle));
  Api& a = lib->api_;
  Resolve(handle, "nvmlInit_v2", &a.init);
  Resolve(handle, "nvmlShutdown", &a.shutdown);
  Resolve(handle, "nvmlErrorString", &a.error_string);
  Resolve(handle, "nvmlDeviceGetCount_v2", &a.device_count);
  Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", &a.device_by_index);
  const std::pair<const char*, bool> required[] = {
      {"nvmlInit_v2", a.init != nullptr},
      {"nvmlShutdown", a.shutdown != nullptr},
      {"nvmlErrorString", a.error_string != nullptr},
      {"nvmlDeviceGetCount_v2", a.device_count != nullptr},
      {"nvmlDeviceGetHandleByIndex_v2", a.device_by_index != nullptr}};
  for (const auto& [name, found] : required) {
    if (!found) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " lacks the required symbol ", name));
    }
  }
  Resolve(handle, "nvmlDeviceGetFieldValues", &a.field_values);
  Resolve(handle, "nvmlDeviceGetUtilizationRates", &a.utilization);
  Resolve(handle, "nvmlDeviceGetPowerUsage", &a.power_usage);
  Resolve(handle, "nvmlDeviceGetTemperature", &a.temperature);
  Resolve(handle, "nvmlDeviceGetClockInfo", &a.clock_info);
  Resolve(handle, "nvmlDeviceGetCurrentClocksEventReasons",
          &a.clock_event_reasons);
  if (a.clock_event_reasons == nullptr) {
    Resolve(handle, "nvmlDeviceGetCurrentClocksThrottleReasons",
            &a.clock_event_reasons);
  }
  Resolve(handle, "nvmlDeviceGetMemoryInfo", &a.memory_info);
  Resolve(handle, "nvmlDeviceGetCurrPcieLinkWidth", &a.pcie_link_width);
  Resolve(handle, "nvmlDeviceGetCurrPcieLinkGeneration",
          &a.pcie_link_generation);
  Resolve(handle, "nvmlDeviceGetSupportedEventTypes", &a.supported_event_types);
  Resolve(handle, "nvmlDeviceRegisterEvents", &a.register_events);
  Resolve(handle, "nvmlEventSetCreate", &a.event_set_create);
  Resolve(handle, "nvmlEventSetWait_v2", &a.event_set_wait);
  Resolve(handle, "nvmlEventSetFree", &a.event_set_free);
  return lib;
}

Library::~Library() {
  if (initialized_) api_.shutdown();
  dlclose(handle_);
}

absl::Status Library::Init() {
  if (initialized_) return absl::OkStatus();
  absl::Status s = Check(api_.init(), "nvmlInit_v2");
  initialized_ = s.ok();
  return s;
}

absl::Status Library::Check(Return r, std::string_view call) const {
  if (r == kSuccess) return absl::OkStatus();
  const char* text = api_.error_string(r);
  return absl::Status(
      StatusCodeOf(r),
      absl::StrCat(absl::string_view(call.data(), call.size()), ": ",
                   text ? text : "unknown error", " (NVML error ", r, ")"));
}

}  // namespace vigil::agent::nvml
