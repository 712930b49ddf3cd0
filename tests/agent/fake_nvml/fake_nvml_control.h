// Test-side access to the fake libnvidia-ml.so.1 (fake_nvml.cc): its
// control functions resolved from the same file the collector loads, so
// both see one state. Also small helpers to read a Tick and a thread-safe
// fake EventSink.
#ifndef VIGIL_TESTS_AGENT_FAKE_NVML_FAKE_NVML_CONTROL_H_
#define VIGIL_TESTS_AGENT_FAKE_NVML_FAKE_NVML_CONTROL_H_

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/collector.h"

namespace vigil::agent::testing {

// Event type bits the tests push.
inline constexpr unsigned long long kFakeEventDbe = 0x2;
inline constexpr unsigned long long kFakeEventXid = 0x8;

// The control functions of one fake library file (see fake_nvml.cc for
// what each does). The library stays loaded for the life of the process.
struct FakeNvml {
  void (*reset)();
  void (*set_device_count)(int n);
  int (*set_value)(int gpu, const char* what, double value);
  int (*set_field)(int gpu, unsigned int field_id, double value);
  void (*set_lost)(int gpu, int lost);
  void (*fail)(const char* function, int gpu, int code);
  void (*fail_field)(int gpu, unsigned int field_id, int code);
  int (*push_event)(int gpu, unsigned long long type, unsigned long long data);
  long (*calls)(const char* function);
  long (*field_reads)(unsigned int field_id);
  int (*init_count)();
};

// The controls of the library at `path`, loaded once per path. Aborts the
// test binary if the file or a control symbol is missing.
const FakeNvml& FakeAt(const char* path);
// The controls of the fake built as libnvidia-ml.so.1 (FAKE_NVML_PATH).
const FakeNvml& Fake();

// The value of `metric` for gpu `gpu` in `tick`, or nullopt.
std::optional<double> Find(const Tick& tick, const std::string& metric,
                           int gpu);
// How many samples of `tick` carry gpu="<gpu>".
size_t CountFor(const Tick& tick, int gpu);

// An EventSink that keeps what it is given.
class FakeSink : public EventSink {
 public:
  void Deliver(Tick event) override;
  // Waits (a condition, at most 10 s so a bug fails instead of hanging)
  // until `n` events were delivered; returns all delivered so far.
  std::vector<Tick> WaitFor(size_t n);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Tick> events_;
};

// Collects the lines a collector logs. Thread-safe.
class LogCapture {
 public:
  // A log callback appending to this capture, which must outlive it.
  std::function<void(const std::string&)> Sink();
  // Lines containing `text`.
  int Count(std::string_view text);
  // Waits (a condition, at most 10 s) for a line containing `text`.
  bool WaitFor(std::string_view text);

 private:
  int CountLocked(std::string_view text);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

}  // namespace vigil::agent::testing

#endif  // VIGIL_TESTS_AGENT_FAKE_NVML_FAKE_NVML_CONTROL_H_
