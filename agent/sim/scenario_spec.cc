#include "agent/sim/scenario_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace vigil::agent {
namespace {

using json = nlohmann::json;

struct KindInfo {
  const char* name;
  const char* help;
};

const KindInfo kKinds[] = {
    {"thermal_throttle",
     "GPU heats up (cooling failure), throttles (0x20/0x40), job slows; "
     "magnitude: final SM clock ratio (default ~0.77)"},
    {"nvlink_degradation",
     "NVLink CRC/replay errors climb, GPU's NVLink traffic falls to ~0 "
     "(PCIe fallback), job slows; magnitude: job speed (default ~0.55)"},
    {"packet_loss_hang",
     "drops/retransmits on one NIC, then the NCCL ring hangs; magnitude: "
     "packet loss ratio (default ~2e-4)"},
    {"dataloader_stall",
     "every few steps the node's GPUs idle waiting for data; magnitude: "
     "seconds per stall (default ~1.6)"},
    {"loss_nan", "loss and grad norm spike, then NaN; magnitude unused"},
    {"grad_explosion",
     "grad norm grows exponentially, loss rises; magnitude: growth per step "
     "(default ~1.25)"},
    {"loss_oscillation",
     "loss swings violently, grad norm normal, dataloader wait high; "
     "magnitude: relative swing (default ~0.35)"},
    {"oom_growth",
     "one GPU's allocator memory grows linearly to the limit; magnitude: "
     "MiB per second (default ~20)"},
    {"fragmentation",
     "reserved stays, allocated falls (gap > 20 %), alloc retries rise; "
     "magnitude: final allocated/reserved (default ~0.62)"},
    {"ecc_dbe", "a double-bit ECC error (XID 48), row remap pending"},
    {"ecc_sbe_storm",
     "single-bit ECC errors climbing fast; magnitude: errors per minute "
     "(default ~120)"},
    {"gpu_fell_off_bus", "XID 79, then the GPU is gone and the job hangs"},
    {"node_down", "the node sends nothing; the job hangs"},
    {"throughput_drop_20",
     "whole job ~20 % slower, no culprit; magnitude: slowdown (0.20)"},
    {"throughput_drop_35",
     "whole job ~35 % slower, no culprit; magnitude: slowdown (0.35)"},
    {"gpu_power_low_55w",
     "one GPU ~55 W below its peers, no throttle bits; magnitude: watts"},
    {"low_mfu",
     "the job is inefficient from the start; magnitude: MFU (default 0.30)"},
    {"loss_scale_thrash",
     "fp16 job whose loss scale keeps halving; magnitude: overflow "
     "probability per step (default ~0.3)"},
    {"nvlink_bandwidth_degraded",
     "one GPU's NVLink traffic falls to ~20-30 % of its peers' with no "
     "error counter and no XID; that GPU becomes the straggler and the job's "
     "step time rises by > 50 %; magnitude: traffic ratio (default ~0.25)"},
    {"xid_storm",
     "one GPU reports thousands of XID events within a few minutes; code "
     "94 (contained ECC, hardware) or 13/31 (application) by seed or "
     "\"xid\"; magnitude: events (default ~10000)"},
    {"rack_down",
     "several nodes of the job (\"nodes\", default 3) stop reporting at the "
     "same moment; the job hangs"},
};

// Collects errors with JSON paths.
class Errors {
 public:
  void Add(const std::string& path, std::string_view message) {
    lines_.push_back(absl::StrCat(path, ": ", std::string(message)));
  }
  bool empty() const { return lines_.empty(); }
  std::string Join() const { return absl::StrJoin(lines_, "\n"); }

