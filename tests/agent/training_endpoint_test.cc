// The training endpoint over a real Unix socket in a temporary directory:
// several ranks, aggregation, bad input, socket ownership, staleness.
#include "agent/training_endpoint.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr auto kWait = 10s;

// A rank: a blocking client connection to the endpoint.
class RankClient {
 public:
  explicit RankClient(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    connected_ =
        connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RankClient() { close(fd_); }
  bool connected() const { return connected_; }

  // Writes `text` as is (no newline added).
  void Write(const std::string& text) {
    size_t off = 0;
    while (off < text.size()) {
      ssize_t n = send(fd_, text.data() + off, text.size() - off, MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << std::strerror(errno);
      off += static_cast<size_t>(n);
    }
  }
  void Line(const std::string& line) { Write(line + "\n"); }
  void Hello(const std::string& fields) {
    Line(R"({"v":1,"type":"hello",)" + fields + "}");
  }

  // The next line the endpoint wrote back, "" on timeout, "EOF" on close.
  std::string ReadLine() {
    for (;;) {
      if (size_t nl = in_.find('\n'); nl != std::string::npos) {
        std::string line = in_.substr(0, nl);
        in_.erase(0, nl + 1);
        return line;
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 10'000) != 1) return "";
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return "EOF";
      in_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string in_;
};

// Records delivered events.
class RecordingSink : public EventSink {
 public:
  void Deliver(Tick event) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  std::vector<Tick> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::vector<Tick> events_;
};

// Samples of a tick by name, with labels in Prometheus text form when
// there are any: train_loss, torch_reserved_bytes{gpu="0"}.
std::map<std::string, double> Values(const Tick& tick) {
  std::map<std::string, double> out;
  for (const Sample& s : tick.samples) {
    out[s.key.labels.empty() ? s.key.metric : s.key.ToString()] = s.value;
  }
  return out;
}

class TrainingEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vigil-train-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/train.sock";
    options_.socket_path = path_;
    options_.clock = &clock_;
  }
  void TearDown() override {
    collector_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartCollector() {
    collector_ = std::make_unique<TrainingCollector>(options_);
    ASSERT_TRUE(collector_->Start(&sink_).ok());
  }
  // Waits until the endpoint has accepted and rejected at least so many
  // lines in all.
  void WaitLines(uint64_t accepted, uint64_t rejected = 0) {
    ASSERT_TRUE(collector_->WaitForStats(
        [&](const TrainingEndpointStats& s) {
          return s.lines_accepted >= accepted && s.lines_rejected >= rejected;
        },
        kWait))
        << "accepted " << collector_->stats().lines_accepted << " rejected "
        << collector_->stats().lines_rejected;
  }
  Tick Collect(absl::Status* status = nullptr) {
    Tick tick;
    tick.ts = clock_.Now();
    absl::Status s = collector_->Collect(&tick);
    if (status != nullptr) *status = s;
    return tick;
  }

  std::string dir_, path_;
  FakeClock clock_;
  TrainingCollectorOptions options_;
  RecordingSink sink_;
  std::unique_ptr<TrainingCollector> collector_;
};

TEST_F(TrainingEndpointTest, AggregatesTheRanksOfTheNode) {
  StartCollector();
  RankClient r0(path_), r1(path_), r2(path_);
  ASSERT_TRUE(r0.connected() && r1.connected() && r2.connected());
  r0.Hello(R"("job":"llama","rank":8,"local_rank":0,"gpu":4)");
  r1.Hello(R"("job":"llama","rank":9,"local_rank":1)");
  r2.Hello(R"("job":"llama","rank":10)");
  r0.Line(R"({"type":"step","step":100,"loss":2.0,"grad_norm":1.0,)"
          R"("tokens_per_second":1000,"step_time_seconds":1.5,)"
          R"("dataloader_wait_seconds":0.1,"loss_scale":4096,"mfu_ratio":0.4,)"
          R"("torch_reserved_bytes":8e9,"torch_allocated_bytes":6e9,)"
          R"("torch_alloc_retries_total":1})");
  r1.Line(R"({"type":"step","step":101,"loss":3.0,"grad_norm":2.0,)"
          R"("tokens_per_second":1100,"step_time_seconds":1.7,)"
          R"("dataloader_wait_seconds":0.3,"loss_scale":2048,"mfu_ratio":0.5,)"
          R"("torch_reserved_bytes":9e9})");
  r2.Line(R"({"type":"step","step":99,"loss":4.0,"tokens_per_second":900})");
  WaitLines(6);

  Tick tick = Collect();
  EXPECT_EQ(tick.job, "llama");
  EXPECT_EQ(tick.step, 101);
  std::map<std::string, double> v = Values(tick);
  EXPECT_DOUBLE_EQ(v.at("train_loss"), 3.0);  // mean
  EXPECT_DOUBLE_EQ(v.at("train_grad_norm"), 1.5);
  EXPECT_DOUBLE_EQ(v.at("train_tokens_per_second"), 3000);  // sum
  EXPECT_DOUBLE_EQ(v.at("train_step_time_seconds"), 1.7);   // max
  EXPECT_DOUBLE_EQ(v.at("train_dataloader_wait_seconds"), 0.3);
  EXPECT_DOUBLE_EQ(v.at("train_loss_scale"), 2048);  // min
  EXPECT_DOUBLE_EQ(v.at("train_mfu_ratio"), 0.45);
  // gpu from hello, else local_rank, else rank.
  EXPECT_DOUBLE_EQ(v.at(R"(torch_reserved_bytes{gpu="4"})"), 8e9);
  EXPECT_DOUBLE_EQ(v.at(R"(torch_allocated_bytes{gpu="4"})"), 6e9);
  EXPECT_DOUBLE_EQ(v.at(R"(torch_alloc_retries_total{gpu="4"})"), 1);
  EXPECT_DOUBLE_EQ(v.at(R"(torch_reserved_bytes{gpu="1"})"), 9e9);
  EXPECT_EQ(v.size(), 11u) << "no train_phase before a phase marker, no "
                              "torch series for a rank that sent none";
  EXPECT_TRUE(sink_.events().empty());
}

TEST_F(TrainingEndpointTest, ReadingsRepeatUntilANewStep) {
  StartCollector();
  RankClient r(path_);
  r.Hello(R"("job":"j")");
  r.Line(R"({"type":"step","step":5,"loss":1.25})");
  WaitLines(2);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1);
    Tick tick = Collect();
    EXPECT_EQ(tick.step, 5);
    EXPECT_EQ(Values(tick).at("train_loss"), 1.25);
  }
  r.Line(R"({"type":"step","step":6,"loss":1.5})");
  WaitLines(3);
  Tick tick = Collect();
  EXPECT_EQ(tick.step, 6);
  EXPECT_EQ(Values(tick).at("train_loss"), 1.5);
}

TEST_F(TrainingEndpointTest, AReconnectingRankCarriesOn) {
  StartCollector();
  {
    RankClient r(path_);
    r.Hello(R"("job":"j","rank":2)");
    r.Line(R"({"type":"step","step":10,"tokens_per_second":100})");
    WaitLines(2);
  }
  RankClient again(path_);
  again.Hello(R"("job":"j","rank":2)");
  again.Line(R"({"type":"step","step":11,"tokens_per_second":120})");
  WaitLines(4);
  Tick tick = Collect();
  EXPECT_EQ(tick.step, 11);
  EXPECT_EQ(Values(tick).at("train_tokens_per_second"), 120)
      << "one rank, not two";
}

TEST_F(TrainingEndpointTest, NonFiniteReadingsPropagate) {
  StartCollector();
  RankClient r0(path_), r1(path_);
  r0.Hello(R"("job":"j","rank":0)");
  r1.Hello(R"("job":"j","rank":1)");
  // Exactly what Python's json.dumps writes for nan / inf.
  r0.Line(
      R"({"type": "step", "step": 42, "loss": NaN, "grad_norm": Infinity})");
  r1.Line(R"({"type": "step", "step": 42, "loss": 2.5, "grad_norm": 1.0})");
  WaitLines(4);
  std::map<std::string, double> v = Values(Collect());
  EXPECT_TRUE(std::isnan(v.at("train_loss")));
  EXPECT_EQ(v.at("train_grad_norm"), INFINITY);

  // The NaN step also went out at once, once for the step.
  r1.Line(R"({"type": "step", "step": 42, "loss": NaN})");
  WaitLines(5);
  std::vector<Tick> events = sink_.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].job, "j");
  EXPECT_EQ(events[0].step, 42);
  ASSERT_EQ(events[0].samples.size(), 1u);
  EXPECT_EQ(events[0].samples[0].key.metric, "train_loss");
  EXPECT_TRUE(std::isnan(events[0].samples[0].value));
}

