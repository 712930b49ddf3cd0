// The Slurm backend against fake scontrol/squeue/scancel scripts that
// record their exact argv and answer from files the test writes.
#include "actuator/slurm_scheduler.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actuator/test_util.h"

namespace vigil::actuator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadLines;
using testing::ScratchDir;
using testing::WriteFile;
using Argv = std::vector<std::string>;

constexpr double kStart = 2000000000;

// The file stem a fake program answers `argv` from (see kFakeProgram).
std::string AnswerKey(const Argv& argv) {
  std::string key;
  for (const std::string& arg : argv) {
    if (!key.empty()) key += '_';
    key += arg;
  }
  for (char& c : key) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '=' &&
        c != '-') {
      c = '_';
    }
  }
  return key;
}

// A fake client program: appends its name and argv (tab-separated) to
// calls.log, then runs/prints/exits as the files <key>.run, <key>.out,
// <key>.err and <key>.exit say.
constexpr char kFakeProgram[] = R"sh(#!/bin/sh
dir='@DIR@'
{ printf '%s' '@NAME@'; for a in "$@"; do printf '\t%s' "$a"; done; printf '\n'; } >> "$dir/calls.log"
key=$(printf '%s' '@NAME@'; for a in "$@"; do printf '_%s' "$a"; done)
key=$(printf '%s' "$key" | tr -c 'A-Za-z0-9_.=-' '_')
if [ -f "$dir/$key.run" ]; then sh "$dir/$key.run"; fi
if [ -f "$dir/$key.out" ]; then cat "$dir/$key.out"; fi
if [ -f "$dir/$key.err" ]; then cat "$dir/$key.err" >&2; fi
if [ -f "$dir/$key.exit" ]; then exit "$(cat "$dir/$key.exit")"; fi
exit 0
)sh";

class SlurmSchedulerTest : public ::testing::Test {
 protected:
  SlurmSchedulerTest() {
    for (const char* name : {"scontrol", "squeue", "scancel"}) {
      std::string script = kFakeProgram;
      for (auto [from, to] : {std::pair<std::string, std::string>{"@DIR@", dir_.path()},
                              {"@NAME@", name}}) {
        for (size_t at; (at = script.find(from)) != std::string::npos;) {
          script.replace(at, from.size(), to);
        }
      }
      WriteFile(dir_.File(name), script, /*executable=*/true);
    }
    mkdir(dir_.File("checkpoints").c_str(), 0755);
    options_.scontrol = dir_.File("scontrol");
    options_.squeue = dir_.File("squeue");
    options_.scancel = dir_.File("scancel");
    options_.checkpoint_dir = dir_.File("checkpoints");
    options_.checkpoint_poll_seconds = 1;
  }

  // Makes the fake answer `argv` (argv[0] is the program's bare name).
  void Answer(const Argv& argv, const std::string& out, const std::string& err = "",
              int exit_code = 0) {
    std::string key = AnswerKey(argv);
    WriteFile(dir_.File(key + ".out"), out);
    if (!err.empty()) WriteFile(dir_.File(key + ".err"), err);
    if (exit_code != 0) WriteFile(dir_.File(key + ".exit"), std::to_string(exit_code));
  }
  // Makes the fake run the shell commands `script` when called with `argv`.
  void OnCall(const Argv& argv, const std::string& script) {
    WriteFile(dir_.File(AnswerKey(argv) + ".run"), script);
  }
  void JobState(const std::string& id, const std::string& state) {
    Answer({"squeue", "-h", "-j", id, "-o", "%T"}, state + "\n");
  }
  std::vector<Argv> Calls() {
    std::vector<Argv> calls;
    for (const std::string& line : ReadLines(dir_.File("calls.log"))) {
      calls.push_back(absl::StrSplit(line, '\t'));
    }
    return calls;
  }
  ActionRequest Request(ActionType type, const std::string& job, const std::string& node) {
    ActionRequest request;
    request.id = "act-1";
    request.type = type;
    request.incident_id = "inc-7";
    request.job = job;
    request.node = node;
    request.reason = "XID 79 on GPU 3";
    request.checkpoint_timeout_seconds = 30;
    request.received_at = clock_.Now();
    return request;
  }
  SlurmScheduler Slurm() { return SlurmScheduler(options_, clock_); }

  ScratchDir dir_;
  testing::AutoAdvanceClock clock_{kStart};
  SlurmOptions options_;
};

TEST_F(SlurmSchedulerTest, CordonDrainsTheNodeWithTheIncidentAsReason) {
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Cordon(Request(ActionType::kCordon, "", "gpu-node-3"));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_THAT(Calls(), ElementsAre(Argv{"scontrol", "update", "NodeName=gpu-node-3",
                                        "State=DRAIN", "Reason=vigil inc-7: XID 79 on GPU 3"}));
  EXPECT_EQ(outcome->detail,
            "$ " + dir_.File("scontrol") +
                " update NodeName=gpu-node-3 State=DRAIN 'Reason=vigil inc-7: XID 79 on GPU 3'");
  EXPECT_EQ(outcome->checkpoint, "");
}

