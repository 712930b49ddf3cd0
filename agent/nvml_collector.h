// The GPU collector: reads every GPU on the node through NVML (loaded at run
// time, agent/nvml.h) once per tick, and watches XID and double-bit ECC
// events in a thread of its own, delivering them at once.
//
// Per GPU (label gpu="<NVML index>") it emits the gpu_* series of
// REQUIREMENTS.md "Metric catalogue" plus gpu_remapped_rows_failure,
// gpu_pcie_link_width and gpu_pcie_link_generation. One
// nvmlDeviceGetFieldValues call per GPU and tick carries the ECC, NVLink,
// HBM temperature, PCIe replay and row-remap readings; nine plain calls
// carry the rest. NVLink counters are summed over links: no per-link
// series (18 links x 5 counters per H100 would add 90 series per GPU for
// what `nvidia-smi nvlink -e` shows on demand).
#ifndef VIGIL_AGENT_NVML_COLLECTOR_H_
#define VIGIL_AGENT_NVML_COLLECTOR_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "agent/collector.h"
#include "agent/nvml.h"
#include "common/clock.h"

namespace vigil::agent {

// How an NvmlCollector finds NVML and behaves when it is unhappy.
struct NvmlCollectorOptions {
  // The NVML library to dlopen: a file name searched on the loader path or
  // an absolute path. Default: the driver's "libnvidia-ml.so.1".
  std::string library_path = "libnvidia-ml.so.1";
  // Watch XID and double-bit ECC events and deliver them between ticks
  // (without, gpu_xid_errors_total / gpu_xid_last are not emitted). Default
  // true.
  bool events = true;
  // Milliseconds one nvmlEventSetWait_v2 blocks; bounds how long Stop waits
  // for the event thread. Default 200.
  unsigned int event_wait_ms = 200;
  // When nvmlInit fails at Start (driver not loaded yet, being upgraded) or
  // NVML reports no GPU: > 0 makes Start succeed and Collect retry at most
  // this often, returning kUnavailable until it works; 0 makes Start
  // return the error. A library that cannot be loaded or lacks a required
  // symbol always fails Start. Default 30.
  double init_retry_seconds = 30;
  // Time source of event frames and of the init retry. Not owned. Default
  // the real clock.
  Clock* clock = RealClock();
  // Receives one line per state change (a GPU lost, missing or back, NVML
  // initialized late, events unavailable). Called from the Collect thread
  // and the event thread. Default: "vigil-agent: nvml: <line>" on stderr.
  std::function<void(const std::string&)> log;
};

// Collector "nvml". Collect and Start/Stop are called from one thread, as
// the Collector contract says; the event thread is internal.
//
// Failures, per reading and per GPU:
// - NVML_ERROR_NOT_SUPPORTED (or a symbol the library lacks): the reading
//   is skipped quietly and never asked for again on that GPU.
// - NVML_ERROR_GPU_IS_LOST from any call of a GPU, or the device count
//   dropping below its index: none of that GPU's samples are sent (the
//   server's gpu_missing detector fires), Collect returns kUnavailable
//   naming it every tick, and the change is logged once. Its handle is
//   fetched again on each later tick, so a GPU that comes back is read
//   again (and logged once).
// - Any other error: the reading is skipped this tick and named in the
//   returned status; it is tried again next tick.
class NvmlCollector : public Collector {
 public:
  explicit NvmlCollector(NvmlCollectorOptions options = {});
  // Stops the event thread, shuts NVML down and unloads it.
  ~NvmlCollector() override;

  NvmlCollector(const NvmlCollector&) = delete;
  NvmlCollector& operator=(const NvmlCollector&) = delete;

  std::string_view name() const override { return "nvml"; }
  // Loads the library, initializes NVML, finds the GPUs and starts the
  // event thread (events go to `events`; null disables them). kNotFound if
  // the library cannot be loaded, kFailedPrecondition if it lacks a
  // required symbol or Start ran before; the nvmlInit error, or kNotFound
  // when there is no GPU, if init_retry_seconds is 0.
  absl::Status Start(EventSink* events) override;
  // Appends the readings of every readable GPU. kFailedPrecondition before
  // Start; kUnavailable while NVML is not initialized (see
  // init_retry_seconds) or when a GPU is lost or missing; otherwise the
  // first failing reading's code, with every problem in the message.
  absl::Status Collect(Tick* tick) override;
  // Stops and joins the event thread (within about event_wait_ms).
  // Idempotent.
  void Stop() override;

 private:
  enum class Health { kReadable, kLost, kMissing };
  // What Collect keeps per GPU (only the Collect thread touches it).
  struct Gpu {
    unsigned int index = 0;
    std::vector<Label> labels;      // {"gpu", "<index>"}
    nvml::Device handle = nullptr;  // null until fetched / after loss
    Health health = Health::kReadable;
    uint32_t unsupported = 0;              // bit per plain reading
    std::vector<nvml::FieldValue> fields;  // the batched request
  };
  // What the event thread shares with Collect, per GPU.
  struct Watch {
    nvml::Device handle = nullptr;
    bool xid = false;  // XID events registered
    uint64_t xid_count = 0;
    uint64_t xid_last = 0;
  };
  class Problems;

  // nvmlInit, the GPU list, the event set and thread.
  absl::Status Initialize();
  void StartEvents();
  void AddGpu();
  // Fetches a GPU's handle and registers its events. False if NVML refused.
  bool Acquire(Gpu& gpu, Problems* problems);
  void RegisterEvents(const Gpu& gpu);
  // Append `gpu`'s samples. The NVML call that reported the GPU lost, or
  // null.
  const char* ReadGpu(Gpu& gpu, Tick* tick, Problems* problems);
  const char* ReadFields(Gpu& gpu, Tick* tick, Problems* problems);
  void SetHealth(Gpu& gpu, Health health, absl::string_view why);
  void EventLoop();
  void HandleEvent(const nvml::EventData& event);
  void Log(const std::string& line) const;

  const NvmlCollectorOptions options_;
  std::unique_ptr<nvml::Library> lib_;
  EventSink* events_ = nullptr;
  bool initialized_ = false;
  absl::Status init_error_;
  double next_init_ = 0;           // clock time of the next init attempt
  uint32_t base_unsupported_ = 0;  // plain readings the library cannot do
  std::vector<Gpu> gpus_;
  nvml::EventSet event_set_ = nullptr;
  std::thread event_thread_;

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Watch> watch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_NVML_COLLECTOR_H_
