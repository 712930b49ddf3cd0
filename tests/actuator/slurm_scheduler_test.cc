// The Slurm backend against fake scontrol/squeue/scancel scripts that
// record their exact argv and answer from files the test writes: actions,
// and job-state queries (squeue rows -> states, nodes, newest of a name).
#include "actuator/slurm_scheduler.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actuator/test_util.h"

namespace vigil::actuator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
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

// The squeue a query runs, with its filter ("--jobs=..." / "--name=...").
Argv QueryArgv(const std::string& filter) {
  Argv argv = {"squeue", "-h", "-a", "-r", "-t", "all", "-o", "%A|%F|%K|%i|%T|%V|%e|%u|%N|%j"};
  if (!filter.empty()) argv.push_back(filter);
  return argv;
}

// The fields of a JobStatus that a test compares, as one line.
std::string Line(const JobStatus& s) {
  std::string nodes;
  for (const std::string& node : s.nodes) nodes += (nodes.empty() ? "" : ",") + node;
  return s.job + " -> " + s.job_id + " " + std::string(JobStateName(s.state)) + " " +
         s.scheduler_state + " [" + nodes + "] name=" + s.name + " user=" + s.user +
         (s.end_time ? " end=" + std::to_string(static_cast<int64_t>(*s.end_time)) : "");
}

std::vector<std::string> Lines(const absl::StatusOr<std::vector<JobStatus>>& answers) {
  std::vector<std::string> lines;
  if (!answers.ok()) return {answers.status().ToString()};
  for (const JobStatus& status : *answers) lines.push_back(Line(status));
  return lines;
}

TEST_F(SlurmSchedulerTest, QueryAsksOnceForAllIdsAndOnceForAllNames) {
  Answer(QueryArgv("--jobs=101,102,103"),
         "101|101|N/A|101|RUNNING|1764000000|NONE|alice|gpu[003-004,001]|llama-70b\n"
         "102|102|N/A|102|COMPLETED|1764000000|1764000600|bob|gpu007|eval\n");
  Answer(QueryArgv("--name=llama-70b,nobody"),
         "101|101|N/A|101|RUNNING|1764000000|NONE|alice|gpu[003-004,001]|llama-70b\n");
  absl::StatusOr<std::vector<JobStatus>> answers =
      Slurm().QueryJobs({"102", "llama-70b", "103", "101", "nobody", "102"});
  EXPECT_THAT(Lines(answers),
              ElementsAre("102 -> 102 ended COMPLETED [gpu007] name=eval user=bob end=1764000600",
                          "llama-70b -> 101 running RUNNING [gpu001,gpu003,gpu004] "
                          "name=llama-70b user=alice",
                          "103 ->  not_found  [] name= user=",
                          "101 -> 101 running RUNNING [gpu001,gpu003,gpu004] "
                          "name=llama-70b user=alice",
                          "nobody ->  not_found  [] name= user=",
                          "102 -> 102 ended COMPLETED [gpu007] name=eval user=bob end=1764000600"));
  EXPECT_THAT(Calls(), ElementsAre(QueryArgv("--jobs=101,102,103"),
                                   QueryArgv("--name=llama-70b,nobody")));
}

TEST_F(SlurmSchedulerTest, QueryPrintsTimesAsUnixSecondsAndDropsInheritedFilters) {
  setenv("SQUEUE_STATES", "RUNNING", 1);
  setenv("SQUEUE_PARTITION", "debug", 1);
  setenv("SLURM_TIME_FORMAT", "standard", 1);
  OnCall(QueryArgv("--jobs=5"),
         "echo \"$SLURM_TIME_FORMAT|${SQUEUE_STATES-unset}|${SQUEUE_PARTITION-unset}\" > '" +
             dir_.File("env.txt") + "'\n");
  absl::StatusOr<std::vector<JobStatus>> answers = Slurm().QueryJobs({"5"});
  unsetenv("SQUEUE_STATES");
  unsetenv("SQUEUE_PARTITION");
  unsetenv("SLURM_TIME_FORMAT");
  ASSERT_TRUE(answers.ok()) << answers.status();
  EXPECT_EQ(testing::ReadFile(dir_.File("env.txt")), "%s|unset|unset\n");
}

TEST_F(SlurmSchedulerTest, QueryOfOneUnknownIdIsNotFound) {
  // squeue fails for a single unknown id; with several it lists the others.
  Answer(QueryArgv("--jobs=999"), "", "slurm_load_jobs error: Invalid job id specified\n", 1);
  EXPECT_THAT(Lines(Slurm().QueryJobs({"999"})), ElementsAre("999 ->  not_found  [] name= user="));
}

TEST_F(SlurmSchedulerTest, QueryOfIdsNoSlurmJobCanHaveRunsNothingForThem) {
  EXPECT_THAT(Lines(Slurm().QueryJobs({"0", "4294967294", "99999999999999999999999"})),
              ElementsAre("0 ->  not_found  [] name= user=",
                          "4294967294 ->  not_found  [] name= user=",
                          "99999999999999999999999 ->  not_found  [] name= user="));
  EXPECT_THAT(Calls(), IsEmpty());
}

TEST_F(SlurmSchedulerTest, QueryOfIdsSqueueRefusesListsEveryJob) {
  // squeue -j takes ids up to 2^31 - 1 and refuses the whole list beyond.
  Answer(QueryArgv(""),
         "3000000000|3000000000|N/A|3000000000|RUNNING|1764000000|NONE|alice|n1|fed\n"
         "7|7|N/A|7|RUNNING|1764000000|NONE|alice|n2|other\n");
  EXPECT_THAT(Lines(Slurm().QueryJobs({"3000000000", "7"})),
              ElementsAre("3000000000 -> 3000000000 running RUNNING [n1] name=fed user=alice",
                          "7 -> 7 running RUNNING [n2] name=other user=alice"));
  EXPECT_THAT(Calls(), ElementsAre(QueryArgv("")));
}

