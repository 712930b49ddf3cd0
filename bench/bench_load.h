// What the end-to-end benchmarks share: the simulator's frames of a node,
// generated before timing starts, streamed into vigil-server over gRPC as
// an agent streams them, and the /proc figures of a server process.
#ifndef VIGIL_BENCH_BENCH_LOAD_H_
#define VIGIL_BENCH_BENCH_LOAD_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/series_key.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace vigil::bench {

using Steady = std::chrono::steady_clock;

// Batches of one simulated node, ready to send.
struct NodeLoad {
  std::string node;
  std::string job;
  // The node's series (dictionary id = index), job and node labels
  // included.
  std::vector<SeriesKey> series;
  std::vector<v1::FrameBatch> batches;
  uint64_t samples = 0;
  uint64_t fault_seq = 0;  // the batch whose frame carries the fault; 0: none
};

// Node n<index> of job "bench-job": `frames` ticks at 1 Hz from `start_ts`,
// `batch_frames` frames per batch (the first with the hello and the
// dictionary). With `fault`, GPU 0's ECC double-bit counter goes up by one
// from two thirds into the run.
NodeLoad GenerateNode(int index, int frames, int batch_frames, double start_ts, bool fault);

// Streams `load` with up to `window` unacked batches; appends each batch's
// ack latency (seconds) to `latencies`. Paced (pace_hz > 0), batch k is
// sent at `start` + k / pace_hz, as an agent sends one a tick. False on a
// stream error.
bool StreamNode(const std::shared_ptr<grpc::Channel>& channel, const NodeLoad& load,
                int window, double pace_hz, Steady::time_point start,
                std::vector<double>* latencies, std::atomic<int64_t>* fault_sent_ns);

// CPU seconds (user + system) used so far by process `pid`.
double ProcessCpuSeconds(pid_t pid);
// Resident set size of `pid` in bytes.
uint64_t ProcessRssBytes(pid_t pid);
// Bytes of the regular files under `dir`.
uint64_t DirBytes(const std::string& dir);
// The `p` quantile (0..1) of `v`; 0 for none.
double Percentile(std::vector<double> v, double p);

}  // namespace vigil::bench

#endif  // VIGIL_BENCH_BENCH_LOAD_H_