TEST_F(TrainingEndpointTest, BadLinesAreRejectedAndGoodOnesStillLand) {
  StartCollector();
  RankClient bad(path_), good(path_);
  bad.Hello(R"("job":"j","rank":0)");
  good.Hello(R"("job":"j","rank":1)");
  bad.Line(R"({"type":"step","step":1,"loss":)");        // bad JSON
  bad.Line(R"({"type":"step","step":1,"loss":"low"})");  // wrong type
  bad.Line(R"({"type":"metrics"})");                     // unknown type
  bad.Line(R"({"type":"step","step":3,"loss":4.0})");    // fine
  good.Write("\n \r\n");  // blank lines: ignored, not counted
  good.Line(R"({"type":"step","step":3,"loss":2.0})");
  WaitLines(4, 3);

  EXPECT_THAT(bad.ReadLine(), HasSubstr(R"("error":"not valid JSON")"));
  std::string second = bad.ReadLine();
  EXPECT_THAT(second, HasSubstr("field 'loss' must be a number"));
  EXPECT_THAT(second, HasSubstr(R"("line":3)"));
  EXPECT_THAT(bad.ReadLine(), HasSubstr("unknown type 'metrics'"));

  absl::Status status;
  Tick tick = Collect(&status);
  EXPECT_EQ(Values(tick).at("train_loss"), 3.0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("3 line(s) rejected"));
  EXPECT_THAT(status.message(),
              HasSubstr("pid " + std::to_string(getpid()) + " uid " +
                        std::to_string(getuid()) + " line 4"));
  EXPECT_TRUE(Collect(&status).samples.size() == 1 && status.ok())
      << "rejections are reported once";
  EXPECT_EQ(collector_->stats().lines_rejected, 3u);
  EXPECT_EQ(collector_->stats().lines_accepted, 4u);
}

