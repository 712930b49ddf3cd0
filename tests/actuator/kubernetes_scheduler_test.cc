// The Kubernetes backend against a local HTTPS API server (httplib
// SSLServer, self-signed certificate made with the openssl CLI) that
// records every request and applies merge patches like the real one; it
// also lists the Job's pods for job-state queries.
#include "actuator/kubernetes_scheduler.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "common/command_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/actuator/test_util.h"

namespace vigil::actuator {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::ScratchDir;
using testing::WriteFile;

constexpr double kStart = 1764000000.75;

// A self-signed certificate for 127.0.0.1 and its key, under `dir`.
void MakeCertificate(const std::string& dir, const std::string& name) {
  FakeClock clock;
  absl::StatusOr<CommandResult> made = RunCommand(
      {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", dir + "/" + name + ".key", "-out", dir + "/" + name + ".crt",
       "-days", "2", "-subj", "/CN=vigil-test-apiserver", "-addext",
       "subjectAltName=IP:127.0.0.1"},
      CommandOptions(), clock);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->exit_code, 0) << made->err;
}

struct RecordedRequest {
  std::string method;
  std::string path;
  std::string authorization;
  std::string accept;
  std::string content_type;
  json body;
  std::string label_selector;  // of a pod list
};

json ApiStatus(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
          {"message", message}, {"reason", reason}, {"code", code}};
}

// One Node and one Job, served and patched like the API server does.
class FakeApiServer {
 public:
  FakeApiServer(const std::string& cert, const std::string& key)
      : server_(cert.c_str(), key.c_str()) {
    node_ = json::parse(R"({
      "kind": "Node", "apiVersion": "v1",
      "metadata": {"name": "gpu-node-3", "resourceVersion": "7"},
      "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
      "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                 "message": "kubelet is posting ready status"}],
                 "allocatable": {"nvidia.com/gpu": "8"}}})");
    job_ = json::parse(R"({
      "kind": "Job", "apiVersion": "batch/v1",
      "metadata": {"name": "train", "namespace": "ml", "resourceVersion": "40",
                   "annotations": {"team": "llm"}},
      "spec": {"parallelism": 4, "suspend": false},
      "status": {"active": 4}})");
    server_.Get(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      Serve(req, res, node_, req.matches[1]);
    });
    server_.Patch(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      Serve(req, res, node_, req.matches[1]);
    });
    server_.Get(R"(/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+))",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Serve(req, res, job_, std::string(req.matches[1]) + "/" + std::string(req.matches[2]));
                });
    server_.Patch(R"(/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+))",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    Serve(req, res, job_, std::string(req.matches[1]) + "/" + std::string(req.matches[2]));
                  });
    server_.Get(R"(/api/v1/namespaces/([^/]+)/pods)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  std::lock_guard<std::mutex> lock(mu_);
                  RecordedRequest recorded{req.method, req.path,
                                           req.get_header_value("Authorization"),
                                           req.get_header_value("Accept"), "", json()};
                  recorded.label_selector = req.get_param_value("labelSelector");
                  requests_.push_back(recorded);
                  json list = {{"kind", "PodList"}, {"apiVersion", "v1"}, {"items", json::array()}};
                  for (const json& pod : pods_) {
                    if (pod["metadata"]["namespace"] == std::string(req.matches[1])) {
                      list["items"].push_back(pod);
                    }
                  }
                  res.set_content(list.dump(), "application/json");
                });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      listen_returned_ = true;
    });
  }
  ~FakeApiServer() {
    while (!server_.is_running() && !listen_returned_) std::this_thread::yield();
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  std::vector<RecordedRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  json node() {
    std::lock_guard<std::mutex> lock(mu_);
    return node_;
  }
  json job() {
    std::lock_guard<std::mutex> lock(mu_);
    return job_;
  }
  void SetNode(json node) {
    std::lock_guard<std::mutex> lock(mu_);
    node_ = std::move(node);
  }
  void SetJob(json job) {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
  }
  // Pods listed by GET .../pods (each with metadata.namespace).
  void SetPods(json pods) {
    std::lock_guard<std::mutex> lock(mu_);
    pods_ = std::move(pods);
  }
  // Every request is answered with `status` and `body`.
  void FailWith(int status, json body) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_status_ = status;
    fail_body_ = std::move(body);
  }
  // The next `n` node patches find the node changed by someone else.
  void InjectConflicts(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    conflicts_ = n;
  }
  // A checkpoint sidecar: answers a checkpoint request by writing
  // checkpoint-done = requested + `offset`.
  void ConfirmCheckpoints(int64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    sidecar_offset_ = offset;
  }

 private:
  void Serve(const httplib::Request& req, httplib::Response& res, json& object,
             const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    RecordedRequest recorded{req.method, req.path, req.get_header_value("Authorization"),
                             req.get_header_value("Accept"),
                             req.get_header_value("Content-Type"),
                             json::parse(req.body.empty() ? "null" : req.body, nullptr, false)};
    requests_.push_back(recorded);
    auto answer = [&](int status, const json& body) {
      res.status = status;
      res.set_content(body.dump(), "application/json");
    };
    if (fail_status_ != 0) return answer(fail_status_, fail_body_);
    const json& metadata = object["metadata"];
    std::string own_name = metadata.contains("namespace")
                               ? metadata["namespace"].get<std::string>() + "/" +
                                     metadata["name"].get<std::string>()
                               : metadata["name"].get<std::string>();
    if (name != own_name) {
      return answer(404, ApiStatus(404, "NotFound", "\"" + name + "\" not found"));
    }
    if (req.method == "GET") return answer(200, object);
    if (recorded.content_type != "application/merge-patch+json") {
      return answer(415, ApiStatus(415, "UnsupportedMediaType", "bad content type"));
    }
    json patch = recorded.body;
    if (conflicts_ > 0 && object["kind"] == "Node") {
      --conflicts_;
      Bump(object);
    }
    if (patch.contains("metadata") && patch["metadata"].contains("resourceVersion")) {
      if (patch["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"]) {
        return answer(409, ApiStatus(409, "Conflict",
                                     "Operation cannot be fulfilled: the object has been "
                                     "modified; please apply your changes to the latest version"));
      }
      patch["metadata"].erase("resourceVersion");
    }
    object.merge_patch(patch);
    Bump(object);
    json& annotations = object["metadata"]["annotations"];
    if (sidecar_offset_ && annotations.contains(kCheckpointRequestedAnnotation)) {
      int64_t requested = std::stoll(annotations[kCheckpointRequestedAnnotation].get<std::string>());
      annotations[kCheckpointDoneAnnotation] = std::to_string(requested + *sidecar_offset_);
    }
    answer(200, object);
  }
  static void Bump(json& object) {
    object["metadata"]["resourceVersion"] =
        std::to_string(std::stoi(object["metadata"]["resourceVersion"].get<std::string>()) + 1);
  }

  httplib::SSLServer server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_ = false;
  int port_ = 0;
  std::mutex mu_;
  json node_;
  json job_;
  json pods_ = json::array();
  std::vector<RecordedRequest> requests_;
  int fail_status_ = 0;
  json fail_body_;
  int conflicts_ = 0;
  std::optional<int64_t> sidecar_offset_;
};

class KubernetesSchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certificates_ = new ScratchDir();
    MakeCertificate(certificates_->path(), "apiserver");
    MakeCertificate(certificates_->path(), "stranger");
  }
  static void TearDownTestSuite() {
    delete certificates_;
    certificates_ = nullptr;
  }

  KubernetesSchedulerTest()
      : api_(certificates_->File("apiserver.crt"), certificates_->File("apiserver.key")) {
    WriteFile(dir_.File("token"), "tok-1\n");
    options_.api_url = api_.url();
    options_.token_file = dir_.File("token");
    options_.ca_file = certificates_->File("apiserver.crt");
    options_.default_namespace = "ml";
    options_.checkpoint_poll_seconds = 2;
    options_.request_timeout_seconds = 5;
  }

  ActionRequest Request(ActionType type, const std::string& job, const std::string& node) {
    ActionRequest request;
    request.id = "act-1";
    request.type = type;
    request.incident_id = "inc-7";
    request.job = job;
    request.node = node;
    request.checkpoint_timeout_seconds = 20;
    request.received_at = clock_.Now();
    return request;
  }
  KubernetesScheduler Kube() { return KubernetesScheduler(options_, clock_); }

  static ScratchDir* certificates_;
  ScratchDir dir_;
  FakeApiServer api_;
  testing::AutoAdvanceClock clock_{kStart};
  KubernetesOptions options_;
};

