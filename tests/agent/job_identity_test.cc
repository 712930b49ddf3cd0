// Which job a process runs in: cgroup paths of Slurm (v1, v2) and the
// kubelet (cgroupfs, systemd), scontrol pidinfo and squeue output, and the
// resolver on a fixture /proc tree with a fake scheduler.
#include "agent/job_identity.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

using ::testing::HasSubstr;

TEST(JobFromCgroupTest, SlurmCgroupV1NamesJobAndUid) {
  std::optional<uint32_t> uid;
  std::optional<ProcessJob> job = JobFromCgroup(
      "12:pids:/\n"
      "4:memory:/slurm/uid_1000/job_4242/step_0/task_3\n"
      "3:freezer:/slurm/uid_1000/job_4242/step_0\n",
      &uid);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->scheduler, "slurm");
  EXPECT_EQ(job->job_id, "4242");
  EXPECT_EQ(uid, 1000u);
}

TEST(JobFromCgroupTest, SlurmCgroupV2) {
  std::optional<uint32_t> uid;
  std::optional<ProcessJob> job = JobFromCgroup(
      "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n",
      &uid);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->job_id, "77");
  EXPECT_FALSE(uid.has_value());
}

TEST(JobFromCgroupTest, KubernetesPods) {
  std::optional<ProcessJob> cgroupfs = JobFromCgroup(
      "0::/kubepods/burstable/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/"
      "cri-containerd-abc\n",
      nullptr);
  ASSERT_TRUE(cgroupfs.has_value());
  EXPECT_EQ(cgroupfs->scheduler, "kubernetes");
  EXPECT_EQ(cgroupfs->job_id, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  std::optional<ProcessJob> systemd = JobFromCgroup(
      "0::/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-pod0F1E2D3C_4B5A_6978_8A9B_0C1D2E3F4A5B.slice/"
      "cri-containerd-abc.scope\n",
      nullptr);
  ASSERT_TRUE(systemd.has_value());
  EXPECT_EQ(systemd->job_id, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
}

TEST(JobFromCgroupTest, NoJobOrContradictionsNameNone) {
  EXPECT_FALSE(JobFromCgroup("0::/user.slice/user-1000.slice/session-3.scope\n",
                             nullptr));
  // A directory merely called job_5 outside Slurm's tree is not a job.
  EXPECT_FALSE(JobFromCgroup("0::/home/job_5\n", nullptr));
  EXPECT_FALSE(JobFromCgroup("0::/kubepods/podnot-a-uid\n", nullptr));
  EXPECT_FALSE(JobFromCgroup("garbage\n\n:::\n", nullptr));
  // Two hierarchies naming two jobs: trust neither.
  EXPECT_FALSE(JobFromCgroup("4:memory:/slurm/uid_1/job_1/step_0\n"
                             "3:freezer:/slurm/uid_1/job_2/step_0\n",
                             nullptr));
}

TEST(JobFromPidinfoTest, BothSlurmWordings) {
  EXPECT_EQ(JobFromPidinfo("Slurm JobId=42 ends at Thu Dec 03 16:21:01 2026\n"
                           "Job remaining time is 60 seconds\n"),
            "42");
  EXPECT_EQ(JobFromPidinfo("Slurm job id 7 ends at Thu Dec 03 2026\n"), "7");
  EXPECT_FALSE(JobFromPidinfo("Failed to locate job for requested pid\n"));
  EXPECT_FALSE(JobFromPidinfo("Slurm JobId=x ends"));
}

TEST(ParseSqueueJobTest, Fields) {
  absl::StatusOr<SlurmJobInfo> info = ParseSqueueJob("1000|RUNNING|llm|a\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->uid, 1000u);
  EXPECT_EQ(info->state, "RUNNING");
  EXPECT_EQ(info->name, "llm|a");  // names may hold the separator
  EXPECT_TRUE(absl::IsNotFound(ParseSqueueJob("\n").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSqueueJob("bob|RUNNING|x").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSqueueJob("1|x").status()));
}

// A fixture /proc and a scheduler that answers from tables.
class ResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("vigil-proc-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Process(int pid, const std::string& cgroup) {
    std::filesystem::create_directories(root_ / std::to_string(pid));
    std::ofstream(root_ / std::to_string(pid) / "cgroup") << cgroup;
  }
  SchedulerJobResolver Resolver() {
    SchedulerJobResolverOptions o;
    o.proc_root = root_.string();
    o.clock = &clock_;
    o.run = [this](const std::vector<std::string>& argv)
        -> absl::StatusOr<std::string> {
      const std::string line = absl::StrJoin(argv, " ");
      calls_.push_back(line);
      auto it = answers_.find(line);
      if (it == answers_.end())
        return absl::UnavailableError("slurm_load_jobs error: Invalid job id specified");
      return it->second;
    };
    return SchedulerJobResolver(std::move(o));
  }

  std::filesystem::path root_;
  FakeClock clock_;
  std::map<std::string, absl::StatusOr<std::string>> answers_;
  std::vector<std::string> calls_;
};

TEST_F(ResolverTest, ARunningJobOfTheConnectingUser) {
  Process(100, "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n");
  answers_["squeue -h -j 42 -o %U|%T|%j"] = "1000|RUNNING|llama\n";
  SchedulerJobResolver resolver = Resolver();
  absl::StatusOr<ProcessJob> job = resolver.Resolve(100, 1000);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id, "42");
  EXPECT_EQ(job->job_name, "llama");
  // Root's processes (e.g. a prolog) may run any job's work.
  EXPECT_TRUE(resolver.Resolve(100, 0).ok());
  // The owner is asked once per cache period.
  EXPECT_EQ(calls_.size(), 1u);
  clock_.Advance(31);
  EXPECT_TRUE(resolver.Resolve(100, 1000).ok());
  EXPECT_EQ(calls_.size(), 2u);
}

TEST_F(ResolverTest, AnotherUsersJobIsRefused) {
  Process(100, "0::/system.slice/slurmstepd.scope/job_42/step_0\n");
  answers_["squeue -h -j 42 -o %U|%T|%j"] = "1000|RUNNING|llama\n";
  SchedulerJobResolver resolver = Resolver();
  absl::StatusOr<ProcessJob> job = resolver.Resolve(100, 2000);
  EXPECT_TRUE(absl::IsPermissionDenied(job.status())) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("belongs to uid 1000"));
  // A v1 path of another uid is refused before Slurm is asked.
  Process(101, "4:memory:/slurm/uid_1000/job_42/step_0\n");
  calls_.clear();
  EXPECT_TRUE(absl::IsPermissionDenied(resolver.Resolve(101, 2000).status()));
  EXPECT_TRUE(calls_.empty());
}

