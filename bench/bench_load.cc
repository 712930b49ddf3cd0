#include "bench/bench_load.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/sim/simulator.h"

namespace vigil::bench {

// CPU seconds (user + system) used so far by process `pid`.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  // Fields after the command name, which is in parentheses.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f;
  for (std::string s; rest >> s;) f.push_back(s);
  // f[0] is field 3 (state); utime is field 14, stime field 15.
  return (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK);
}

// Resident set size of `pid` in bytes.
uint64_t ProcessRssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}


NodeLoad GenerateNode(int index, int frames, int batch_frames, double start_ts, bool fault) {
  vigil::agent::SimulatorOptions options;
  char name[16];
  std::snprintf(name, sizeof(name), "n%03d", index);
  options.node = name;
  options.job = "bench-job";
  options.seed = 1000 + index;
  auto sim = vigil::agent::Simulator::Create(options);
  if (!sim.ok()) {
    std::fprintf(stderr, "simulator: %s\n", sim.status().ToString().c_str());
    std::exit(1);
  }
  NodeLoad load;
  load.node = options.node;
  load.job = options.job;
  load.series = sim->series();
  for (SeriesKey& key : load.series) {
    key.labels.emplace_back("job", load.job);
    key.labels.emplace_back("node", load.node);
    std::sort(key.labels.begin(), key.labels.end());
  }
  vigil::v1::FrameBatch batch;
  uint64_t seq = 0;
  auto start_batch = [&] {
    batch.Clear();
    batch.set_seq(++seq);
    if (seq == 1) {
      batch.mutable_hello()->set_node(options.node);
      batch.mutable_hello()->set_agent_instance("bench-" + options.node);
      batch.mutable_hello()->set_interval_seconds(1.0);
      const auto& series = sim->series();
      for (uint32_t id = 0; id < series.size(); ++id) {
        auto* def = batch.add_series();
        def->set_id(id);
        def->set_metric(series[id].metric);
        for (const auto& [n, v] : series[id].labels) {
          if (n == "job" || n == "node") continue;
          auto* l = def->add_labels();
          l->set_name(n);
          l->set_value(v);
        }
      }
    }
  };
  start_batch();
  sim->Tick(start_ts - 1);
  // A faulty node's ECC double-bit counter of GPU 0 goes up by one from
  // two thirds into the run: a P0 the server must raise.
  uint32_t dbe = UINT32_MAX;
  for (uint32_t id = 0; id < sim->series().size(); ++id) {
    const auto& key = sim->series()[id];
    if (key.metric == "gpu_ecc_dbe_total" && key.LabelValue("gpu") == "0") dbe = id;
  }
  const int fault_frame = fault ? frames * 2 / 3 : frames;
  for (int i = 0; i < frames; ++i) {
    auto frame = sim->Tick(start_ts + i);
    if (!frame) continue;
    if (i >= fault_frame) {
      for (auto& sample : frame->samples) {
        if (sample.series == dbe) sample.value += 1;
      }
      if (i == fault_frame) load.fault_seq = seq;
    }
    auto* f = batch.add_frames();
    f->set_job(options.job);
    f->set_step(frame->step);
    f->set_ts(frame->ts);
    f->mutable_series_ids()->Reserve(frame->samples.size());
    f->mutable_values()->Reserve(frame->samples.size());
    for (const auto& s : frame->samples) {
      f->add_series_ids(s.series);
      f->add_values(s.value);
    }
    load.samples += frame->samples.size();
    if (batch.frames_size() == batch_frames) {
      load.batches.push_back(batch);
      start_batch();
    }
  }
  if (batch.frames_size() > 0) load.batches.push_back(batch);
  return load;
}

// Streams `load` with up to `window` unacked batches; appends each batch's
// ack latency (seconds) to `latencies`. Paced (pace_hz > 0), batch k is
// sent at `start` + k / pace_hz, as an agent sends one a tick. False on a
// stream error.
bool StreamNode(const std::shared_ptr<grpc::Channel>& channel,
                const NodeLoad& load, int window, double pace_hz,
                Steady::time_point start, std::vector<double>* latencies,
                std::atomic<int64_t>* fault_sent_ns) {
  auto stub = vigil::v1::Ingest::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  std::vector<Steady::time_point> sent(load.batches.size() + 1);
  std::atomic<uint64_t> acked{0};
  // Bumped with every ack and when the stream ends (the server may end it,
  // e.g. when the first batch came too late): the writer waits on it.
  std::atomic<uint64_t> events{0};
  std::atomic<bool> ended{false};
  std::thread reader([&] {
    vigil::v1::Ack ack;
    while (stream->Read(&ack)) {
      auto now = Steady::now();
      for (uint64_t s = acked + 1; s <= ack.acked_seq(); ++s) {
        latencies->push_back(std::chrono::duration<double>(now - sent[s]).count());
      }
      acked = ack.acked_seq();
      ++events;
      events.notify_all();
    }
    ended = true;
    ++events;
    events.notify_all();
  });
  for (const auto& batch : load.batches) {
    uint64_t seq = batch.seq();
    if (pace_hz > 0) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Steady::duration>(
                      std::chrono::duration<double>((seq - 1) / pace_hz)));
    }
    while (!ended && seq > acked.load() + window) {
      const uint64_t seen = events.load();
      if (!ended && seq > acked.load() + window) events.wait(seen);
    }
    if (ended) break;
    sent[seq] = Steady::now();
    if (seq == load.fault_seq)
      fault_sent_ns->store(sent[seq].time_since_epoch().count());
    if (!stream->Write(batch)) break;
  }
  stream->WritesDone();
  reader.join();
  grpc::Status status = stream->Finish();
  if (!status.ok() || acked != load.batches.size()) {
    std::fprintf(stderr, "stream ended: %s (acked %lu of %zu)\n",
                 status.error_message().c_str(),
                 static_cast<unsigned long>(acked.load()), load.batches.size());
    return false;
  }
  return true;
}

}  // namespace vigil::bench
