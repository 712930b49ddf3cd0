#include "bench/noisy_data.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>

namespace vigil::bench {
namespace {

bool IsByteCounter(const std::string& metric) {
  return metric == "net_tx_bytes_total" || metric == "net_rx_bytes_total" ||
         metric == "gpu_nvlink_tx_bytes_total" || metric == "gpu_nvlink_rx_bytes_total";
}

// Bits to code the deltas whose magnitudes are `magnitudes` (see the
// header); `signed_nonzero[i]`: delta i needs a sign bit.
double DeltaBits(const std::vector<uint64_t>& magnitudes, const std::vector<bool>& signed_nonzero) {
  if (magnitudes.empty()) return 0;
  std::map<int, size_t> classes;
  double raw_bits = 0;
  for (size_t i = 0; i < magnitudes.size(); ++i) {
    const int width = std::bit_width(magnitudes[i]);
    ++classes[width];
    if (width > 0) raw_bits += width - 1 + (signed_nonzero[i] ? 1 : 0);
  }
  double class_bits = 0;
  const double n = static_cast<double>(magnitudes.size());
  for (const auto& [width, count] : classes) class_bits -= count * std::log2(count / n);
  return class_bits + raw_bits;
}

// Bits for the integers `v` coded as themselves (less their minimum),
// their deltas or their delta-of-deltas, whichever is cheapest, each
// divided by the GCD of what it codes.
double IntegerBits(const std::vector<int64_t>& v) {
  if (v.size() < 2) return 0;
  std::vector<std::vector<int64_t>> forms(3);
  const int64_t lowest = *std::min_element(v.begin(), v.end());
  for (int64_t x : v) forms[0].push_back(x - lowest);
  for (size_t i = 1; i < v.size(); ++i) forms[1].push_back(v[i] - v[i - 1]);
  for (size_t i = 1; i < forms[1].size(); ++i) forms[2].push_back(forms[1][i] - forms[1][i - 1]);
  double best = HUGE_VAL;
  for (const std::vector<int64_t>& form : forms) {
    uint64_t gcd = 0;
    for (int64_t x : form) gcd = std::gcd(gcd, x < 0 ? static_cast<uint64_t>(-x) : static_cast<uint64_t>(x));
    std::vector<uint64_t> magnitudes;
    std::vector<bool> has_sign;
    for (int64_t x : form) {
      const uint64_t m = x < 0 ? static_cast<uint64_t>(-x) : static_cast<uint64_t>(x);
      magnitudes.push_back(gcd > 1 ? m / gcd : m);
      has_sign.push_back(x != 0 && &form != &forms[0]);
    }
    best = std::min(best, DeltaBits(magnitudes, has_sign));
  }
  return best;
}

// Bits for the values of one series: the first value in full, then the
// rest as exact decimal integers (IntegerBits) or, when no scale is exact,
// as the XOR of successive bit patterns.
double ValueBits(const std::vector<double>& values) {
  for (int k = 0; k <= 6; ++k) {
    const double scale = std::pow(10.0, k);
    std::vector<int64_t> ints;
    bool exact = true;
    for (double v : values) {
      const double scaled = std::round(v * scale);
      if (!std::isfinite(v) || std::fabs(scaled) > 9e15 || scaled / scale != v) {
        exact = false;
        break;
      }
      ints.push_back(static_cast<int64_t>(scaled));
    }
    if (exact) return 64 + IntegerBits(ints);
  }
  std::vector<uint64_t> magnitudes;
  std::vector<bool> has_sign;
  for (size_t i = 1; i < values.size(); ++i) {
    uint64_t a, b;
    std::memcpy(&a, &values[i - 1], 8);
    std::memcpy(&b, &values[i], 8);
    const uint64_t x = a ^ b;
    // The XOR's meaningful bits: drop its trailing zeros (their count is
    // part of the class below, as Gorilla codes it).
    magnitudes.push_back(x == 0 ? 0 : x >> std::countr_zero(x));
    has_sign.push_back(false);
  }
  return 64 + DeltaBits(magnitudes, has_sign);
}

}  // namespace

void MakeNoisy(NodeLoad* load, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> jitter(-0.020, 0.020);
  std::uniform_real_distribution<double> power_noise(-0.5, 0.5);
  std::uniform_int_distribution<int> extra_bytes(0, 65535);
  std::vector<double> extra(load->series.size(), 0);
  for (v1::FrameBatch& batch : load->batches) {
    for (v1::Frame& f : *batch.mutable_frames()) {
      f.set_ts(std::round((f.ts() + jitter(rng)) * 1000) / 1000);
      for (int i = 0; i < f.series_ids_size(); ++i) {
        const uint32_t id = f.series_ids(i);
        const std::string& metric = load->series[id].metric;
        if (metric == "gpu_power_watts") {
          f.set_values(i, std::round((f.values(i) + power_noise(rng)) * 1000) / 1000);
        } else if (IsByteCounter(metric)) {
          extra[id] += extra_bytes(rng);
          f.set_values(i, f.values(i) + extra[id]);
        }
      }
    }
  }
}

double EntropyBytesPerSample(const std::vector<NodeLoad>& loads) {
  double bits = 0;
  uint64_t samples = 0;
  for (const NodeLoad& load : loads) {
    std::vector<std::vector<int64_t>> ts(load.series.size());
    std::vector<std::vector<double>> values(load.series.size());
    for (const v1::FrameBatch& batch : load.batches) {
      for (const v1::Frame& f : batch.frames()) {
        const int64_t ms = std::llround(f.ts() * 1000);
        for (int i = 0; i < f.series_ids_size(); ++i) {
          ts[f.series_ids(i)].push_back(ms);
          values[f.series_ids(i)].push_back(f.values(i));
        }
      }
    }
    for (size_t id = 0; id < load.series.size(); ++id) {
      samples += ts[id].size();
      bits += 64 + IntegerBits(ts[id]) + ValueBits(values[id]);
    }
  }
  return samples == 0 ? 0 : bits / 8 / samples;
}

}  // namespace vigil::bench