TEST_F(SlurmSchedulerTest, ReasonLosesControlCharactersAndStaysOneArgument) {
  ActionRequest request = Request(ActionType::kCordon, "", "n1");
  request.reason = "bad\nline; $(rm -rf /)";
  ASSERT_TRUE(Slurm().Cordon(request).ok());
  EXPECT_THAT(Calls(), ElementsAre(Argv{"scontrol", "update", "NodeName=n1", "State=DRAIN",
                                        "Reason=vigil inc-7: bad line; $(rm -rf /)"}));
}

TEST_F(SlurmSchedulerTest, UncordonResumesAndToleratesANodeThatIsNotDrained) {
  Answer({"scontrol", "update", "NodeName=n1", "State=RESUME"}, "",
         "slurm_update error: Invalid node state specified\n", 1);
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Uncordon(Request(ActionType::kUncordon, "", "n1"));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_THAT(Calls(), ElementsAre(Argv{"scontrol", "update", "NodeName=n1", "State=RESUME"}));
  EXPECT_THAT(outcome->detail, HasSubstr("Invalid node state specified"));
}

TEST_F(SlurmSchedulerTest, UnknownNodeIsNotFound) {
  Answer({"scontrol", "update", "NodeName=n9", "State=DRAIN", "Reason=vigil inc-7: XID 79 on GPU 3"},
         "", "slurm_update error: Invalid node name specified\n", 1);
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Cordon(Request(ActionType::kCordon, "", "n9"));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(outcome.status().message()),
              HasSubstr("stderr: slurm_update error: Invalid node name specified"));
}

TEST_F(SlurmSchedulerTest, FailingCommandIsUnavailableWithItsStderr) {
  Answer({"scontrol", "update", "NodeName=n1", "State=RESUME"}, "",
         "slurm_update error: Unable to contact slurm controller\n", 1);
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Uncordon(Request(ActionType::kUncordon, "", "n1"));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(outcome.status().message()),
              HasSubstr("Unable to contact slurm controller"));
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("exit status 1"));
}

TEST_F(SlurmSchedulerTest, PauseSuspendsARunningJobAndHoldsAPendingOne) {
  JobState("101", "RUNNING");
  JobState("102", "PENDING");
  ASSERT_TRUE(Slurm().Pause(Request(ActionType::kPause, "101", "")).ok());
  ASSERT_TRUE(Slurm().Pause(Request(ActionType::kPause, "102", "")).ok());
  EXPECT_THAT(Calls(), ElementsAre(Argv{"squeue", "-h", "-j", "101", "-o", "%T"},
                                   Argv{"scontrol", "suspend", "101"},
                                   Argv{"squeue", "-h", "-j", "102", "-o", "%T"},
                                   Argv{"scontrol", "hold", "102"}));
}

TEST_F(SlurmSchedulerTest, PauseLeavesASuspendedJobAndRefusesAFinishedOne) {
  JobState("101", "SUSPENDED");
  JobState("102", "COMPLETED");
  absl::StatusOr<ActionOutcome> suspended = Slurm().Pause(Request(ActionType::kPause, "101", ""));
  ASSERT_TRUE(suspended.ok()) << suspended.status();
  EXPECT_THAT(suspended->detail, HasSubstr("job 101 is already suspended"));
  absl::StatusOr<ActionOutcome> finished = Slurm().Pause(Request(ActionType::kPause, "102", ""));
  EXPECT_EQ(finished.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(finished.status().message()), HasSubstr("job 102 is COMPLETED"));
  EXPECT_EQ(Calls().size(), 2u);  // only the two squeue calls
}

TEST_F(SlurmSchedulerTest, PauseOfAJobSlurmDoesNotKnowIsNotFound) {
  Answer({"squeue", "-h", "-j", "999", "-o", "%T"}, "",
         "slurm_load_jobs error: Invalid job id specified\n", 1);
  EXPECT_EQ(Slurm().Pause(Request(ActionType::kPause, "999", "")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SlurmSchedulerTest, AJobNameActsOnEveryJobOfThatName) {
  Answer({"squeue", "-h", "--name=llama-70b", "-o", "%i"}, "201\n202\n");
  JobState("201", "RUNNING");
  JobState("202", "RUNNING");
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Pause(Request(ActionType::kPause, "llama-70b", ""));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_THAT(Calls(), ElementsAre(Argv{"squeue", "-h", "--name=llama-70b", "-o", "%i"},
                                   Argv{"squeue", "-h", "-j", "201", "-o", "%T"},
                                   Argv{"scontrol", "suspend", "201"},
                                   Argv{"squeue", "-h", "-j", "202", "-o", "%T"},
                                   Argv{"scontrol", "suspend", "202"}));
}

TEST_F(SlurmSchedulerTest, AJobNameWithNoJobsIsNotFound) {
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Pause(Request(ActionType::kPause, "nobody", ""));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("no Slurm job named nobody"));
}

TEST_F(SlurmSchedulerTest, CheckpointSignalsWaitsForTheConfirmationThenSuspends) {
  JobState("123", "RUNNING");
  // The job saves and confirms as soon as it gets the signal.
  OnCall({"scancel", "--signal=USR1", "--full", "123"},
         "touch -d @" + std::to_string(static_cast<int64_t>(kStart)) + " '" +
             dir_.File("checkpoints/123.checkpointed") + "'\n");
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().CheckpointThenPause(Request(ActionType::kCheckpointThenPause, "123", ""));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->checkpoint, "confirmed");
  EXPECT_THAT(Calls(), ElementsAre(Argv{"scancel", "--signal=USR1", "--full", "123"},
                                   Argv{"squeue", "-h", "-j", "123", "-o", "%T"},
                                   Argv{"scontrol", "suspend", "123"}));
  EXPECT_THAT(outcome->detail, HasSubstr("checkpoint confirmed"));
  EXPECT_EQ(clock_.waits(), 0);
}

