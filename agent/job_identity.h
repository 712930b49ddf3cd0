// Which scheduler job a process on this node belongs to, learned from the
// kernel and the scheduler - never from the process itself (its hello, its
// environment), which its user controls. The training endpoint
// (agent/training_endpoint.h) checks every connecting rank's job claim with
// it; docs/SECURITY.md explains why.
//
// Where the job comes from, in order:
//   1. /proc/PID/cgroup. Slurm's cgroup plugins put a job's processes in
//      .../job_ID/... (cgroup v1: /slurm/uid_UID/job_ID/step_S/task_T;
//      v2: /system.slice/slurmstepd.scope/job_ID/step_S/user/task_T). The
//      kubelet puts a pod's containers in .../pod<UID>/... (cgroupfs driver)
//      or .../kubepods-<qos>-pod<UID with _ for ->.slice (systemd driver).
//      An unprivileged process cannot leave its cgroup.
//   2. `scontrol pidinfo PID`, for clusters whose proctrack plugin keeps no
//      cgroup (proctrack/linuxproc): slurmd answers from its own tracking of
//      the job's process tree.
// A Slurm job is then checked with `squeue -h -j ID -o %U|%T|%j`: it must be
// running and owned by the connecting uid (root's processes may run any
// job's work). A pod is taken as the cgroup says; its UID is the identity.
#ifndef VIGIL_AGENT_JOB_IDENTITY_H_
#define VIGIL_AGENT_JOB_IDENTITY_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/clock.h"

namespace vigil::agent {

// The scheduler job of a process.
struct ProcessJob {
  std::string scheduler;  // "slurm" or "kubernetes"
  std::string job_id;     // Slurm job id (e.g. "4242"); Kubernetes pod UID
  std::string job_name;   // Slurm job name; empty for pods
};

// The job named by the text of a /proc/PID/cgroup file, or nullopt when it
// names none. For a Slurm cgroup v1 path, `*cgroup_uid` (when not null) is
// set to its uid_N component.
std::optional<ProcessJob> JobFromCgroup(std::string_view cgroup_text,
                                        std::optional<uint32_t>* cgroup_uid);

// The job id in the output of `scontrol pidinfo PID` ("Slurm JobId=42 ends
// at ...", or "Slurm job id 42 ..." before Slurm 22), or nullopt when it
// names none.
std::optional<std::string> JobFromPidinfo(std::string_view output);

// A Slurm job as `squeue -h -j ID -o %U|%T|%j` prints it.
struct SlurmJobInfo {
  uint32_t uid = 0;
  std::string state;  // e.g. "RUNNING"
  std::string name;
};

// Parses that output (one line). kNotFound for empty output (no such job),
// kInvalidArgument for anything else that is not "UID|STATE|NAME".
absl::StatusOr<SlurmJobInfo> ParseSqueueJob(std::string_view output);

// Finds the job of a connected process.
class ProcessJobResolver {
 public:
  virtual ~ProcessJobResolver() = default;
  // The job that process `pid`, connected with uid `uid` (both from the
  // kernel: SO_PEERCRED), runs in. kNotFound when it runs in none;
  // kPermissionDenied when the job is not `uid`'s (and uid is not 0) or is
  // not running; kUnavailable when the scheduler could not be asked.
  virtual absl::StatusOr<ProcessJob> Resolve(pid_t pid, uid_t uid) = 0;
};

// Runs a scheduler client program and returns its stdout. A non-zero exit
// is an error whose message holds its stderr.
using SchedulerCommand =
    std::function<absl::StatusOr<std::string>(const std::vector<std::string>&)>;

struct SchedulerJobResolverOptions {
  // Root of procfs (tests point it at a fixture tree).
  std::string proc_root = "/proc";
  // How scontrol and squeue are run; empty runs them with a 10 s timeout
  // (common/command_runner.h).
  SchedulerCommand run;
  // A job's owner and state are asked again after this long.
  double cache_seconds = 30;
  // Ages the cache. Not owned; null means RealClock().
  Clock* clock = nullptr;
};

// The ProcessJobResolver of a real node (see the file comment).
// Thread-safe.
class SchedulerJobResolver : public ProcessJobResolver {
 public:
  explicit SchedulerJobResolver(SchedulerJobResolverOptions options);
  absl::StatusOr<ProcessJob> Resolve(pid_t pid, uid_t uid) override;

 private:
  struct Cached {
    double at = 0;
    SlurmJobInfo info;
  };
  absl::StatusOr<SlurmJobInfo> SlurmJob(const std::string& job_id);

  const SchedulerJobResolverOptions options_;
  Clock* const clock_;
  std::mutex mu_;
  std::map<std::string, Cached> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_JOB_IDENTITY_H_