 private:
  std::vector<std::string> lines_;
};

bool IsKnownKind(std::string_view kind) {
  for (const KindInfo& k : kKinds) {
    if (kind == k.name) return true;
  }
  return false;
}

std::string KnownScenarios() {
  return absl::StrCat("healthy, ", absl::StrJoin(FaultKindNames(), ", "));
}

void ParseFault(const json& j, const std::string& path, Errors* errors,
                FaultSpec* fault) {
  if (!j.is_object()) {
    errors->Add(path, "must be an object");
    return;
  }
  // Reads an optional finite number >= `min`.
  auto number = [&](const char* key, double min, std::optional<double>* out) {
    auto it = j.find(key);
    if (it == j.end()) return;
    std::string p = absl::StrCat(path, ".", key);
    if (!it->is_number() || !std::isfinite(it->get<double>()) ||
        it->get<double>() < min) {
      errors->Add(p, absl::StrCat("must be a number >= ", min));
      return;
    }
    *out = it->get<double>();
  };
  auto integer = [&](const char* key, int64_t min, int64_t max,
                     std::optional<int64_t>* out) {
    auto it = j.find(key);
    if (it == j.end()) return;
    std::string p = absl::StrCat(path, ".", key);
    if (!it->is_number_integer() || it->get<int64_t>() < min ||
        it->get<int64_t>() > max) {
      errors->Add(p, absl::StrCat("must be an integer ", min, "..", max));
      return;
    }
    *out = it->get<int64_t>();
  };
  auto string = [&](const char* key, std::string* out) {
    auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_string() || it->get<std::string>().empty()) {
      errors->Add(absl::StrCat(path, ".", key), "must be a non-empty string");
      return;
    }
    *out = it->get<std::string>();
  };
  static const char* const kFields[] = {"kind",
                                        "node",
                                        "gpu",
                                        "dev",
                                        "nodes",
                                        "xid",
                                        "at_step",
                                        "at_seconds",
                                        "duration_seconds",
                                        "magnitude",
                                        "hang_after_seconds",
                                        "period_steps",
                                        "nan"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* f : kFields) known = known || it.key() == f;
    if (!known) errors->Add(absl::StrCat(path, ".", it.key()), "unknown field");
  }
  auto kind = j.find("kind");
  if (kind == j.end()) {
    errors->Add(path + ".kind", "missing");
  } else if (!kind->is_string() || !IsKnownKind(kind->get<std::string>())) {
    errors->Add(path + ".kind",
                absl::StrCat("unknown fault kind ", kind->dump(), " (known: ",
                             absl::StrJoin(FaultKindNames(), ", "), ")"));
  } else {
    fault->kind = kind->get<std::string>();
  }
  string("node", &fault->node);
  string("dev", &fault->dev);
  auto nodes = j.find("nodes");
  if (nodes != j.end()) {
    bool ok = nodes->is_array() && !nodes->empty();
    for (const json& n : ok ? *nodes : json::array()) {
      ok = ok && n.is_string() && !n.get<std::string>().empty();
      if (ok) fault->nodes.push_back(n.get<std::string>());
    }
    if (!ok) {
      fault->nodes.clear();
      errors->Add(path + ".nodes",
                  "must be a non-empty array of non-empty strings");
    }
  }
  std::optional<int64_t> xid;
  integer("xid", 1, 1000, &xid);
  if (xid.has_value()) fault->xid = static_cast<int>(*xid);
  std::optional<int64_t> gpu, period;
  integer("gpu", 0, 63, &gpu);
  if (gpu.has_value()) fault->gpu = static_cast<int>(*gpu);
  integer("at_step", 0, int64_t{1} << 40, &fault->at_step);
  number("at_seconds", 0, &fault->at_seconds);
  if (fault->at_step.has_value() && fault->at_seconds.has_value()) {
    errors->Add(path, "give at_step or at_seconds, not both");
  }
  number("duration_seconds", 0, &fault->duration_seconds);
  number("magnitude", 0, &fault->magnitude);
  number("hang_after_seconds", 0, &fault->hang_after_seconds);
  integer("period_steps", 1, 1000, &period);
  if (period.has_value()) fault->period_steps = static_cast<int>(*period);
  auto nan = j.find("nan");
  if (nan != j.end()) {
    if (nan->is_boolean()) {
      fault->nan = nan->get<bool>();
    } else {
      errors->Add(path + ".nan", "must be true or false");
    }
  }
}

}  // namespace

const std::vector<std::string>& FaultKindNames() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>;
    for (const KindInfo& k : kKinds) v->push_back(k.name);
    return v;
  }();
  return *names;
}

std::string_view FaultKindHelp(std::string_view kind) {
  for (const KindInfo& k : kKinds) {
    if (kind == k.name) return k.help;
  }
  return "";
}

double DefaultStartSeconds(std::string_view kind) {
  if (kind == "low_mfu") return 0;
  if (kind == "throughput_drop_20" || kind == "throughput_drop_35") {
    return 2400;
  }
  return 120;
}

absl::StatusOr<ScenarioSpec> ScenarioSpecFromName(std::string_view name) {
  ScenarioSpec spec;
  spec.name = std::string(name);
  if (name == "healthy") return spec;
  if (!IsKnownKind(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown scenario '", std::string(name),
                     "' (known: ", KnownScenarios(), ")"));
  }
  FaultSpec fault;
  fault.kind = std::string(name);
  spec.faults.push_back(std::move(fault));
  return spec;
}