TEST_F(TrainingEndpointTest, OverlongLinesAreDroppedWholeConnectionStays) {
  options_.max_line_bytes = 200;
  StartCollector();
  RankClient r(path_);
  r.Hello(R"("job":"j")");
  // One long line in one write, and one arriving in pieces with no newline
  // for a while: each is one rejection, and the rest of it is skipped.
  r.Line(R"({"type":"step","step":1,"pad":")" + std::string(500, 'x') + "\"}");
  r.Write(R"({"type":"step","step":2,"pad":")" + std::string(300, 'y'));
  r.Write(std::string(300, 'y'));
  r.Write("\"}\n");
  r.Line(R"({"type":"step","step":3,"loss":1.0})");
  WaitLines(2, 2);
  EXPECT_THAT(r.ReadLine(), HasSubstr("line longer than 200 bytes"));
  EXPECT_THAT(r.ReadLine(), HasSubstr("line longer than 200 bytes"));
  Tick tick = Collect();
  EXPECT_EQ(tick.step, 3);
  EXPECT_EQ(collector_->stats().lines_rejected, 2u);
}

// Incomplete lines of all connections together stay within
// max_buffered_bytes: many connections each holding a long partial line
// cannot grow the agent without bound. A line over the budget is dropped;
// the budget comes back as lines complete or connections close.
TEST_F(TrainingEndpointTest, IncompleteLinesShareOneBufferBudget) {
  options_.max_line_bytes = 1000;
  options_.max_buffered_bytes = 1500;
  StartCollector();
  RankClient a(path_), b(path_), c(path_);
  a.Hello(R"("job":"j","rank":0)");
  b.Hello(R"("job":"j","rank":1)");
  c.Hello(R"("job":"j","rank":2)");
  WaitLines(3);
  a.Write(R"({"type":"step","step":1,"pad":")" + std::string(800, 'a'));
  // A complete line after it: once it is handled, a's part is buffered
  // (connections are read in the order they were accepted).
  c.Line(R"({"type":"step","step":1,"loss":1.0})");
  WaitLines(4);
  b.Write(R"({"type":"step","step":1,"pad":")" + std::string(800, 'b'));
  WaitLines(4, 1);  // b's partial line does not fit next to a's
  EXPECT_THAT(b.ReadLine(), HasSubstr("bytes for incomplete lines are taken"));
  a.Write("\"}\n");  // a's line completes and frees its share
  WaitLines(5, 1);
  c.Write(R"({"type":"step","step":2,"pad":")" + std::string(800, 'c'));
  c.Write("\"}\n");
  WaitLines(6, 1);
  EXPECT_EQ(collector_->stats().lines_rejected, 1u);
}