TEST_F(ResolverTest, AJobThatIsNotRunningIsRefused) {
  Process(100, "0::/system.slice/slurmstepd.scope/job_42/step_0\n");
  answers_["squeue -h -j 42 -o %U|%T|%j"] = "1000|SUSPENDED|llama\n";
  SchedulerJobResolver resolver = Resolver();
  EXPECT_TRUE(absl::IsPermissionDenied(resolver.Resolve(100, 1000).status()));
  Process(101, "0::/system.slice/slurmstepd.scope/job_43/step_0\n");
  // squeue no longer knows job 43.
  EXPECT_TRUE(absl::IsPermissionDenied(resolver.Resolve(101, 1000).status()));
}

TEST_F(ResolverTest, PidinfoWhenTheCgroupNamesNoJob) {
  Process(100, "0::/system.slice/slurmd.service\n");
  answers_["scontrol pidinfo 100"] = "Slurm JobId=9 ends at Thu Dec 03\n";
  answers_["squeue -h -j 9 -o %U|%T|%j"] = "0|RUNNING|wrap\n";
  SchedulerJobResolver resolver = Resolver();
  absl::StatusOr<ProcessJob> job = resolver.Resolve(100, 0);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id, "9");
}

TEST_F(ResolverTest, OutsideAnyJobIsNotFound) {
  Process(100, "0::/user.slice/user-1000.slice/session-3.scope\n");
  answers_["scontrol pidinfo 100"] =
      absl::UnavailableError("exited with 1: Failed to locate job for requested pid");
  SchedulerJobResolver resolver = Resolver();
  EXPECT_TRUE(absl::IsNotFound(resolver.Resolve(100, 1000).status()));
  // No procfs entry (the process is gone) and no Slurm at all.
  answers_["scontrol pidinfo 555"] = absl::NotFoundError("no scontrol");
  EXPECT_TRUE(absl::IsNotFound(resolver.Resolve(555, 1000).status()));
  EXPECT_TRUE(absl::IsNotFound(resolver.Resolve(0, 1000).status()));
}

TEST_F(ResolverTest, SlurmDownIsUnavailable) {
  Process(100, "0::/system.slice/slurmstepd.scope/job_42/step_0\n");
  answers_["squeue -h -j 42 -o %U|%T|%j"] =
      absl::UnavailableError("exited with 1: Unable to contact slurm controller");
  SchedulerJobResolver resolver = Resolver();
  EXPECT_TRUE(absl::IsUnavailable(resolver.Resolve(100, 1000).status()));
}

TEST_F(ResolverTest, PodsAreTakenFromTheCgroup) {
  Process(100, "0::/kubepods/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/c1\n");
  SchedulerJobResolver resolver = Resolver();
  absl::StatusOr<ProcessJob> job = resolver.Resolve(100, 1000);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->scheduler, "kubernetes");
  EXPECT_TRUE(calls_.empty());
}

}  // namespace
}  // namespace vigil::agent