TEST_F(SlurmSchedulerTest, CheckpointTimesOutAndPausesAnyway) {
  JobState("123", "RUNNING");
  options_.checkpoint_signal = "USR2";
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().CheckpointThenPause(Request(ActionType::kCheckpointThenPause, "123", ""));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->checkpoint, "timed_out");
  EXPECT_EQ(Calls().front(), (Argv{"scancel", "--signal=USR2", "--full", "123"}));
  EXPECT_EQ(Calls().back(), (Argv{"scontrol", "suspend", "123"}));
  EXPECT_EQ(clock_.waits(), 30);  // 30 s in polls of 1 s
  EXPECT_EQ(clock_.Now(), kStart + 30);
  EXPECT_THAT(outcome->detail, HasSubstr("no checkpoint confirmation in time"));
}

TEST_F(SlurmSchedulerTest, ACheckpointFromBeforeTheRequestDoesNotCount) {
  JobState("123", "RUNNING");
  WriteFile(dir_.File("checkpoints/123.checkpointed"), "");
  struct timespec old_times[2] = {{static_cast<time_t>(kStart) - 10, 0},
                                  {static_cast<time_t>(kStart) - 10, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, dir_.File("checkpoints/123.checkpointed").c_str(), old_times, 0), 0);
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().CheckpointThenPause(Request(ActionType::kCheckpointThenPause, "123", ""));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->checkpoint, "timed_out");
}

TEST_F(SlurmSchedulerTest, CheckpointOfAnUnknownJobIsNotFound) {
  Answer({"scancel", "--signal=USR1", "--full", "999"}, "",
         "scancel: error: Kill job error on job id 999: Invalid job id specified\n", 1);
  EXPECT_EQ(Slurm()
                .CheckpointThenPause(Request(ActionType::kCheckpointThenPause, "999", ""))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Calls().size(), 1u);
}

TEST_F(SlurmSchedulerTest, ReportShowsTheNodeAndTheJobs) {
  Answer({"scontrol", "show", "node", "n1"}, "NodeName=n1 State=IDLE+DRAIN\n");
  Answer({"scontrol", "show", "job", "123"}, "JobId=123 JobState=SUSPENDED\n");
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Report(Request(ActionType::kDiagnosticReport, "123", "n1"));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_THAT(outcome->detail, HasSubstr("show node n1\nNodeName=n1 State=IDLE+DRAIN\n"));
  EXPECT_THAT(outcome->detail, HasSubstr("show job 123\nJobId=123 JobState=SUSPENDED"));
}

TEST_F(SlurmSchedulerTest, UnsafeNamesAreRefusedBeforeAnythingRuns) {
  for (const std::string& name :
       {std::string("n1; rm -rf /"), std::string("-h"), std::string("$(id)"),
        std::string("a b"), std::string("x\ny"), std::string(129, 'a'), std::string("")}) {
    SlurmScheduler scheduler = Slurm();
    for (ActionType type : {ActionType::kCordon, ActionType::kUncordon}) {
      EXPECT_EQ(Perform(scheduler, Request(type, "", name)).status().code(),
                absl::StatusCode::kInvalidArgument)
          << name;
    }
    for (ActionType type : {ActionType::kPause, ActionType::kCheckpointThenPause}) {
      EXPECT_EQ(Perform(scheduler, Request(type, name, "")).status().code(),
                absl::StatusCode::kInvalidArgument)
          << name;
    }
    if (name.empty()) continue;  // a report of only the node is fine
    EXPECT_EQ(scheduler.Report(Request(ActionType::kDiagnosticReport, name, "n1")).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(scheduler.Report(Request(ActionType::kDiagnosticReport, "1", name)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_THAT(std::string(ValidateSlurmName("node", "n1; rm -rf /").message()),
              HasSubstr("node 'n1; rm -rf /' is not a valid Slurm name"));
  EXPECT_TRUE(Calls().empty());
}

TEST_F(SlurmSchedulerTest, AMissingClientProgramIsUnavailable) {
  options_.scontrol = dir_.File("no-such-scontrol");
  absl::StatusOr<ActionOutcome> outcome =
      Slurm().Cordon(Request(ActionType::kCordon, "", "n1"));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("cannot run"));
}

}  // namespace
}  // namespace vigil::actuator