TEST_F(TrainingEndpointTest, StepsBeforeHelloAreRejected) {
  StartCollector();
  RankClient r(path_);
  r.Line(R"({"type":"step","step":1,"loss":1.0})");
  WaitLines(0, 1);
  EXPECT_THAT(r.ReadLine(), HasSubstr("no hello on this connection"));
  r.Hello(R"("job":"j")");
  r.Line(R"({"type":"step","step":1,"loss":1.0})");
  WaitLines(2, 1);
  EXPECT_EQ(Collect().step, 1);
}

TEST_F(TrainingEndpointTest, PhaseMarkers) {
  StartCollector();
  RankClient r0(path_), r1(path_);
  r0.Hello(R"("job":"j","rank":0)");
  r1.Hello(R"("job":"j","rank":1)");
  r0.Line(R"({"type":"step","step":1,"loss":1.0})");
  WaitLines(3);
  EXPECT_THAT(Values(Collect()), Not(Contains(Key("train_phase"))));

  int lines = 3;
  for (auto [rank, marker, phase] : {
           std::tuple{0, "eval_start", 2.0},
           std::tuple{1, "checkpoint_start", 1.0},  // checkpoint wins
           std::tuple{1, "checkpoint_end", 2.0},
           std::tuple{0, "eval_end", 0.0},
       }) {
    (rank == 0 ? r0 : r1)
        .Line(std::string(R"({"type":"phase","phase":")") + marker + "\"}");
    WaitLines(++lines);
    EXPECT_EQ(Values(Collect()).at("train_phase"), phase) << marker;
  }
}

TEST_F(TrainingEndpointTest, JobOfTheMostRecentRankWins) {
  options_.default_job = "idle";
  StartCollector();
  EXPECT_EQ(Collect().job, "idle");
  RankClient old_job(path_), new_job(path_), anonymous(path_);
  old_job.Hello(R"("job":"old")");
  old_job.Line(R"({"type":"step","step":900,"loss":9.0})");
  WaitLines(2);
  clock_.Advance(1);
  new_job.Hello(R"("job":"new")");
  new_job.Line(R"({"type":"step","step":3,"loss":1.0})");
  WaitLines(4);
  Tick tick = Collect();
  EXPECT_EQ(tick.job, "new");
  EXPECT_EQ(tick.step, 3);
  EXPECT_EQ(Values(tick).at("train_loss"), 1.0)
      << "ranks of other jobs ignored";

  clock_.Advance(1);
  anonymous.Hello(R"("rank":0)");
  WaitLines(5);
  EXPECT_EQ(Collect().job, "idle") << "a hello without job gets the default";
}

TEST_F(TrainingEndpointTest, NoJobLeavesTickJobUnset) {
  StartCollector();
  RankClient r(path_);
  r.Hello(R"("rank":0)");
  r.Line(R"({"type":"step","step":2,"loss":1.0})");
  WaitLines(2);
  Tick tick = Collect();
  EXPECT_EQ(tick.job, "");
  EXPECT_EQ(tick.step, 2);
}