ScratchDir* KubernetesSchedulerTest::certificates_ = nullptr;

const json kGpuTaint = {{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}};
const json kVigilTaint = {{"key", "vigil.io/fault"}, {"value", "inc-7"}, {"effect", "NoSchedule"}};

TEST_F(KubernetesSchedulerTest, CordonKeepsTaintsAndAddsVigils) {
  absl::StatusOr<ActionOutcome> outcome =
      Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3"));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  std::vector<RecordedRequest> requests = api_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].path, "/api/v1/nodes/gpu-node-3");
  EXPECT_EQ(requests[1].method, "PATCH");
  EXPECT_EQ(requests[1].path, "/api/v1/nodes/gpu-node-3");
  EXPECT_EQ(requests[1].content_type, "application/merge-patch+json");
  EXPECT_EQ(requests[1].body,
            json({{"metadata", {{"resourceVersion", "7"}}},
                  {"spec", {{"unschedulable", true}, {"taints", {kGpuTaint, kVigilTaint}}}}}));
  for (const RecordedRequest& request : requests) {
    EXPECT_EQ(request.authorization, "Bearer tok-1");
    EXPECT_EQ(request.accept, "application/json");
  }
  EXPECT_EQ(api_.node()["spec"]["unschedulable"], true);
  EXPECT_THAT(outcome->detail, HasSubstr("PATCH /api/v1/nodes/gpu-node-3"));
  EXPECT_THAT(outcome->detail, HasSubstr("-> 200"));
}

TEST_F(KubernetesSchedulerTest, CordonTwiceDoesNotDuplicateTheTaint) {
  ASSERT_TRUE(Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3")).ok());
  ActionRequest later = Request(ActionType::kCordon, "", "gpu-node-3");
  later.incident_id = "inc 8/!";  // not a label value: cleaned up
  ASSERT_TRUE(Kube().Cordon(later).ok());
  json expected_vigil = kVigilTaint;
  expected_vigil["value"] = "inc_8";
  EXPECT_EQ(api_.node()["spec"]["taints"], json({kGpuTaint, expected_vigil}));
}

TEST_F(KubernetesSchedulerTest, UncordonRemovesOnlyVigilsTaint) {
  ASSERT_TRUE(Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3")).ok());
  ASSERT_TRUE(Kube().Uncordon(Request(ActionType::kUncordon, "", "gpu-node-3")).ok());
  std::vector<RecordedRequest> requests = api_.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[3].body,
            json({{"metadata", {{"resourceVersion", "8"}}},
                  {"spec", {{"unschedulable", false}, {"taints", {kGpuTaint}}}}}));
  EXPECT_EQ(api_.node()["spec"]["taints"], json({kGpuTaint}));
  EXPECT_EQ(api_.node()["spec"]["unschedulable"], false);
}

TEST_F(KubernetesSchedulerTest, CordonOfANodeWithoutTaintsAddsOne) {
  json node = api_.node();
  node["spec"] = json::object();
  api_.SetNode(node);
  ASSERT_TRUE(Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3")).ok());
  EXPECT_EQ(api_.node()["spec"]["taints"], json({kVigilTaint}));
}

TEST_F(KubernetesSchedulerTest, CordonReadsTheNodeAgainAfterAConflict) {
  api_.InjectConflicts(1);
  absl::StatusOr<ActionOutcome> outcome =
      Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3"));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  std::vector<RecordedRequest> requests = api_.requests();
  ASSERT_EQ(requests.size(), 4u);  // GET, PATCH (409), GET, PATCH
  EXPECT_EQ(requests[3].body["metadata"]["resourceVersion"], "8");
  EXPECT_THAT(outcome->detail, HasSubstr("409"));
  api_.InjectConflicts(3);
  absl::StatusOr<ActionOutcome> lost =
      Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3"));
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kAborted);
}

TEST_F(KubernetesSchedulerTest, PauseSuspendsTheJob) {
  ASSERT_TRUE(Kube().Pause(Request(ActionType::kPause, "ml/train", "")).ok());
  ASSERT_TRUE(Kube().Pause(Request(ActionType::kPause, "train", "")).ok());  // default ns
  std::vector<RecordedRequest> requests = api_.requests();
  ASSERT_EQ(requests.size(), 2u);
  for (const RecordedRequest& request : requests) {
    EXPECT_EQ(request.method, "PATCH");
    EXPECT_EQ(request.path, "/apis/batch/v1/namespaces/ml/jobs/train");
    EXPECT_EQ(request.content_type, "application/merge-patch+json");
    EXPECT_EQ(request.authorization, "Bearer tok-1");
    EXPECT_EQ(request.body, json({{"spec", {{"suspend", true}}}}));
  }
  EXPECT_EQ(api_.job()["spec"]["suspend"], true);
}

TEST_F(KubernetesSchedulerTest, CheckpointAnnotatesWaitsForTheSidecarThenSuspends) {
  api_.ConfirmCheckpoints(3);
  absl::StatusOr<ActionOutcome> outcome = Kube().CheckpointThenPause(
      Request(ActionType::kCheckpointThenPause, "ml/train", ""));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->checkpoint, "confirmed");
  std::vector<RecordedRequest> requests = api_.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].method, "PATCH");
  EXPECT_EQ(requests[0].body,
            json({{"metadata",
                   {{"annotations", {{"vigil.io/checkpoint-requested", "1764000000"}}}}}}));
  EXPECT_EQ(requests[1].method, "GET");
  EXPECT_EQ(requests[1].path, "/apis/batch/v1/namespaces/ml/jobs/train");
  EXPECT_EQ(requests[2].body, json({{"spec", {{"suspend", true}}}}));
  EXPECT_EQ(api_.job()["metadata"]["annotations"]["team"], "llm");  // kept
  EXPECT_THAT(outcome->detail, HasSubstr("checkpoint confirmed"));
  EXPECT_EQ(clock_.waits(), 0);
}