absl::StatusOr<ScenarioSpec> ParseScenarioSpec(std::string_view json_text) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError("$: not valid JSON");
  }
  Errors errors;
  ScenarioSpec spec;
  spec.name = "custom";
  if (!j.is_object()) {
    return absl::InvalidArgumentError("$: must be an object");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "name" && it.key() != "faults") {
      errors.Add("$." + it.key(), "unknown field");
    }
  }
  auto name = j.find("name");
  if (name != j.end()) {
    if (name->is_string() && !name->get<std::string>().empty()) {
      spec.name = name->get<std::string>();
    } else {
      errors.Add("$.name", "must be a non-empty string");
    }
  }
  auto faults = j.find("faults");
  if (faults == j.end()) {
    errors.Add("$.faults", "missing (use [] for a healthy run)");
  } else if (!faults->is_array()) {
    errors.Add("$.faults", "must be an array");
  } else {
    for (size_t i = 0; i < faults->size(); ++i) {
      FaultSpec fault;
      ParseFault((*faults)[i], absl::StrCat("$.faults[", i, "]"), &errors,
                 &fault);
      spec.faults.push_back(std::move(fault));
    }
  }
  if (!errors.empty()) return absl::InvalidArgumentError(errors.Join());
  return spec;
}

absl::StatusOr<ScenarioSpec> ScenarioSpecFromArg(const std::string& arg) {
  if (!arg.ends_with(".json")) return ScenarioSpecFromName(arg);
  std::ifstream in(arg);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", arg));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ScenarioSpec> spec = ParseScenarioSpec(text.str());
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg, ":\n", spec.status().message()));
  }
  return spec;
}

absl::Status ResolveFaultDefaults(const FaultOverrides& overrides,
                                  const std::string& default_node,
                                  const std::vector<std::string>& nodes,
                                  int gpus, int nics, ScenarioSpec* spec) {
  for (size_t i = 0; i < spec->faults.size(); ++i) {
    FaultSpec& f = spec->faults[i];
    std::string where = absl::StrCat("fault ", i, " (", f.kind, ")");
    if (overrides.node.has_value()) f.node = *overrides.node;
    if (overrides.gpu.has_value()) f.gpu = *overrides.gpu;
    if (overrides.at_step.has_value()) {
      f.at_step = overrides.at_step;
      f.at_seconds.reset();
    }
    if (overrides.at_seconds.has_value()) {
      f.at_seconds = overrides.at_seconds;
      f.at_step.reset();
    }
    if (f.node.empty()) f.node = default_node;
    if (!f.nodes.empty() &&
        std::find(f.nodes.begin(), f.nodes.end(), f.node) == f.nodes.end()) {
      f.node = f.nodes[0];
    }
    auto in_cluster = [&](const std::string& node) {
      return nodes.empty() ||
             std::find(nodes.begin(), nodes.end(), node) != nodes.end();
    };
    if (!in_cluster(f.node)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": node '", f.node, "' is not in the cluster"));
    }
    if (f.kind == "rack_down" && f.nodes.empty()) {
      // A rack: this node and the next ones, leaving one node up.
      size_t first =
          std::find(nodes.begin(), nodes.end(), f.node) - nodes.begin();
      size_t count =
          nodes.size() <= 1 ? 1 : std::min<size_t>(3, nodes.size() - 1);
      if (nodes.empty()) f.nodes = {f.node};
      for (size_t k = 0; k < count && !nodes.empty(); ++k) {
        f.nodes.push_back(nodes[(first + k) % nodes.size()]);
      }
    }
    for (const std::string& n : f.nodes) {
      if (!in_cluster(n)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": node '", n, "' is not in the cluster"));
      }
    }
    if (!f.gpu.has_value()) f.gpu = std::min(3, gpus - 1);
    if (*f.gpu < 0 || *f.gpu >= gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": gpu ", *f.gpu, " out of range (node has ", gpus, ")"));
    }
    if (f.kind == "packet_loss_hang") {
      if (nics < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the node has no NIC"));
      }
      if (f.dev.empty()) f.dev = absl::StrCat("mlx5_", *f.gpu % nics);
      bool found = false;
      for (int n = 0; n < nics; ++n) {
        found = found || f.dev == absl::StrCat("mlx5_", n);
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": no NIC '", f.dev, "' (mlx5_0..mlx5_", nics - 1, ")"));
      }
    }
    if (!f.at_step.has_value() && !f.at_seconds.has_value()) {
      f.at_seconds = DefaultStartSeconds(f.kind);
    }
  }
  return absl::OkStatus();
}

}  // namespace vigil::agent
