// Storage benchmarks on the RocksDB store with GPU-node-like data:
//   BM_Append          samples/s per core (CPU time) into the store
//   BM_BytesPerSample  bytes on disk per sample after Flush()
//   BM_RollupBytes     bytes on disk per series-minute once a raw day has
//                      been rolled up into 1-minute rollups and dropped
//                      (this file's node model, then the agent's simulator)
//   BM_Query1h         latency of Query() over 1 h of one 1 Hz series
// Run: build-storage/bench/storage_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "agent/sim/simulator.h"
#include "common/clock.h"
#include "storage/rocksdb_store.h"

namespace vigil {
namespace {

constexpr int kSeriesPerNode = 200;
constexpr double kT0 = 1764000000.0;

// How one series moves, tick to tick.
enum class Kind { kPowerMilliwatts, kTempC, kConstant, kZero, kUtil, kCounter, kLoss };

Kind KindOf(int s) {
  if (s < 160) {  // 8 GPUs x 20 metrics
    switch (s % 20) {
      case 0: return Kind::kPowerMilliwatts;
      case 1: case 2: return Kind::kTempC;      // gpu, memory temperature
      case 3: case 4: return Kind::kConstant;   // sm / memory clocks
      case 5: return Kind::kUtil;
      case 6: case 7: case 8: return Kind::kCounter;  // nvlink rx/tx, energy
      case 9: return Kind::kConstant;           // memory used
      default: return Kind::kZero;              // ecc, xid, throttle, ...
    }
  }
  if (s < 176) return Kind::kCounter;  // 8 NICs rx/tx bytes
  if (s == 176) return Kind::kLoss;
  if (s < 186) return Kind::kUtil;     // cpu, mem, disk utilisation
  return Kind::kZero;
}

// Per-node generator of one tick of realistic values.
class NodeSim {
 public:
  explicit NodeSim(int node) : rng_(node), state_(kSeriesPerNode) {
    for (int s = 0; s < kSeriesPerNode; ++s) {
      switch (KindOf(s)) {
        case Kind::kTempC: state_[s] = 60 + s % 7; break;
        case Kind::kConstant: state_[s] = 1980; break;
        case Kind::kCounter: state_[s] = 1e12 + s * 1e9; break;
        case Kind::kLoss: state_[s] = 2.5; break;
        default: state_[s] = 0;
      }
    }
  }

  void Tick(std::vector<double>* values) {
    values->resize(kSeriesPerNode);
    std::normal_distribution<double> noise(0, 1);
    for (int s = 0; s < kSeriesPerNode; ++s) {
      double& st = state_[s];
      switch (KindOf(s)) {
        case Kind::kPowerMilliwatts:  // NVML reports integer mW
          (*values)[s] = std::round(600000 + 25000 * noise(rng_)) / 1000;
          break;
        case Kind::kTempC:
          if (rng_() % 20 == 0) st += (rng_() % 2) ? 1 : -1;
          (*values)[s] = st;
          break;
        case Kind::kUtil:
          (*values)[s] = rng_() % 10 == 0 ? 90 + rng_() % 10 : 100;
          break;
        case Kind::kCounter:
          st += std::round(5e9 + 2e8 * noise(rng_));
          (*values)[s] = st;
          break;
        case Kind::kLoss:  // float32 loss, not a short decimal
          st *= 0.9999;
          (*values)[s] = static_cast<float>(st + 0.01 * noise(rng_));
          break;
        default:
          (*values)[s] = st;
      }
    }
  }

 private:
  std::mt19937_64 rng_;
  std::vector<double> state_;
};

// A fresh store with `nodes` x kSeriesPerNode series under /tmp, its clock
// at `t0`.
struct Fixture {
  Fixture(int nodes, const std::string& name, double t0 = kT0) : clock(t0), t0(t0) {
    dir = std::filesystem::temp_directory_path() / ("vigil_storage_bench_" + name);
    std::filesystem::remove_all(dir);
    RocksDbStoreOptions options;
    options.store.clock = &clock;
    options.data_dir = dir;
    store = std::move(*OpenRocksDbStore(options));
    for (int n = 0; n < nodes; ++n) {
      sims.emplace_back(n);
      std::vector<SeriesId> node_ids;
      for (int s = 0; s < kSeriesPerNode; ++s) {
        SeriesKey key{.metric = "m" + std::to_string(s),
                      .labels = {{"job", "j"}, {"node", "node" + std::to_string(n)}}};
        node_ids.push_back(*store->Resolve(key));
      }
      ids.push_back(std::move(node_ids));
    }
  }
  ~Fixture() {
    store.reset();
    std::filesystem::remove_all(dir);
  }
  // Appends tick `t` (seconds after t0) of node `n`.
  void Append(int n, int t) {
    sims[n].Tick(&values);
    FrameColumns frame{.ts = t0 + t, .ids = ids[n], .values = values};
    if (!store->Append({&frame, 1}, nullptr).ok()) std::abort();
  }

