// CPU time and memory of the calling process, for the self-metrics of the
// server and the agent (process_cpu_seconds_total and friends).
#ifndef VIGIL_COMMON_PROCESS_USAGE_H_
#define VIGIL_COMMON_PROCESS_USAGE_H_

namespace vigil {

// CPU time and memory of this process.
struct ProcessUsage {
  double cpu_seconds = 0;     // user + system
  double resident_bytes = 0;  // current RSS
  double max_resident_bytes = 0;
  double start_time_seconds = 0;  // Unix time the process started
  double open_fds = 0;
};

// Reads the usage of the calling process (getrusage, /proc/self); fields
// it cannot read stay 0.
ProcessUsage ReadProcessUsage();

// Bytes the process's heap has handed out and not taken back (glibc's
// mallinfo2: in-use arena chunks plus mmapped ones). Resident memory above
// it is the allocator's free pages, code, stacks and mapped files. Walks
// every arena's free lists under the arena's lock: 280 ms with 2 M free
// chunks (a heap with half its 940 MiB freed in small pieces), during
// which allocations in that arena wait. For a person looking into memory,
// not for every scrape. 0 where glibc is not the allocator.
double HeapInUseBytes();

}  // namespace vigil

#endif  // VIGIL_COMMON_PROCESS_USAGE_H_
