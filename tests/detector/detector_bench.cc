// Samples per second of the full detector set on simulated 8-GPU nodes,
// learning phase included. Run: build-*/tests/detector/detector_bench
#include <vector>

#include "benchmark/benchmark.h"
#include "detector/detector.h"
#include "tests/detector/sim.h"

namespace vigil {
namespace {

void BM_Detector(benchmark::State& state) {
  sim::SimOptions o;
  o.nodes = static_cast<int>(state.range(0));
  const int64_t frames = 6000;
  sim::Cluster recorder(nullptr, o);
  std::vector<sim::Cluster::Recorded> rec;
  recorder.Record(frames, &rec);
  int64_t samples = 0;
  for (const auto& r : rec) samples += static_cast<int64_t>(r.ids.size());
  std::vector<std::string> names;
  for (int i = 0; i < o.nodes; ++i) names.push_back(sim::Cluster::NodeName(i));
  std::vector<Anomaly> out;
  for (auto _ : state) {
    state.PauseTiming();
    Detector d;
    sim::Cluster registrar(&d, o);  // registers the same ids
    out.clear();
    state.ResumeTiming();
    for (const auto& r : rec) {
      FrameView f{names[r.node], o.job, r.step, r.ts, r.ids, r.values};
      d.AdvanceTime(r.ts, &out);
      d.ProcessFrame(f, &out);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * samples);
}
BENCHMARK(BM_Detector)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vigil

BENCHMARK_MAIN();