TEST_F(TrainingEndpointTest, StaleRanksStopCounting) {
  options_.default_job = "idle";
  options_.staleness_seconds = 300;
  // Staleness alone: when the endpoint saw the disconnect before the clock
  // moved (a race with this thread), a 5 s grace would drop the rank first.
  options_.disconnect_grace_seconds = 1000;
  StartCollector();
  {
    RankClient r(path_);
    r.Hello(R"("job":"j")");
    r.Line(R"({"type":"step","step":8,"loss":1.0})");
    WaitLines(2);
  }  // A rank that disconnected still counts until stale.
  clock_.Advance(300);
  Tick tick = Collect();
  EXPECT_EQ(tick.job, "j");
  EXPECT_EQ(tick.step, 8);
  clock_.Advance(1);
  tick = Collect();
  EXPECT_EQ(tick.job, "idle");
  EXPECT_FALSE(tick.step.has_value());
  EXPECT_THAT(tick.samples, IsEmpty());
}

TEST_F(TrainingEndpointTest, SocketInUseIsAnError) {
  StartCollector();
  TrainingCollector second(options_);
  absl::Status s = second.Start(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_THAT(s.message(), HasSubstr(path_));
  second.Stop();
  // The first one still serves, and its socket file is still there.
  RankClient r(path_);
  ASSERT_TRUE(r.connected());
  r.Hello(R"("job":"j")");
  WaitLines(1);
}

TEST_F(TrainingEndpointTest, StaleSocketFileIsReplaced) {
  // A socket file left behind by a dead agent: bound, never unlinked.
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  StartCollector();
  RankClient r(path_);
  ASSERT_TRUE(r.connected());
}

TEST_F(TrainingEndpointTest, RefusesToReplaceAFileThatIsNotASocket) {
  std::ofstream(path_) << "precious";
  TrainingCollector collector(options_);
  absl::Status s = collector.Start(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  std::ifstream in(path_);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(TrainingEndpointTest, BadSocketPaths) {
  options_.socket_path = dir_ + "/" + std::string(120, 's');
  TrainingCollector too_long(options_);
  EXPECT_EQ(too_long.Start(nullptr).code(), absl::StatusCode::kInvalidArgument);
  options_.socket_path = dir_ + "/missing/deeper/train.sock";
  TrainingCollector no_dir(options_);
  EXPECT_EQ(no_dir.Start(nullptr).code(), absl::StatusCode::kInternal);
}

TEST_F(TrainingEndpointTest, RefusesOptionsOutOfRange) {
  for (auto change : std::vector<void (*)(TrainingCollectorOptions*)>{
           [](TrainingCollectorOptions* o) { o->max_connections = 0; },
           [](TrainingCollectorOptions* o) { o->max_line_bytes = 0; },
           [](TrainingCollectorOptions* o) { o->staleness_seconds = 0; }}) {
    TrainingCollectorOptions options = options_;
    change(&options);
    TrainingCollector collector(options);
    EXPECT_EQ(collector.Start(nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(TrainingEndpointTest, CreatesItsDirectoryAndSetsTheMode) {
  options_.socket_path = dir_ + "/run/train.sock";
  options_.socket_mode = 0660;
  StartCollector();
  struct stat st;
  ASSERT_EQ(stat(options_.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(TrainingEndpointTest, RefusesConnectionsOverTheLimit) {
  options_.max_connections = 2;
  StartCollector();
  RankClient a(path_), b(path_);
  ASSERT_TRUE(collector_->WaitForStats(
      [](const TrainingEndpointStats& s) { return s.connections_open == 2; },
      kWait));
  RankClient c(path_);
  EXPECT_THAT(c.ReadLine(), HasSubstr("too many connections (max 2)"));
  EXPECT_EQ(c.ReadLine(), "EOF");
  EXPECT_EQ(collector_->stats().connections_refused, 1u);
  a.Hello(R"("job":"j")");
  WaitLines(1);
}

TEST_F(TrainingEndpointTest, CountsConnectionsAsTheyCloseAndOpen) {
  StartCollector();
  {
    RankClient a(path_);
    ASSERT_TRUE(collector_->WaitForStats(
        [](const TrainingEndpointStats& s) { return s.connections_open == 1; },
        kWait));
  }
  ASSERT_TRUE(collector_->WaitForStats(
      [](const TrainingEndpointStats& s) {
        return s.connections_open == 0 && s.connections_accepted == 1;
      },
      kWait));
}

TEST_F(TrainingEndpointTest, StopIsPromptClosesClientsAndRemovesTheSocket) {
  StartCollector();
  RankClient r(path_);
  r.Hello(R"("job":"j")");
  WaitLines(1);
  std::future<void> stopped =
      std::async(std::launch::async, [this] { collector_->Stop(); });
  ASSERT_EQ(stopped.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(r.ReadLine(), "EOF");
  EXPECT_FALSE(std::filesystem::exists(path_));
  collector_->Stop();  // idempotent
  // And it can serve again.
  ASSERT_TRUE(collector_->Start(nullptr).ok());
  RankClient again(path_);
  EXPECT_TRUE(again.connected());
}

}  // namespace
}  // namespace vigil::agent

namespace vigil::agent {
namespace {

// Answers each connection's first hello with the next queued result (the
// test's clients all share one pid, so results go by order of asking).
class QueuedResolver : public ProcessJobResolver {
 public:
  void Push(absl::StatusOr<ProcessJob> result) {
    std::lock_guard<std::mutex> lock(mu_);
    results_.push_back(std::move(result));
  }
  absl::StatusOr<ProcessJob> Resolve(pid_t pid, uid_t uid) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(pid, getpid()) << "the pid comes from the kernel";
    EXPECT_EQ(uid, getuid());
    if (results_.empty()) return absl::NotFoundError("nothing queued");
    absl::StatusOr<ProcessJob> result = results_.front();
    results_.erase(results_.begin());
    return result;
  }

 private:
  std::mutex mu_;
  std::vector<absl::StatusOr<ProcessJob>> results_;
};

class VerifiedClaimsTest : public TrainingEndpointTest {
 protected:
  void SetUp() override {
    TrainingEndpointTest::SetUp();
    resolver_ = std::make_shared<QueuedResolver>();
    options_.job_resolver = resolver_;
  }
  // Waits until so many hellos were verified, left unverified and refused.
  void WaitClaims(uint64_t verified, uint64_t unverified, uint64_t refused) {
    ASSERT_TRUE(collector_->WaitForStats(
        [&](const TrainingEndpointStats& s) {
          return s.claims_verified >= verified &&
                 s.claims_unverified >= unverified &&
                 s.claims_refused >= refused;
        },
        kWait));
  }
  // The events delivered once there are `n` (the endpoint counts a line
  // before it delivers its event), or after kWait.
  std::vector<Tick> WaitEvents(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (sink_.events().size() < n &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    return sink_.events();
  }
  static ProcessJob Slurm(std::string id, std::string name) {
    return ProcessJob{"slurm", std::move(id), std::move(name)};
  }

  std::shared_ptr<QueuedResolver> resolver_;
};

TEST_F(VerifiedClaimsTest, AVerifiedJobCarriesItsSchedulerId) {
  resolver_->Push(Slurm("42", "llama"));
  resolver_->Push(Slurm("42", "llama"));
  StartCollector();
  RankClient by_name(path_), unnamed(path_);
  by_name.Hello(R"("job":"llama","rank":0)");
  WaitClaims(1, 0, 0);
  unnamed.Hello(R"("rank":1)");  // the job comes from the scheduler
  by_name.Line(R"({"type":"step","step":5,"loss":2.0})");
  unnamed.Line(R"({"type":"step","step":5,"loss":NaN})");
  WaitLines(4);
  Tick tick = Collect();
  EXPECT_EQ(tick.job, "llama");
  EXPECT_EQ(tick.verified_job_id, "42");
  std::vector<Tick> events = WaitEvents(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].verified_job_id, "42");
}

TEST_F(VerifiedClaimsTest, AClaimOfAnotherJobIsRefused) {
  resolver_->Push(Slurm("42", "mine"));
  StartCollector();
  RankClient rank(path_);
  rank.Hello(R"("job":"victim","rank":0)");
  EXPECT_THAT(rank.ReadLine(),
              HasSubstr("runs in slurm job 42 ('mine'), not in 'victim'"));
  rank.Line(R"({"type":"step","step":5,"loss":NaN})");
  EXPECT_THAT(rank.ReadLine(), HasSubstr("no hello"));
  Tick tick = Collect();
  EXPECT_NE(tick.job, "victim");
  EXPECT_TRUE(sink_.events().empty());
  EXPECT_EQ(collector_->stats().claims_refused, 1u);
}

TEST_F(VerifiedClaimsTest, AJobTheUserDoesNotOwnIsRefused) {
  resolver_->Push(absl::PermissionDeniedError("Slurm job 42 belongs to uid 7"));
  StartCollector();
  RankClient rank(path_);
  rank.Hello(R"("job":"42")");
  EXPECT_THAT(rank.ReadLine(), HasSubstr("belongs to uid 7"));
}

TEST_F(VerifiedClaimsTest, OutsidersCannotSpeakForAVerifiedJob) {
  resolver_->Push(Slurm("42", "llama"));
  resolver_->Push(absl::NotFoundError("process runs in no Slurm job"));
  StartCollector();
  RankClient member(path_), outsider(path_);
  member.Hello(R"("job":"llama","rank":0)");
  member.Line(R"({"type":"step","step":5,"loss":2.0})");
  WaitLines(2);
  outsider.Hello(R"("job":"llama","rank":0)");
  EXPECT_THAT(outsider.ReadLine(), HasSubstr("not part of"));
  outsider.Line(R"({"type":"step","step":6,"loss":NaN})");
  EXPECT_THAT(outsider.ReadLine(), HasSubstr("no hello"));
  Tick tick = Collect();
  EXPECT_EQ(tick.verified_job_id, "42");
  EXPECT_DOUBLE_EQ(Values(tick).at("train_loss"), 2.0);
  EXPECT_TRUE(sink_.events().empty());
}

TEST_F(VerifiedClaimsTest, UnverifiedClaimsAreAcceptedButTagged) {
  resolver_->Push(absl::NotFoundError("process runs in no Slurm job"));
  StartCollector();
  RankClient rank(path_);
  rank.Hello(R"("job":"notebook")");
  rank.Line(R"({"type":"step","step":1,"loss":NaN})");
  WaitLines(2);
  Tick tick = Collect();
  EXPECT_EQ(tick.job, "notebook");
  EXPECT_EQ(tick.verified_job_id, "");
  std::vector<Tick> events = WaitEvents(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].verified_job_id, "");
  EXPECT_EQ(collector_->stats().claims_unverified, 1u);
}

TEST_F(VerifiedClaimsTest, AVerifiedRankDisplacesEarlierClaims) {
  resolver_->Push(absl::UnavailableError("slurmctld down"));
  resolver_->Push(Slurm("42", "llama"));
  StartCollector();
  RankClient early(path_), member(path_);
  early.Hello(R"("job":"llama","rank":3)");
  early.Line(R"({"type":"step","step":9,"loss":100.0})");
  WaitLines(2);
  member.Hello(R"("job":"llama","rank":0)");
  member.Line(R"({"type":"step","step":5,"loss":2.0})");
  WaitLines(4);
  Tick tick = Collect();
  EXPECT_EQ(tick.verified_job_id, "42");
  EXPECT_DOUBLE_EQ(Values(tick).at("train_loss"), 2.0);
  EXPECT_EQ(tick.step, 5);
}

TEST_F(VerifiedClaimsTest, RefuseUnverifiedRefusesOutsiders) {
  options_.refuse_unverified = true;
  resolver_->Push(absl::NotFoundError("process runs in no Slurm job"));
  StartCollector();
  RankClient rank(path_);
  rank.Hello(R"("job":"notebook")");
  EXPECT_THAT(rank.ReadLine(), HasSubstr("job claim refused"));
}

}  // namespace
}  // namespace vigil::agent

namespace vigil::agent {
namespace {

TEST_F(VerifiedClaimsTest, PodsVerifyTheirUidAndLeaveNamesUnverified) {
  const ProcessJob pod{"kubernetes", "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", ""};
  resolver_->Push(pod);
  resolver_->Push(pod);
  StartCollector();
  RankClient by_name(path_);
  by_name.Hello(R"("job":"llama")");
  WaitClaims(0, 1, 0);
  EXPECT_EQ(Collect().verified_job_id, "");
  by_name.Hello(R"("job":"0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b")");
  WaitClaims(1, 1, 0);
  Tick tick = Collect();
  EXPECT_EQ(tick.verified_job_id, pod.job_id);
}

}  // namespace
}  // namespace vigil::agent
