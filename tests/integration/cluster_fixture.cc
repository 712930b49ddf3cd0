#include "tests/integration/cluster_fixture.h"

#include <cmath>
#include <cstring>

#include <httplib.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vigil::testing_util {

namespace {

std::string FullName(const SeriesKey& key, const std::string& node,
                     const std::string& job) {
  SeriesKey full = key;
  full.labels.emplace_back("job", job);
  full.labels.emplace_back("node", node);
  EXPECT_TRUE(NormalizeSeriesKey(&full).ok());
  return full.ToString();
}

double JsonValue(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  std::string s = v.get<std::string>();
  if (s == "nan") return std::nan("");
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  ADD_FAILURE() << "bad value " << s;
  return 0;
}

}  // namespace

SimulatedAgent::SimulatedAgent(const std::string& node, const std::string& job,
                               int seed, const std::string& server,
                               const std::string& fault,
                               double fault_at_seconds)
    : node_(node) {
  agent::SimulatorOptions sim_options;
  sim_options.node = node;
  sim_options.job = job;
  sim_options.seed = seed;
  if (!fault.empty()) {
    agent::ScenarioSpec spec;
    spec.name = fault;
    agent::FaultSpec f;
    f.kind = fault;
    f.node = node;
    f.at_seconds = fault_at_seconds;
    spec.faults.push_back(f);
    auto faults = agent::ResolveFaults(spec, 7);
    EXPECT_TRUE(faults.ok()) << faults.status();
    scenario_ = std::make_unique<agent::FaultScenario>(*faults, node);
  }
  auto sim = agent::Simulator::Create(sim_options, scenario_.get());
  EXPECT_TRUE(sim.ok()) << sim.status();
  sim_ = std::make_unique<agent::Simulator>(std::move(*sim));

  agent::StreamClientOptions options;
  options.server = server;
  options.node = node;
  agent::AgentTransportConfig plaintext;
  plaintext.insecure = true;
  options.security = *agent::TransportSecurity::Create(plaintext);
  options.initial_backoff_seconds = 0.05;
  options.max_backoff_seconds = 0.5;
  options.seed = seed;
  auto client = agent::StreamClient::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  client_ = std::move(*client);
  for (const SeriesKey& key : sim_->series()) {
    auto id = client_->RegisterSeries(key);
    EXPECT_TRUE(id.ok()) << id.status();
    ids_.push_back(*id);
    names_.push_back(FullName(key, node, job));
  }
  client_->Start();
}

SimulatedAgent::~SimulatedAgent() { client_->Stop(); }

void SimulatedAgent::EnqueueTicks(double first_ts, int count) {
  for (int i = 0; i < count; ++i) {
    auto frame = sim_->Tick(first_ts + i);
    if (!frame) continue;
    v1::Frame out;
    out.set_job(sim_->options().job);
    out.set_step(frame->step);
    out.set_ts(frame->ts);
    for (const agent::SimSample& s : frame->samples) {
      out.add_series_ids(ids_[s.series]);
      out.add_values(s.value);
      sent_[names_[s.series]].push_back(Sample{frame->ts, s.value});
    }
    std::vector<v1::Frame> frames;
    frames.push_back(std::move(out));
    auto seq = client_->Enqueue(std::move(frames));
    ASSERT_TRUE(seq.ok()) << seq.status();
    last_seq_ = *seq;
  }
}

bool SimulatedAgent::WaitAllAcked(double timeout_seconds) {
  return client_->WaitForAcked(last_seq_,
                               RealClock()->Now() + timeout_seconds);
}

SentSamples FetchNode(int http_port, const std::string& node, double from,
                      double to) {
  SentSamples out;
  httplib::Client http("127.0.0.1", http_port);
  auto list = http.Get(("/api/v1/series?node=" + node).c_str());
  if (!list || list->status != 200) {
    ADD_FAILURE() << "series list failed for " << node;
    return out;
  }
  auto body = nlohmann::json::parse(list->body);
  for (const auto& s : body["series"]) {
    SeriesKey key;
    key.metric = s["metric"].get<std::string>();
    for (const auto& [name, value] : s["labels"].items()) {
      key.labels.emplace_back(name, value.get<std::string>());
    }
    EXPECT_TRUE(NormalizeSeriesKey(&key).ok());
    char path[200];
    std::snprintf(path, sizeof(path), "/api/v1/query?series=%u&from=%.3f&to=%.3f",
                  s["id"].get<uint32_t>(), from, to);
    auto r = http.Get(path);
    if (!r || r->status != 200) {
      ADD_FAILURE() << "query failed: " << path;
      continue;
    }
    auto points = nlohmann::json::parse(r->body)["points"];
    auto& samples = out[key.ToString()];
    for (const auto& p : points) {
      samples.push_back(Sample{p[0].get<double>(), JsonValue(p[1])});
    }
  }
  return out;
}

bool SameSamples(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i].ts - b[i].ts) > 5e-4) return false;
    if (std::memcmp(&a[i].value, &b[i].value, sizeof(double)) != 0 &&
        !(std::isnan(a[i].value) && std::isnan(b[i].value)))
      return false;
  }
  return true;
}

}  // namespace vigil::testing_util