  std::string dir;
  FakeClock clock;
  const double t0;
  std::unique_ptr<SeriesStore> store;
  std::vector<NodeSim> sims;
  std::vector<std::vector<SeriesId>> ids;
  std::vector<double> values;
};

void BM_Append(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  Fixture f(nodes, "append");
  int64_t i = 0;
  for (auto _ : state) {
    f.Append(static_cast<int>(i % nodes), static_cast<int>(i / nodes));
    ++i;
  }
  state.SetItemsProcessed(i * kSeriesPerNode);
}
// 100 nodes x 1800 ticks: 2.5 blocks per series, checkpoints included.
BENCHMARK(BM_Append)->Arg(100)->Iterations(100 * 1800)->Unit(benchmark::kMicrosecond);
// 1,250 nodes (a 10,000-GPU cluster, 250 K series) x 240 ticks: each
// series' block and sample tail are out of cache (and of the TLB) when its
// next sample comes, as in a server that takes such a cluster.
BENCHMARK(BM_Append)->Arg(1250)->Iterations(1250 * 240)->Unit(benchmark::kMicrosecond);

void BM_BytesPerSample(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int ticks = 1440;  // two full blocks per series
  for (auto _ : state) {
    Fixture f(nodes, "bytes");
    for (int t = 0; t < ticks; ++t)
      for (int n = 0; n < nodes; ++n) f.Append(n, t);
    if (!f.store->Flush().ok()) std::abort();
    const StoreStats stats = f.store->Stats();
    state.counters["bytes_per_sample"] =
        static_cast<double>(stats.bytes_on_disk) / stats.samples_appended;
    state.counters["samples"] = static_cast<double>(stats.samples_appended);
  }
}
BENCHMARK(BM_BytesPerSample)->Arg(20)->Iterations(1)->Unit(benchmark::kSecond);

// A whole day of 1 Hz samples, then the clock past raw retention: the day
// is folded into 1-minute rollups (min, max, sum, count, NaN count) and
// its raw chunks dropped, as the store does every day past the 7th. What
// the data dir holds then is the rollups (and the index, a few KB): the
// figure behind the rollup disk of docs/SCALING.md. `f` starts at
// kRollupDay; `append(t)` writes its second `t`; `series` take part.
constexpr double kRollupDay = 1764028800.0;  // a UTC midnight
constexpr int kDayTicks = 86400;

template <typename AppendTick>
void MeasureRollupDay(benchmark::State& state, Fixture& f, size_t series, AppendTick append) {
  for (int t = 0; t < kDayTicks; ++t) append(t);
  if (!f.store->Flush().ok()) std::abort();
  const StoreStats raw = f.store->Stats();
  f.clock.Set(kRollupDay + 9 * 86400.0);
  if (!f.store->EnforceRetention().ok() || !f.store->Flush().ok()) std::abort();
  const StoreStats rolled = f.store->Stats();
  state.counters["bytes_per_series_minute"] =
      static_cast<double>(rolled.bytes_on_disk) / (static_cast<double>(series) * kDayTicks / 60);
  state.counters["raw_bytes_per_sample"] =
      static_cast<double>(raw.bytes_on_disk) / raw.samples_appended;
  state.counters["series"] = static_cast<double>(series);
}

void BM_RollupBytes(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  for (auto _ : state) {
    Fixture f(nodes, "rollup", kRollupDay);
    MeasureRollupDay(state, f, static_cast<size_t>(nodes) * kSeriesPerNode, [&](int t) {
      for (int n = 0; n < nodes; ++n) f.Append(n, t);
    });
  }
}
BENCHMARK(BM_RollupBytes)->Arg(2)->Iterations(1)->Unit(benchmark::kSecond);

// The same day from the agent's simulator (agent/sim/simulator.h): 8 GPUs,
// 8 NICs, 2 disks and a training job's step metrics a node, power to the
// milliwatt, counters with their real increments.
void BM_RollupBytesSimulated(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  for (auto _ : state) {
    Fixture f(0, "rollup_sim", kRollupDay);
    std::vector<agent::Simulator> sims;
    std::vector<std::vector<SeriesId>> ids(nodes);
    size_t series = 0;
    for (int n = 0; n < nodes; ++n) {
      agent::SimulatorOptions o;
      o.node = "node" + std::to_string(n);
      o.job = "job";
      sims.push_back(*agent::Simulator::Create(o));
      for (SeriesKey key : sims.back().series()) {
        key.labels.emplace_back("job", o.job);
        key.labels.emplace_back("node", o.node);
        ids[n].push_back(*f.store->Resolve(key));
      }
      series += ids[n].size();
    }
    std::vector<SeriesId> frame_ids;
    std::vector<double> values;
    MeasureRollupDay(state, f, series, [&](int t) {
      for (int n = 0; n < nodes; ++n) {
        std::optional<agent::SimFrame> frame = sims[n].Tick(kRollupDay + t);
        if (!frame) continue;
        frame_ids.clear();
        values.clear();
        for (const auto& sample : frame->samples) {
          frame_ids.push_back(ids[n][sample.series]);
          values.push_back(sample.value);
        }
        FrameColumns columns{.ts = frame->ts, .ids = frame_ids, .values = values};
        if (!f.store->Append({&columns, 1}, nullptr).ok()) std::abort();
      }
    });
  }
}
BENCHMARK(BM_RollupBytesSimulated)->Arg(2)->Iterations(1)->Unit(benchmark::kSecond);

void BM_Query1h(benchmark::State& state) {
  Fixture f(1, "query");
  for (int t = 0; t < 7200; ++t) f.Append(0, t);
  if (!f.store->Flush().ok()) std::abort();
  std::mt19937 rng(1);
  size_t samples = 0;
  for (auto _ : state) {
    const SeriesId id = f.ids[0][rng() % kSeriesPerNode];
    const double from = kT0 + 1800 + rng() % 1800;
    auto got = f.store->Query(id, from, from + 3600);
    samples += got->size();
    benchmark::DoNotOptimize(got);
  }
  state.counters["samples_per_query"] =
      static_cast<double>(samples) / state.iterations();
}
BENCHMARK(BM_Query1h)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vigil

BENCHMARK_MAIN();
