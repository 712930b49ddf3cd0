// Where a server's memory goes, per series: simulated 8-GPU nodes of
// several jobs are fed tick by tick, in one process and without gRPC,
// first into a RocksDB store alone and then into detection alone (fresh
// simulators with the same seeds, so both see the same frames), and the
// heap in use (glibc's mallinfo2) is read before and after each part. The
// store's share is split into its series index (after resolving every
// key) and what the samples add (open blocks, memtables, caches); the
// detector's is read while it learns and once learning is over. Bytes a
// series, by component; see bench/RESULTS.md. gRPC's per-connection
// buffers are not here (bench/cluster-load measures the whole server).
//
//   build/bench/memory_bench [--nodes=256] [--nodes-per-job=32]
//       [--ticks=2400] [--learn-steps=1000] [--warmup-steps=200]
//       [--data-dir=DIR]
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "agent/sim/simulator.h"
#include "common/flags.h"
#include "common/clock.h"
#include "server/detection/detection_service.h"
#include "storage/rocksdb_store.h"

ABSL_FLAG(int, nodes, 256, "N: simulated 8-GPU nodes");
ABSL_FLAG(int, nodes_per_job, 32, "N: nodes of each job");
ABSL_FLAG(int, ticks, 2400, "N: ticks at 1 Hz fed into each part");
ABSL_FLAG(int64_t, learn_steps, 1000, "N: the detector's learning steps");
ABSL_FLAG(int64_t, warmup_steps, 200, "N: the detector's warm-up steps");
ABSL_FLAG(std::string, data_dir, "",
          "DIR: the store's data dir (default: a fresh one under the temp dir, removed)");

namespace {

struct Args {
  int nodes = 0;
  int nodes_per_job = 0;
  int ticks = 0;
  int64_t learn_steps = 0;
  int64_t warmup_steps = 0;
  std::string data_dir;
};

// Heap bytes in use: allocated from the arenas and in mmapped chunks.
double HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

// The simulated nodes, each with its store ids by simulator series index.
struct Cluster {
  struct Node {
    std::unique_ptr<vigil::agent::Simulator> sim;
    std::string name, job;
    std::vector<vigil::SeriesKey> keys;  // job and node labels included
    std::vector<vigil::SeriesId> ids;
  };
  std::vector<Node> nodes;
  size_t series = 0;
};

Cluster MakeCluster(const Args& args, double t0) {
  Cluster c;
  for (int i = 0; i < args.nodes; ++i) {
    vigil::agent::SimulatorOptions o;
    o.node = "node" + std::to_string(i);
    o.job = "job" + std::to_string(i / args.nodes_per_job);
    o.seed = 1 + i / args.nodes_per_job;  // a job's nodes step together
    auto sim = vigil::agent::Simulator::Create(o);
    if (!sim.ok()) {
      std::fprintf(stderr, "memory_bench: simulator: %s\n",
                   sim.status().ToString().c_str());
      std::exit(1);
    }
    Cluster::Node n;
    n.sim = std::make_unique<vigil::agent::Simulator>(*std::move(sim));
    n.name = o.node;
    n.job = o.job;
    for (vigil::SeriesKey key : n.sim->series()) {
      key.labels.emplace_back("job", o.job);
      key.labels.emplace_back("node", o.node);
      n.keys.push_back(std::move(key));
    }
    n.sim->Tick(t0 - 1);
    c.series += n.keys.size();
    c.nodes.push_back(std::move(n));
  }
  return c;
}

// Calls `frame(node, ts, step, ids, values)` for every node's frame of
// tick `t`.
template <typename F>
void RunTick(Cluster& c, double ts, F&& frame) {
  std::vector<vigil::SeriesId> ids;
  std::vector<double> values;
  for (Cluster::Node& n : c.nodes) {
    std::optional<vigil::agent::SimFrame> f = n.sim->Tick(ts);
    if (!f) continue;
    ids.clear();
    values.clear();
    for (const auto& s : f->samples) {
      ids.push_back(n.ids[s.series]);
      values.push_back(s.value);
    }
    frame(n, f->ts, f->step, ids, values);
  }
}

}  // namespace

