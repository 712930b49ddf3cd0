// Detection alone, across frame workers: simulated 8-GPU nodes of several
// jobs, their frames generated and decoded before timing, are run through
// DetectionService's shards by FrameWorkers (as vigil-server does after
// storing a batch), with 1 and 2 workers alternately after a warm-up, in
// one process. Reports the median run's samples per wall second, process
// CPU seconds, and the speed-up of 2 workers over 1. See bench/RESULTS.md.
//
//   build/bench/detection_bench [--jobs=8] [--nodes-per-job=32] [--ticks=1000]
//                               [--max-workers=2] [--rounds=5]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "agent/sim/simulator.h"
#include "common/clock.h"
#include "server/detection/detection_service.h"
#include "server/ingest/frame_workers.h"
#include "storage/series_store.h"

namespace {

using Steady = std::chrono::steady_clock;

struct Args {
  int jobs = 8;
  int nodes_per_job = 32;
  int ticks = 1000;
  int max_workers = 2;
  int rounds = 5;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (auto v = value("jobs")) a->jobs = std::atoi(v);
    else if (auto v = value("nodes-per-job")) a->nodes_per_job = std::atoi(v);
    else if (auto v = value("ticks")) a->ticks = std::atoi(v);
    else if (auto v = value("max-workers")) a->max_workers = std::atoi(v);
    else if (auto v = value("rounds")) a->rounds = std::atoi(v);
    else {
      std::fprintf(stderr, "detection_bench: unknown argument %s\n", argv[i]);
      return false;
    }
  }
  return a->jobs > 0 && a->nodes_per_job > 0 && a->ticks > 0 &&
         a->max_workers > 0 && a->rounds > 0;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

// One node's frames, decoded: per tick, store ids and values.
struct NodeFrames {
  std::string node, job;
  std::vector<double> ts;
  std::vector<int64_t> step;
  std::vector<std::vector<uint32_t>> ids;
  std::vector<std::vector<double>> values;
};

// Generates every node's frames and registers its series in `store`.
std::vector<NodeFrames> Generate(const Args& args, double t0,
                                 vigil::SeriesStore& store) {
  std::vector<NodeFrames> nodes;
  for (int j = 0; j < args.jobs; ++j) {
    for (int n = 0; n < args.nodes_per_job; ++n) {
      vigil::agent::SimulatorOptions o;
      o.node = "n" + std::to_string(j * args.nodes_per_job + n);
      o.job = "job" + std::to_string(j);
      o.seed = 1 + j;
      auto sim = vigil::agent::Simulator::Create(o);
      if (!sim.ok()) {
        std::fprintf(stderr, "simulator: %s\n", sim.status().ToString().c_str());
        std::exit(1);
      }
      std::vector<uint32_t> id_of;
      for (vigil::SeriesKey key : sim->series()) {
        key.labels.emplace_back("job", o.job);
        key.labels.emplace_back("node", o.node);
        auto id = store.Resolve(key);
        if (!id.ok()) {
          std::fprintf(stderr, "resolve: %s\n", id.status().ToString().c_str());
          std::exit(1);
        }
        id_of.push_back(*id);
      }
      NodeFrames f;
      f.node = o.node;
      f.job = o.job;
      sim->Tick(t0 - 1);
      for (int t = 0; t < args.ticks; ++t) {
        auto frame = sim->Tick(t0 + t);
        if (!frame) continue;
        f.ts.push_back(frame->ts);
        f.step.push_back(frame->step);
        f.ids.emplace_back();
        f.values.emplace_back();
        for (const auto& s : frame->samples) {
          f.ids.back().push_back(id_of[s.series]);
          f.values.back().push_back(s.value);
        }
      }
      nodes.push_back(std::move(f));
    }
  }
  return nodes;
}

struct Result {
  double wall_s = 0, cpu_s = 0;
  uint64_t frames = 0, samples = 0;
};

// Runs every frame through a fresh DetectionService of `workers` shards.
Result Run(const std::vector<NodeFrames>& nodes, int workers,
           vigil::SeriesStore& store, vigil::Clock& clock) {
  vigil::DetectionOptions o;
  o.store = &store;
  o.clock = &clock;
  o.snapshot_seconds = 0;
  o.shards = workers;
  vigil::DetectionService detection(o);
  if (!detection.Start().ok()) std::exit(1);
  vigil::FrameWorkers pool({.workers = workers, .queue_capacity = 1u << 30});
  Result r;
  const double cpu0 = CpuSeconds();
  const auto wall0 = Steady::now();
  // One task per job and tick, with the frames of all its nodes, as the
  // server hands a worker what its streams' batches hold.
  const size_t ticks = nodes.empty() ? 0 : nodes[0].ts.size();
  for (size_t t = 0; t < ticks; ++t) {
    for (size_t first = 0; first < nodes.size();) {
      size_t last = first;
      while (last < nodes.size() && nodes[last].job == nodes[first].job) ++last;
      const int shard = detection.ShardOf(nodes[first].job);
      for (size_t i = first; i < last; ++i) {
        if (t >= nodes[i].ts.size()) continue;
        r.frames += 1;
        r.samples += nodes[i].ids[t].size();
      }
      pool.Submit(shard, [&detection, &nodes, t, first, last, shard] {
        for (size_t i = first; i < last; ++i) {
          const NodeFrames& n = nodes[i];
          if (t >= n.ts.size()) continue;
          vigil::FrameView view;
          view.node = n.node;
          view.job = n.job;
          view.step = n.step[t];
          view.ts = n.ts[t];
          view.ids = n.ids[t];
          view.values = n.values[t];
          detection.OnFrame(shard, view);
        }
      });
      first = last;
    }
  }
  pool.Stop();
  r.wall_s = std::chrono::duration<double>(Steady::now() - wall0).count();
  r.cpu_s = CpuSeconds() - cpu0;
  detection.Stop();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  vigil::Clock& clock = *vigil::RealClock();
  vigil::StoreOptions so;
  so.clock = &clock;
  so.max_series = 100'000'000;
  std::unique_ptr<vigil::SeriesStore> store = vigil::NewMemoryStore(so);
  const double t0 = clock.Now() - args.ticks - 60;
  const std::vector<NodeFrames> nodes = Generate(args, t0, *store);
  std::printf("jobs=%d nodes=%zu ticks=%d\n", args.jobs, nodes.size(), args.ticks);
  // A warm-up run first (page faults, caches), then each worker count
  // `rounds` times, alternating; the median of each is reported.
  (void)Run(nodes, 1, *store, clock);
  std::vector<std::vector<Result>> runs(args.max_workers + 1);
  for (int round = 0; round < args.rounds; ++round) {
    for (int w = 1; w <= args.max_workers; ++w) runs[w].push_back(Run(nodes, w, *store, clock));
  }
  double base = 0;
  for (int w = 1; w <= args.max_workers; ++w) {
    std::vector<Result>& rs = runs[w];
    std::sort(rs.begin(), rs.end(),
              [](const Result& a, const Result& b) { return a.wall_s < b.wall_s; });
    const Result& r = rs[rs.size() / 2];
    const double rate = r.samples / r.wall_s;
    if (w == 1) base = rate;
    std::printf(
        "workers=%d frames=%lu samples=%lu median_wall_s=%.3f cpu_s=%.3f "
        "samples_per_wall_s=%.0f samples_per_cpu_s=%.0f speedup=%.2f\n",
        w, static_cast<unsigned long>(r.frames),
        static_cast<unsigned long>(r.samples), r.wall_s, r.cpu_s, rate,
        r.samples / r.cpu_s, rate / base);
  }
  return 0;
}