TEST_F(KubernetesSchedulerTest, CheckpointTimesOutThenSuspendsAnyway) {
  api_.ConfirmCheckpoints(-1);  // a checkpoint older than the request
  absl::StatusOr<ActionOutcome> outcome = Kube().CheckpointThenPause(
      Request(ActionType::kCheckpointThenPause, "train", ""));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->checkpoint, "timed_out");
  std::vector<RecordedRequest> requests = api_.requests();
  // PATCH, a GET every 2 s for 20 s (11), PATCH suspend.
  ASSERT_EQ(requests.size(), 13u);
  EXPECT_EQ(requests.back().body, json({{"spec", {{"suspend", true}}}}));
  EXPECT_EQ(api_.job()["spec"]["suspend"], true);
  EXPECT_THAT(outcome->detail, HasSubstr("pausing anyway"));
}

TEST_F(KubernetesSchedulerTest, ApiErrorsCarryTheApiMessage) {
  std::string forbidden =
      "nodes \"gpu-node-3\" is forbidden: User \"system:serviceaccount:vigil:actuator\" "
      "cannot get resource \"nodes\" in API group \"\" at the cluster scope";
  api_.FailWith(403, ApiStatus(403, "Forbidden", forbidden));
  absl::StatusOr<ActionOutcome> outcome =
      Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3"));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(outcome.status().message()),
              HasSubstr("Kubernetes API answered 403: " + forbidden));
  api_.FailWith(500, "not json at all");
  outcome = Kube().Pause(Request(ActionType::kPause, "train", ""));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("answered 500"));
}

TEST_F(KubernetesSchedulerTest, AMissingJobOrNodeIsNotFound) {
  absl::StatusOr<ActionOutcome> job =
      Kube().Pause(Request(ActionType::kPause, "other/train", ""));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("answered 404: \"other/train\" not found"));
  EXPECT_EQ(Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-9")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(KubernetesSchedulerTest, ReportSummarizesTheNodeAndTheJob) {
  absl::StatusOr<ActionOutcome> outcome = Kube().Report(
      Request(ActionType::kDiagnosticReport, "ml/train", "gpu-node-3"));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_THAT(outcome->detail, HasSubstr("GET /api/v1/nodes/gpu-node-3 -> 200"));
  EXPECT_THAT(outcome->detail, HasSubstr("GET /apis/batch/v1/namespaces/ml/jobs/train -> 200"));
  std::string summary = outcome->detail.substr(outcome->detail.find('{'));
  json report = json::parse(summary);
  EXPECT_EQ(report["node"]["name"], "gpu-node-3");
  EXPECT_EQ(report["node"]["unschedulable"], false);
  EXPECT_EQ(report["node"]["conditions"][0]["type"], "Ready");
  EXPECT_EQ(report["job"]["namespace"], "ml");
  EXPECT_EQ(report["job"]["active"], 4);
  EXPECT_EQ(report["job"]["suspend"], false);
}

