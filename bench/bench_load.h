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

namespace vigil::agent {
class Simulator;
}  // namespace vigil::agent

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

// A fault written into a node's frames from frame `frame` on (none when
// `kind` is kNone).
struct NodeFault {
  enum Kind {
    kNone,
    kEccDoubleBit,  // GPU 0's ECC double-bit counter goes up by one: a red line, P0
    kPowerDrop,     // GPU 0 draws 80 W less than before: below its peers, P2
  };
  Kind kind = kNone;
  int frame = 0;
};

// The agent simulator's frames of one node, with a fault in them.
class NodeSource {
 public:
  // Node `node` of job `job`; nodes of one job share `seed` to step in
  // lockstep. Exits the process if the simulator refuses the options.
  NodeSource(const std::string& node, const std::string& job, uint64_t seed,
             const NodeFault& fault);
  ~NodeSource();
  NodeSource(NodeSource&&) noexcept;

  // The node's series (dictionary id = index), job and node labels included.
  const std::vector<SeriesKey>& series() const { return series_; }
  // Adds the stream's hello and series dictionary to `batch` (the first).
  void AddHello(v1::FrameBatch* batch) const;
  // Adds the node's frame at `ts` (the fault in it from the fault's frame
  // on, counting the frames this source made) to `batch`. Returns the
  // samples added; `*fault_starts` says whether this frame is the first
  // faulty one.
  int AddFrame(double ts, v1::FrameBatch* batch, bool* fault_starts);
  // Later frames belong to job `job`, as when the node moves to another
  // job: the server keys its series anew (the stream's dictionary does not
  // name the job).
  void SetJob(const std::string& job);

 private:
  std::unique_ptr<agent::Simulator> sim_;
  std::string node_;
  std::string job_;
  std::vector<SeriesKey> series_;
  NodeFault fault_;
  uint32_t faulty_series_ = UINT32_MAX;
  int frames_ = 0;
};

// Node n<index> of job "bench-job": `frames` ticks at 1 Hz from `start_ts`,
// `batch_frames` frames per batch (the first with the hello and the
// dictionary), with `fault` in them.
NodeLoad GenerateNode(int index, int frames, int batch_frames, double start_ts,
                      const NodeFault& fault);

// `batch` of `load` as a Prometheus remote-write request body (snappy
// protobuf): one TimeSeries per series, every frame's sample of it.
std::string RemoteWriteBody(const NodeLoad& load, const v1::FrameBatch& batch);

// Streams `load` with up to `window` unacked batches; appends each batch's
// ack latency (seconds) to `latencies`. The stream opens at `start`.
// Paced (pace_hz > 0), batch k is sent at `start` + k / pace_hz, as an
// agent sends one a tick. Sets `*acked_batches` to the batches the server
// acked. False on a stream error.
bool StreamNode(const std::shared_ptr<grpc::Channel>& channel, const NodeLoad& load,
                int window, double pace_hz, Steady::time_point start,
                std::vector<double>* latencies, std::atomic<int64_t>* fault_sent_ns,
                uint64_t* acked_batches);

// The value of `arg` when it is "--`name`=value", else nullptr: the
// benchmarks' flags.
const char* FlagValue(const char* arg, const char* name);

// Starts `argv` (stdout and stderr to the file `log`) and waits until
// http://127.0.0.1:`port``path` answers 200; its pid, or -1 (the process
// killed, a line on stderr) when it did not within 30 s.
pid_t StartServer(std::vector<std::string> argv, const std::string& log, int port,
                  const char* path);
// Sends SIGTERM to `pid` and waits for it to exit.
void Stop(pid_t pid);

// CPU seconds (user + system) used so far by process `pid`.
double ProcessCpuSeconds(pid_t pid);
// Resident set size of `pid` in bytes.
uint64_t ProcessRssBytes(pid_t pid);
// Bytes of the regular files under `dir`; 0 when it does not exist.
uint64_t DirBytes(const std::string& dir);
// The `p` quantile (0..1) of `v`; 0 for none.
double Percentile(std::vector<double> v, double p);

}  // namespace vigil::bench

#endif  // VIGIL_BENCH_BENCH_LOAD_H_
