// Helpers for the host collector tests: fixture trees copied into a fresh
// temp dir so a test can edit them, and lookups into a Tick.
#ifndef VIGIL_TESTS_AGENT_HOST_TEST_UTIL_H_
#define VIGIL_TESTS_AGENT_HOST_TEST_UTIL_H_

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "agent/collector.h"

namespace vigil::agent::testing {

// <source>/tests/agent/testdata/<rel>.
std::string TestData(std::string_view rel);

// A copy of testdata/<rel> in a fresh directory named after the running
// test, removed on destruction.
class FixtureCopy {
 public:
  explicit FixtureCopy(std::string_view rel);
  ~FixtureCopy();
  FixtureCopy(const FixtureCopy&) = delete;
  FixtureCopy& operator=(const FixtureCopy&) = delete;

  // Root of the copy.
  const std::string& root() const { return root_; }
  // Overwrites (truncating in place, as sysfs and procfs change) or creates
  // the file at `rel` with `content`.
  void Write(std::string_view rel, std::string_view content) const;
  // Removes `rel` and everything under it.
  void Remove(std::string_view rel) const;
  // Copies the tree at `from` to `to`, both relative to the root.
  void CopyTree(std::string_view from, std::string_view to) const;

 private:
  std::string root_;
};

// An empty tick at `ts`.
Tick At(double ts);

// The value of `metric` with label dev=`dev` ("" for no labels) in `tick`,
// or nullopt if absent.
std::optional<double> Value(const Tick& tick, std::string_view metric,
                            std::string_view dev = "");
// The dev labels `metric` appears with in `tick`.
std::set<std::string> Devs(const Tick& tick, std::string_view metric);

}  // namespace vigil::agent::testing

#endif  // VIGIL_TESTS_AGENT_HOST_TEST_UTIL_H_