int main(int argc, char** argv) {
  vigil::flags::ParseOrExit(
      {.name = "memory_bench",
       .synopsis = "memory_bench [--nodes=N] [--nodes-per-job=N] [--ticks=N] [--learn-steps=N]\n"
                   "                    [--warmup-steps=N] [--data-dir=DIR]",
       .about = "Heap bytes a series costs in the store (index, samples) and in detection\n"
                "(during and after learning), measured apart (bench/RESULTS.md).",
       .flags_file = __FILE__},
      argc, argv);
  const Args args{.nodes = absl::GetFlag(FLAGS_nodes),
                  .nodes_per_job = absl::GetFlag(FLAGS_nodes_per_job),
                  .ticks = absl::GetFlag(FLAGS_ticks),
                  .learn_steps = absl::GetFlag(FLAGS_learn_steps),
                  .warmup_steps = absl::GetFlag(FLAGS_warmup_steps),
                  .data_dir = absl::GetFlag(FLAGS_data_dir)};
  if (args.nodes <= 0 || args.nodes_per_job <= 0 || args.ticks <= 0 ||
      args.learn_steps <= 0 || args.warmup_steps < 0) {
    std::fprintf(stderr, "memory_bench: counts must be positive (see --help)\n");
    return vigil::flags::kExitUsage;
  }
  const std::string dir =
      args.data_dir.empty()
          ? (std::filesystem::temp_directory_path() /
             ("vigil-memory-bench." + std::to_string(getpid())))
                .string()
          : args.data_dir;
  vigil::Clock& clock = *vigil::RealClock();
  const double t0 = clock.Now() - args.ticks - 60;
  const double heap0 = HeapInUse();

  // The store alone: its index, then what the samples add.
  double index_bytes = 0, store_bytes = 0, open_block_bytes = 0;
  size_t series = 0;
  {
    Cluster cluster = MakeCluster(args, t0);
    series = cluster.series;
    const double sims = HeapInUse();
    vigil::RocksDbStoreOptions so;
    so.store.clock = &clock;
    so.store.max_series = 100'000'000;
    so.data_dir = dir;
    // Frequent passes over the open blocks, so that their gauge is fresh
    // at the end (no block idles: the feed takes seconds).
    so.idle_block_seconds = 3;
    auto store = vigil::OpenRocksDbStore(so);
    if (!store.ok()) {
      std::fprintf(stderr, "memory_bench: store: %s\n", store.status().ToString().c_str());
      return 1;
    }
    const double opened = HeapInUse();
    for (Cluster::Node& n : cluster.nodes) {
      for (const vigil::SeriesKey& key : n.keys) {
        auto id = (*store)->Resolve(key);
        if (!id.ok()) {
          std::fprintf(stderr, "memory_bench: resolve: %s\n", id.status().ToString().c_str());
          return 1;
        }
        n.ids.push_back(*id);
      }
    }
    const double resolved = HeapInUse();
    for (int t = 0; t < args.ticks; ++t) {
      RunTick(cluster, t0 + t,
              [&](Cluster::Node&, double ts, int64_t, const std::vector<vigil::SeriesId>& ids,
                  const std::vector<double>& values) {
                vigil::FrameColumns f{ts, ids, values};
                vigil::AppendResult r;
                if (absl::Status s = (*store)->Append({&f, 1}, &r); !s.ok()) {
                  std::fprintf(stderr, "memory_bench: append: %s\n", s.ToString().c_str());
                  std::exit(1);
                }
              });
    }
    std::this_thread::sleep_for(std::chrono::seconds(3));
    malloc_trim(0);
    index_bytes = resolved - opened;
    store_bytes = HeapInUse() - resolved;
    open_block_bytes = static_cast<double>((*store)->Stats().open_block_bytes);
    std::printf("series=%zu nodes=%d ticks=%d simulators_bytes_per_series=%.0f "
                "store_open_bytes=%.0f\n",
                series, args.nodes, args.ticks, (sims - heap0) / series, opened - sims);
  }
  std::filesystem::remove_all(dir);

  // Detection alone, on a store that only resolves (the detector keys its
  // series by store id).
  double learning_bytes = 0, learned_bytes = 0;
  {
    vigil::StoreOptions mo;
    mo.clock = &clock;
    mo.max_series = 100'000'000;
    std::unique_ptr<vigil::SeriesStore> store = vigil::NewMemoryStore(mo);
    Cluster cluster = MakeCluster(args, t0);
    for (Cluster::Node& n : cluster.nodes) {
      for (const vigil::SeriesKey& key : n.keys) n.ids.push_back(*store->Resolve(key));
    }
    vigil::DetectionOptions o;
    o.store = store.get();
    o.clock = &clock;
    o.snapshot_seconds = 0;
    o.shards = 1;
    o.detector.baseline.learn_steps = args.learn_steps;
    o.detector.baseline.warmup_steps = args.warmup_steps;
    vigil::DetectionService detection(o);
    if (absl::Status s = detection.Start(); !s.ok()) {
      std::fprintf(stderr, "memory_bench: detection: %s\n", s.ToString().c_str());
      return 1;
    }
    malloc_trim(0);
    const double started = HeapInUse();
    for (int t = 0; t < args.ticks; ++t) {
      RunTick(cluster, t0 + t,
              [&](Cluster::Node& n, double ts, int64_t step,
                  const std::vector<vigil::SeriesId>& ids, const std::vector<double>& values) {
                vigil::FrameView view;
                view.node = n.name;
                view.job = n.job;
                view.step = step;
                view.ts = ts;
                view.ids = ids;
                view.values = values;
                detection.OnFrame(0, view);
              });
      if (t == args.ticks / 2) learning_bytes = HeapInUse() - started;
    }
    malloc_trim(0);
    learned_bytes = HeapInUse() - started;
    detection.Stop();
  }

  std::printf("store_index_bytes_per_series=%.0f store_samples_bytes_per_series=%.0f "
              "(open_block_bytes_per_series=%.0f) store_samples_mib=%.1f\n",
              index_bytes / series, store_bytes / series, open_block_bytes / series,
              store_bytes / 1048576);
  std::printf("detector_bytes_per_series_mid_run=%.0f detector_bytes_per_series_end=%.0f\n",
              learning_bytes / series, learned_bytes / series);
  return 0;
}
