// The replay library on inline JSONL: the input format, bad lines, the
// output lines (exact keys, severity rises, reopenings) and determinism.
#include "server/replay/replay.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vigil {
namespace {

using json = nlohmann::json;

// The output and the bad-line reports of one replay.
struct Result {
  std::string output;
  std::vector<json> lines;
  std::vector<std::pair<int64_t, std::string>> bad;
  ReplayStats stats;
};

// Replays `input` fed in chunks of `chunk` bytes (0: all at once).
Result Replay(const std::string& input, size_t chunk = 0,
              ReplayOptions options = ReplayOptions()) {
  Result r;
  ReplaySink sink;
  sink.write = [&r](std::string_view line) {
    r.output.append(line);
    r.lines.push_back(json::parse(line));
  };
  sink.bad_line = [&r](int64_t line, std::string_view reason) {
    r.bad.emplace_back(line, std::string(reason));
  };
  Replayer replayer(std::move(options), std::move(sink));
  if (chunk == 0) chunk = input.size() + 1;
  for (size_t i = 0; i < input.size(); i += chunk) {
    replayer.Feed(std::string_view(input).substr(i, chunk));
  }
  replayer.Finish();
  r.stats = replayer.stats();
  return r;
}

// `v` in its shortest round-trip form (absl::StrCat keeps 6 digits).
std::string Num(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

// One input line of node `node` of job "llama" at `ts`.
std::string Frame(double ts, const std::string& node, int64_t step,
                  const std::string& samples) {
  return absl::StrCat("{\"ts\": ", Num(ts), ", \"node\": \"", node,
                      "\", \"job\": \"llama\", \"step\": ", step,
                      ", \"samples\": [", samples, "]}\n");
}

const std::set<std::string> kContractKeys = {
    "id",   "severity", "kind",    "job",  "node",    "gpu",
    "ts",   "step",     "summary", "hint", "evidence"};

std::set<std::string> Keys(const json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

TEST(ReplayTest, ParsesLabelsNonFiniteValuesAndOptionalFields) {
  std::string input =
      "{\"ts\": 1764000000.25, \"node\": \"n003\", \"job\": \"llama-70b\", "
      "\"step\": 1234, \"samples\": [{\"m\": \"gpu_power_watts\", \"gpu\": "
      "3, \"v\": 612.5}, {\"m\": \"net_drops_total\", \"dev\": \"mlx5_0\", "
      "\"v\": 0}, {\"m\": \"gpu_temperature_celsius\", \"gpu\": 3, \"v\": "
      "\"inf\"}, {\"m\": \"my_custom_metric\", \"v\": \"-inf\"}]}\n"
      // No step, keys in another order, an unknown key, null labels.
      "{\"samples\": [{\"v\": 611, \"m\": \"gpu_power_watts\", \"gpu\": 3}, "
      "{\"m\": \"my_custom_metric\", \"gpu\": null, \"dev\": null, "
      "\"v\": 1e3}], \"job\": \"llama-70b\", \"node\": \"n003\", "
      "\"ts\": 1764000001, \"extra\": {\"a\": [1]}}\n"
      // An empty frame still counts (and keeps the node alive).
      "{\"ts\": 1764000002, \"node\": \"n003\", \"job\": \"llama-70b\", "
      "\"step\": null, \"samples\": []}\n";
  Result r = Replay(input);
  EXPECT_TRUE(r.bad.empty()) << r.bad[0].second;
  EXPECT_EQ(r.stats.lines, 3);
  EXPECT_EQ(r.stats.frames, 3);
  EXPECT_EQ(r.stats.samples, 6);
  EXPECT_EQ(r.stats.series, 4);
  EXPECT_EQ(r.stats.bad_lines, 0);
}

TEST(ReplayTest, NanLossOpensOneP0IncidentWithTheContractKeys) {
  std::string input;
  for (int i = 0; i < 5; ++i) {
    input += Frame(1764000000 + i, "n001", 100 + i,
                   absl::StrCat("{\"m\": \"train_loss\", \"v\": ",
                                i < 3 ? "2.5" : "\"nan\"", "}"));
  }
  Result r = Replay(input);
  ASSERT_EQ(r.lines.size(), 1u) << r.output;
  const json& j = r.lines[0];
  EXPECT_EQ(Keys(j), kContractKeys);
  EXPECT_EQ(j["id"], "inc-000001");
  EXPECT_EQ(j["severity"], "P0");
  EXPECT_EQ(j["kind"], "loss_nan");
  EXPECT_EQ(j["job"], "llama");
  EXPECT_EQ(j["gpu"], nullptr);
  EXPECT_EQ(j["ts"], 1764000003.0);
  EXPECT_EQ(j["step"], 103);
  EXPECT_FALSE(j["summary"].get<std::string>().empty());
  EXPECT_FALSE(j["hint"].get<std::string>().empty());
  ASSERT_FALSE(j["evidence"].empty());
  EXPECT_EQ(j["evidence"][0]["kind"], "loss_nan");
  EXPECT_EQ(j["evidence"][0]["value"], "nan");
  EXPECT_EQ(r.stats.incidents, 1);
}

TEST(ReplayTest, BadLinesAreReportedWithTheirNumberAndSkipped) {
  const std::string good = Frame(1764000000, "n001", 1,
                                 "{\"m\": \"train_loss\", \"v\": 2.5}");
  struct Case {
    std::string line;
    std::string reason;  // a substring of the report
  };
  const std::vector<Case> cases = {
      {"{\"ts\": 1764000010, \"node\": \"n001\"", "invalid JSON"},
      {"[1, 2]", "not a JSON object"},
      {"", "empty line"},
      {"{\"node\": \"n001\", \"job\": \"j\", \"samples\": []}", "missing \"ts\""},
      {"{\"ts\": \"soon\", \"node\": \"n001\", \"job\": \"j\", \"samples\": []}",
       "\"ts\" must be a finite number"},
      {"{\"ts\": 1e999, \"node\": \"n001\", \"job\": \"j\", \"samples\": []}",
       "invalid JSON"},
      {"{\"ts\": 1764000010, \"job\": \"j\", \"samples\": []}",
       "missing \"node\""},
      {"{\"ts\": 1764000010, \"node\": \"\", \"job\": \"j\", \"samples\": []}",
       "\"node\" must be a non-empty string"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"samples\": []}",
       "missing \"job\""},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\"}",
       "missing \"samples\""},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"step\": "
       "1.5, \"samples\": []}",
       "\"step\" must be an integer"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"m\": \"x\", \"v\": \"NaN\"}]}",
       "samples[0].v must be a number"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"m\": \"x\", \"v\": 1}, {\"m\": \"x\"}]}",
       "samples[1]: missing \"v\""},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"v\": 1}]}",
       "samples[0]: missing \"m\""},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"m\": \"bad-name\", \"v\": 1}]}",
       "samples[0]: "},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"m\": \"x\", \"gpu\": -1, \"v\": 1}]}",
       "samples[0].gpu must be a non-negative integer"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"m\": \"x\", \"gpu\": \"3\", \"v\": 1}]}",
       "samples[0].gpu must be a non-negative integer"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"m\": \"x\", \"dev\": 0, \"v\": 1}]}",
       "samples[0].dev must be a non-empty string"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[{\"m\": \"x\", \"gpu\": 1, \"v\": 1}, {\"m\": \"x\", \"gpu\": 1, "
       "\"v\": 2}]}",
       "samples[1]: the same series is given twice"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "[7]}",
       "samples[0] must be an object"},
      {"{\"ts\": 1764000010, \"node\": \"n001\", \"job\": \"j\", \"samples\": "
       "{}}",
       "\"samples\" must be an array"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    Result r = Replay(good + c.line + "\n" +
                      Frame(1764000001, "n001", 2,
                            "{\"m\": \"train_loss\", \"v\": 2.4}"));
    ASSERT_EQ(r.bad.size(), 1u);
    EXPECT_EQ(r.bad[0].first, 2);
    EXPECT_NE(r.bad[0].second.find(c.reason), std::string::npos)
        << r.bad[0].second;
    EXPECT_EQ(r.stats.lines, 3);
    EXPECT_EQ(r.stats.frames, 2);
    EXPECT_EQ(r.stats.samples, 2);
    EXPECT_EQ(r.stats.bad_lines, 1);
  }
}

TEST(ReplayTest, TimeGoingBackwardsIsABadLine) {
  std::string input = Frame(1764000010, "n001", 1, "") +
                      Frame(1764000010.5, "n002", 1, "") +
                      // Within the tolerance, but not after n001's last.
                      Frame(1764000010, "n001", 1, "") +
                      // Within the tolerance, a node's first frame: fine.
                      Frame(1764000009.8, "n003", 1, "") +
                      // More than 1 s back.
                      Frame(1764000009, "n004", 1, "") +
                      Frame(1764000011, "n001", 2, "");
  Result r = Replay(input);
  ASSERT_EQ(r.bad.size(), 2u);
  EXPECT_EQ(r.bad[0].first, 3);
  EXPECT_NE(r.bad[0].second.find("not after node n001's previous frame"),
            std::string::npos)
      << r.bad[0].second;
  EXPECT_EQ(r.bad[1].first, 5);
  EXPECT_NE(r.bad[1].second.find("before an earlier frame"),
            std::string::npos)
      << r.bad[1].second;
  EXPECT_EQ(r.stats.frames, 4);
}

TEST(ReplayTest, CrLfLastLineWithoutNewlineAndOverlongLines) {
  ReplayOptions options;
  options.max_line_bytes = 200;
  std::string frame = Frame(1764000000, "n001", 1, "");
  frame.insert(frame.size() - 1, "\r");
  std::string overlong = Frame(1764000001, "n001", 2,
                               std::string(300, ' ') + "{\"m\": \"x\", "
                                                       "\"v\": 1}");
  std::string last = Frame(1764000002, "n001", 3, "{\"m\": \"x\", \"v\": 1}");
  last.pop_back();  // no final newline
  for (size_t chunk : {size_t{0}, size_t{1}, size_t{64}}) {
    Result r = Replay(frame + overlong + last, chunk, options);
    ASSERT_EQ(r.bad.size(), 1u) << chunk;
    EXPECT_EQ(r.bad[0].first, 2);
    EXPECT_EQ(r.bad[0].second, "longer than 200 bytes");
    EXPECT_EQ(r.stats.lines, 3);
    EXPECT_EQ(r.stats.frames, 2);
    EXPECT_EQ(r.stats.samples, 1);
  }
}

// A node whose NIC drops packets every second, then a job whose steps stop:
// network_packet_loss (P1) opens, the hang joins it and raises it to P0.
std::string DropsThenHang() {
  std::string input;
  for (int t = 0; t < 400; ++t) {
    const int64_t step = 100 + std::min(t, 60);  // stuck from t = 60
    for (const char* node : {"n000", "n001"}) {
      const bool dropping = std::string(node) == "n001" && t >= 30;
      input += Frame(1764000000 + t + (node[3] == '1' ? 0.1 : 0), node, step,
                     absl::StrCat("{\"m\": \"net_drops_total\", \"dev\": "
                                  "\"mlx5_1\", \"v\": ",
                                  dropping ? (t - 29) * 5 : 0, "}"));
    }
  }
  return input;
}

TEST(ReplayTest, SeverityRiseGetsALineWithTheSameIdAndItsTime) {
  Result r = Replay(DropsThenHang());
  ASSERT_EQ(r.lines.size(), 2u) << r.output;
  const json& opened = r.lines[0];
  const json& rose = r.lines[1];
  EXPECT_EQ(Keys(opened), kContractKeys);
  EXPECT_EQ(opened["severity"], "P1");
  EXPECT_EQ(opened["kind"], "network_packet_loss");
  EXPECT_EQ(opened["node"], "n001");
  std::set<std::string> rise_keys = kContractKeys;
  rise_keys.insert({"event", "first_ts", "first_step"});
  EXPECT_EQ(Keys(rose), rise_keys);
  EXPECT_EQ(rose["event"], "severity_raised");
  EXPECT_EQ(rose["id"], opened["id"]);
  EXPECT_EQ(rose["severity"], "P0");
  EXPECT_EQ(rose["first_ts"], opened["ts"]);
  EXPECT_EQ(rose["first_step"], opened["step"]);
  // The hang is declared about hang_timeout_s (180 s) after the last step.
  EXPECT_GT(rose["ts"].get<double>(), opened["ts"].get<double>() + 150);
  EXPECT_EQ(r.stats.incidents, 1);
  EXPECT_EQ(r.stats.severity_rises, 1);
}

TEST(ReplayTest, SilentNodeIsDetectedFromOtherNodesFrameTimes) {
  std::string input;
  for (int t = 0; t < 120; ++t) {
    for (const char* node : {"n000", "n001", "n002"}) {
      if (std::string(node) == "n002" && t >= 40) continue;
      input += Frame(1764000000 + t, node, 100 + t,
                     "{\"m\": \"gpu_power_watts\", \"gpu\": 0, \"v\": 600}");
    }
  }
  Result r = Replay(input);
  ASSERT_FALSE(r.lines.empty());
  EXPECT_EQ(r.lines[0]["kind"], "node_down");
  EXPECT_EQ(r.lines[0]["severity"], "P0");
  EXPECT_EQ(r.lines[0]["node"], "n002");
  const double delay = r.lines[0]["ts"].get<double>() - (1764000000 + 39);
  EXPECT_GE(delay, 15);
  EXPECT_LE(delay, 20);
}

TEST(ReplayTest, ReopenedIncidentGetsALineWithTheSameId) {
  // Drops on n001 for a minute, quiet for 10 min (resolves after 300 s),
  // then drops again: the same incident reopens.
  std::string input;
  int64_t drops = 0;
  for (int t = 0; t < 1000; ++t) {
    if ((t >= 30 && t < 90) || t >= 800) drops += 3;
    for (const char* node : {"n000", "n001"}) {
      input += Frame(
          1764000000 + t + (node[3] == '1' ? 0.1 : 0), node, 100 + t,
          absl::StrCat("{\"m\": \"net_drops_total\", \"dev\": \"mlx5_1\", "
                       "\"v\": ",
                       node[3] == '1' ? drops : 0, "}"));
    }
  }
  Result r = Replay(input);
  ASSERT_EQ(r.lines.size(), 2u) << r.output;
  EXPECT_EQ(r.lines[1]["event"], "reopened");
  EXPECT_EQ(r.lines[1]["id"], r.lines[0]["id"]);
  EXPECT_EQ(r.lines[1]["severity"], "P1");
  EXPECT_EQ(r.lines[1]["first_ts"], r.lines[0]["ts"]);
  EXPECT_GE(r.lines[1]["ts"].get<double>(), 1764000800.0);
  EXPECT_EQ(r.stats.reopens, 1);
}

TEST(ReplayTest, SameInputSameOutputBytesHoweverChunked) {
  const std::string input = DropsThenHang();
  const Result whole = Replay(input);
  ASSERT_FALSE(whole.output.empty());
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}}) {
    EXPECT_EQ(Replay(input, chunk).output, whole.output) << chunk;
  }
  EXPECT_EQ(Replay(input).output, whole.output);
}

TEST(ReplayTest, ReplayStreamWritesLinesAndReportsBadOnes) {
  std::FILE* in = std::tmpfile();
  std::FILE* out = std::tmpfile();
  std::FILE* errors = std::tmpfile();
  ASSERT_TRUE(in && out && errors);
  const std::string input = DropsThenHang() + "oops\n";
  std::fwrite(input.data(), 1, input.size(), in);
  std::rewind(in);
  absl::StatusOr<ReplayStats> stats =
      ReplayStream(in, out, errors, ReplayOptions());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bad_lines, 1);
  auto read_all = [](std::FILE* f) {
    std::rewind(f);
    std::string s;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) {
      s.append(buf, n);
    }
    return s;
  };
  EXPECT_EQ(read_all(out), Replay(DropsThenHang()).output);
  EXPECT_EQ(read_all(errors).rfind("line 801: invalid JSON", 0), 0u);
  std::fclose(in);
  std::fclose(out);
  std::fclose(errors);
}

}  // namespace
}  // namespace vigil