TEST_F(SlurmSchedulerTest, QueryOfAnArrayAnswersForTheWholeArrayOrOneElement) {
  // Array 300: element 1 (raw id 301) done, 2 (raw 302) running, 3 and 4
  // pending (they share the array's raw id until they start).
  Answer(QueryArgv("--jobs=300,302"),
         "301|300|1|300_1|COMPLETED|1764000000|1764000100|alice|n1|sweep\n"
         "302|300|2|300_2|RUNNING|1764000000|NONE|alice|n2|sweep\n"
         "300|300|3|300_3|PENDING|1764000000|NONE|alice||sweep\n"
         "300|300|4|300_4|PENDING|1764000000|NONE|alice||sweep\n");
  EXPECT_THAT(Lines(Slurm().QueryJobs({"300", "300_1", "300_3", "302", "300_9"})),
              ElementsAre("300 -> 300 running RUNNING [n2] name=sweep user=alice",
                          "300_1 -> 300_1 ended COMPLETED [n1] name=sweep user=alice end=1764000100",
                          "300_3 -> 300_3 pending PENDING [] name=sweep user=alice",
                          "302 -> 300_2 running RUNNING [n2] name=sweep user=alice",
                          "300_9 ->  not_found  [] name= user="));
  // Elements are asked for by their array's id: squeue -j with an element
  // index beyond the array's crashes squeue 22.05.
  EXPECT_THAT(Calls(), ElementsAre(QueryArgv("--jobs=300,302")));
}

TEST_F(SlurmSchedulerTest, QueryOfANameAnswersForItsNewestJob) {
  Answer(QueryArgv("--name=tie,train"),
         "40|40|N/A|40|RUNNING|1764000000|NONE|alice|n1|train\n"
         "41|41|N/A|41|PENDING|1764000500|NONE|alice||train\n"
         "39|39|N/A|39|CANCELLED|1763990000|1763999000|alice|n4|train\n"
         "50|50|N/A|50|RUNNING|1764000000|NONE|bob|n2|tie\n"
         "51|51|N/A|51|FAILED|1764000000|1764000300|bob|n3|tie\n");
  EXPECT_THAT(Lines(Slurm().QueryJobs({"train", "tie"})),
              ElementsAre("train -> 41 pending PENDING [] name=train user=alice",
                          // Submitted in the same second: the higher id came later.
                          "tie -> 51 ended FAILED [n3] name=tie user=bob end=1764000300"));
}

TEST_F(SlurmSchedulerTest, QueryMapsUnknownStatesToUnknown) {
  Answer(QueryArgv("--jobs=8"), "8|8|N/A|8|LAUNCH_FAILED|1764000000|NONE|alice|n1|x\n");
  EXPECT_THAT(Lines(Slurm().QueryJobs({"8"})),
              ElementsAre("8 -> 8 unknown LAUNCH_FAILED [n1] name=x user=alice"));
}

TEST_F(SlurmSchedulerTest, QueryKeepsAJobNameWithBars) {
  Answer(QueryArgv("--jobs=9"), "9|9|N/A|9|RUNNING|1764000000|NONE|alice|n1|a|b|c\n");
  EXPECT_THAT(Lines(Slurm().QueryJobs({"9"})),
              ElementsAre("9 -> 9 running RUNNING [n1] name=a|b|c user=alice"));
}

TEST_F(SlurmSchedulerTest, QueryRefusesUnsafeNamesBeforeAnythingRuns) {
  for (const std::string& name : {std::string("-h"), std::string("a,b"), std::string("a b"),
                                  std::string("$(id)"), std::string(129, 'a')}) {
    absl::StatusOr<std::vector<JobStatus>> answers = Slurm().QueryJobs({"1", name});
    EXPECT_EQ(answers.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_THAT(Calls(), IsEmpty());
}

TEST_F(SlurmSchedulerTest, QueryFailsWhenSqueueFailsOrPrintsNonsense) {
  Answer(QueryArgv("--jobs=1"), "", "squeue: error: Unable to contact slurm controller\n", 1);
  absl::StatusOr<std::vector<JobStatus>> failed = Slurm().QueryJobs({"1"});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("stderr: squeue: error: Unable to contact slurm controller"));
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("exit status 1"));

  for (const std::string& nonsense :
       {std::string("1|1|N/A|1|RUNNING\n"), std::string("x|1|N/A|1|RUNNING|0|NONE|a|n1|j\n"),
        std::string("1|1|N/A|1|RUNNING|0|NONE|a|n[1-|j\n"),
        std::string("1|1|seven|1|RUNNING|0|NONE|a|n1|j\n")}) {
    Answer(QueryArgv("--jobs=2"), nonsense);
    absl::StatusOr<std::vector<JobStatus>> answers = Slurm().QueryJobs({"2"});
    EXPECT_EQ(answers.status().code(), absl::StatusCode::kInternal) << nonsense;
    EXPECT_THAT(std::string(answers.status().message()),
                HasSubstr("squeue printed an unexpected line"));
  }

  options_.squeue = dir_.File("no-such-squeue");
  EXPECT_EQ(Slurm().QueryJobs({"1"}).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace vigil::actuator
