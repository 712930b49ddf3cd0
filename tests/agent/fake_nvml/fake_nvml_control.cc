#include "tests/agent/fake_nvml/fake_nvml_control.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

namespace vigil::agent::testing {
namespace {

template <typename Fn>
void Bind(void* handle, const char* name, Fn** slot) {
  *slot = reinterpret_cast<Fn*>(dlsym(handle, name));
  if (*slot == nullptr) {
    std::fprintf(stderr, "fake NVML lacks %s\n", name);
    std::abort();
  }
}

FakeNvml Load(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    std::abort();
  }
  FakeNvml f;
  Bind(handle, "fake_nvml_reset", &f.reset);
  Bind(handle, "fake_nvml_set_device_count", &f.set_device_count);
  Bind(handle, "fake_nvml_set_value", &f.set_value);
  Bind(handle, "fake_nvml_set_field", &f.set_field);
  Bind(handle, "fake_nvml_set_lost", &f.set_lost);
  Bind(handle, "fake_nvml_fail", &f.fail);
  Bind(handle, "fake_nvml_fail_field", &f.fail_field);
  Bind(handle, "fake_nvml_push_event", &f.push_event);
  Bind(handle, "fake_nvml_calls", &f.calls);
  Bind(handle, "fake_nvml_field_reads", &f.field_reads);
  Bind(handle, "fake_nvml_init_count", &f.init_count);
  return f;
}

}  // namespace

const FakeNvml& FakeAt(const char* path) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, FakeNvml>();
  std::lock_guard<std::mutex> l(mu);
  auto it = loaded->find(path);
  if (it == loaded->end()) it = loaded->emplace(path, Load(path)).first;
  return it->second;
}

const FakeNvml& Fake() { return FakeAt(FAKE_NVML_PATH); }

std::optional<double> Find(const Tick& tick, const std::string& metric,
                           int gpu) {
  const std::string g = std::to_string(gpu);
  for (const Sample& s : tick.samples) {
    if (s.key.metric == metric && s.key.LabelValue("gpu") == g) return s.value;
  }
  return std::nullopt;
}

size_t CountFor(const Tick& tick, int gpu) {
  const std::string g = std::to_string(gpu);
  size_t n = 0;
  for (const Sample& s : tick.samples) n += s.key.LabelValue("gpu") == g;
  return n;
}

void FakeSink::Deliver(Tick event) {
  std::lock_guard<std::mutex> l(mu_);
  events_.push_back(std::move(event));
  cv_.notify_all();
}

std::vector<Tick> FakeSink::WaitFor(size_t n) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::seconds(10),
               [&] { return events_.size() >= n; });
  return events_;
}

std::function<void(const std::string&)> LogCapture::Sink() {
  return [this](const std::string& line) {
    std::lock_guard<std::mutex> l(mu_);
    lines_.push_back(line);
    cv_.notify_all();
  };
}

int LogCapture::Count(std::string_view text) {
  std::lock_guard<std::mutex> l(mu_);
  return CountLocked(text);
}

bool LogCapture::WaitFor(std::string_view text) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, std::chrono::seconds(10),
                      [&] { return CountLocked(text) > 0; });
}

int LogCapture::CountLocked(std::string_view text) {
  int n = 0;
  for (const std::string& line : lines_) {
    n += line.find(text) != std::string::npos;
  }
  return n;
}

}  // namespace vigil::agent::testing