TEST_F(KubernetesSchedulerTest, BadNamesAreRefusedBeforeAnyRequest) {
  for (const char* node : {"GPU-Node", "n1; rm", "-n", "a..b", "", "n/1"}) {
    EXPECT_EQ(Kube().Cordon(Request(ActionType::kCordon, "", node)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << node;
  }
  for (const char* job : {"Train", "ml/", "/train", "a/b/c", "ml/train job", "x_y"}) {
    EXPECT_EQ(Kube().Pause(Request(ActionType::kPause, job, "")).status().code(),
              absl::StatusCode::kInvalidArgument)
        << job;
  }
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(KubernetesSchedulerTest, TheServerCertificateIsVerified) {
  options_.ca_file = certificates_->File("stranger.crt");
  absl::StatusOr<ActionOutcome> outcome =
      Kube().Cordon(Request(ActionType::kCordon, "", "gpu-node-3"));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("failed"));
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(KubernetesSchedulerTest, ARotatedTokenIsPickedUp) {
  ASSERT_TRUE(Kube().Pause(Request(ActionType::kPause, "train", "")).ok());
  WriteFile(dir_.File("token"), "tok-2");
  ASSERT_TRUE(Kube().Pause(Request(ActionType::kPause, "train", "")).ok());
  EXPECT_EQ(api_.requests()[0].authorization, "Bearer tok-1");
  EXPECT_EQ(api_.requests()[1].authorization, "Bearer tok-2");
}

TEST_F(KubernetesSchedulerTest, OptionsAreValidated) {
  EXPECT_TRUE(ValidateKubernetesOptions(options_).ok());
  KubernetesOptions plain = options_;
  plain.api_url = "http://127.0.0.1:6443";
  EXPECT_THAT(std::string(ValidateKubernetesOptions(plain).message()), HasSubstr("https://"));
  KubernetesOptions no_token = options_;
  no_token.token_file = dir_.File("missing-token");
  EXPECT_THAT(std::string(ValidateKubernetesOptions(no_token).message()),
              HasSubstr("token file"));
  KubernetesOptions bad_namespace = options_;
  bad_namespace.default_namespace = "Prod";
  EXPECT_EQ(ValidateKubernetesOptions(bad_namespace).code(), absl::StatusCode::kInvalidArgument);
}

json Pod(const std::string& name, const std::string& uid, const std::string& phase,
         const std::string& node) {
  json pod = {{"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "ml"},
                            {"labels", {{"controller-uid", uid}, {"job-name", "train"}}}}},
              {"spec", json::object()},
              {"status", {{"phase", phase}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

class KubernetesQueryTest : public KubernetesSchedulerTest {
 protected:
  KubernetesQueryTest() {
    job_ = api_.job();
    job_["metadata"]["uid"] = "uid-train";
    api_.SetJob(job_);
    api_.SetPods({Pod("train-a", "uid-train", "Running", "gpu-node-3"),
                  Pod("train-b", "uid-train", "Running", "gpu-node-1"),
                  Pod("train-c", "uid-train", "Pending", ""),
                  Pod("train-old", "uid-train", "Failed", "gpu-node-9"),
                  Pod("other", "uid-other", "Running", "gpu-node-5")});
  }
  JobStatus QueryOne(const std::string& job) {
    absl::StatusOr<std::vector<JobStatus>> answers = Kube().QueryJobs({job});
    EXPECT_TRUE(answers.ok()) << answers.status();
    return answers.ok() && answers->size() == 1 ? answers->front() : JobStatus();
  }

  json job_;
};

TEST_F(KubernetesQueryTest, ARunningJobRunsOnItsRunningPodsNodes) {
  absl::StatusOr<std::vector<JobStatus>> answers =
      Kube().QueryJobs({"train", "ml/train", "missing", "other-ns/train"});
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 4u);
  const JobStatus& train = (*answers)[0];
  EXPECT_EQ(train.job, "train");
  EXPECT_EQ(train.job_id, "ml/train");
  EXPECT_EQ(train.name, "train");
  EXPECT_EQ(train.state, JobState::kRunning);
  EXPECT_EQ(train.scheduler_state, "Running");
  EXPECT_THAT(train.nodes, ::testing::ElementsAre("gpu-node-1", "gpu-node-3"));
  EXPECT_EQ(train.user, "");
  EXPECT_FALSE(train.end_time);
  EXPECT_EQ((*answers)[1].job, "ml/train");
  EXPECT_EQ((*answers)[1].state, JobState::kRunning);
  for (int i : {2, 3}) {
    EXPECT_EQ((*answers)[i].state, JobState::kNotFound);
    EXPECT_EQ((*answers)[i].job_id, "");
  }
  EXPECT_EQ((*answers)[2].job, "missing");
  // Each Job read once; one pod list for the namespace that has Jobs.
  std::vector<RecordedRequest> requests = api_.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].path, "/apis/batch/v1/namespaces/ml/jobs/train");
  EXPECT_EQ(requests[1].path, "/apis/batch/v1/namespaces/ml/jobs/missing");
  EXPECT_EQ(requests[2].path, "/apis/batch/v1/namespaces/other-ns/jobs/train");
  EXPECT_EQ(requests[3].method, "GET");
  EXPECT_EQ(requests[3].path, "/api/v1/namespaces/ml/pods");
  EXPECT_EQ(requests[3].label_selector, "controller-uid in (uid-train)");
  EXPECT_EQ(requests[3].authorization, "Bearer tok-1");
}

TEST_F(KubernetesQueryTest, SuspendedEndedPendingAndUnknownJobs) {
  job_["spec"]["suspend"] = true;
  api_.SetJob(job_);
  JobStatus suspended = QueryOne("train");
  EXPECT_EQ(suspended.state, JobState::kSuspended);
  EXPECT_EQ(suspended.scheduler_state, "Suspended");

  job_["spec"]["suspend"] = false;
  job_["status"] = json::parse(R"({"succeeded": 4, "completionTime": "2026-12-02T14:20:49Z",
      "conditions": [{"type": "Complete", "status": "True",
                      "lastTransitionTime": "2026-12-02T14:20:50Z"}]})");
  api_.SetJob(job_);
  JobStatus complete = QueryOne("train");
  EXPECT_EQ(complete.state, JobState::kEnded);
  EXPECT_EQ(complete.scheduler_state, "Complete");
  EXPECT_EQ(complete.end_time, 1796221249.0);
  EXPECT_THAT(complete.nodes, ::testing::ElementsAre("gpu-node-1", "gpu-node-3", "gpu-node-9"));

  job_["status"] = json::parse(R"({"failed": 1, "conditions": [
      {"type": "Suspended", "status": "False"},
      {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
       "lastTransitionTime": "2026-12-02T14:20:50Z"}]})");
  api_.SetJob(job_);
  JobStatus failed = QueryOne("train");
  EXPECT_EQ(failed.state, JobState::kEnded);
  EXPECT_EQ(failed.scheduler_state, "Failed");
  EXPECT_EQ(failed.end_time, 1796221250.0);

  job_["status"] = json::object();
  api_.SetJob(job_);
  api_.SetPods({Pod("train-a", "uid-train", "Pending", "gpu-node-3"),
                Pod("train-b", "uid-train", "Pending", "")});
  JobStatus pending = QueryOne("train");
  EXPECT_EQ(pending.state, JobState::kPending);
  EXPECT_EQ(pending.scheduler_state, "Pending");
  EXPECT_THAT(pending.nodes, ::testing::ElementsAre("gpu-node-3"));

  api_.SetPods({Pod("train-a", "uid-train", "Unknown", "gpu-node-3")});
  JobStatus unknown = QueryOne("train");
  EXPECT_EQ(unknown.state, JobState::kUnknown);
  EXPECT_THAT(unknown.nodes, ::testing::ElementsAre("gpu-node-3"));

  api_.SetPods(json::array());
  EXPECT_EQ(QueryOne("train").state, JobState::kPending);
}

TEST_F(KubernetesQueryTest, BadNamesAndApiFailuresAreErrors) {
  EXPECT_EQ(Kube().QueryJobs({"train", "Not_A_Name"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(api_.requests().empty());
  api_.FailWith(403, ApiStatus(403, "Forbidden", "jobs.batch \"train\" is forbidden"));
  absl::StatusOr<std::vector<JobStatus>> answers = Kube().QueryJobs({"train"});
  EXPECT_EQ(answers.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(answers.status().message()), HasSubstr("is forbidden"));
}

}  // namespace
}  // namespace vigil::actuator
