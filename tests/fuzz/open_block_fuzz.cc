// Fuzzes open-block pieces (storage/compressed_samples.h): the records the
// store's checkpoints write to its `open` column family and read back when
// it opens, where a torn write or a bad sector leaves anything
// (docs/ARCHITECTURE.md, "Storage layout and durability"). Two modes, by
// the first byte:
//   even: untrusted records. A 2-byte little-endian length, that many
//     bytes of a record to continue from, then the record. Each must decode
//     or be refused, never crash, and one that decodes holds exactly the
//     samples its header promises.
//   odd: the encoder. The rest of the input spells out samples (regular
//     and wild timestamps; decimals at every scale and unit, raw doubles,
//     NaN payloads, -0.0) and where checkpoints cut them into records.
//     The sequence decodes bit for bit, from its start and from any
//     sample, and its records rebuild it as the store's loader does.
#include <fuzzer/FuzzedDataProvider.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/compressed_samples.h"

namespace {

using vigil::CompressedSamples;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Whether decoded samples agree with what the record's header says.
bool MatchesHeader(const std::optional<CompressedSamples::RecordInfo>& info,
                   bool continues, const std::vector<int64_t>& ts,
                   const std::vector<double>& values) {
  return info.has_value() && info->continues == continues &&
         ts.size() == info->count && values.size() == ts.size() &&
         !ts.empty() && ts.back() == info->last_ts_ms;
}

void DecodeUntrusted(std::string_view input) {
  if (input.size() < 2) return;
  const size_t previous_size = static_cast<uint8_t>(input[0]) |
                               static_cast<size_t>(static_cast<uint8_t>(input[1])) << 8;
  input.remove_prefix(2);
  const std::string_view previous = input.substr(0, previous_size);
  const std::string_view record = input.substr(previous.size());
  const std::optional<CompressedSamples::RecordInfo> info =
      CompressedSamples::PeekRecord(record);

  // As a block's first piece.
  std::vector<int64_t> ts;
  std::vector<double> values;
  CompressedSamples empty;
  if (empty.DecodeRecord(record, "", &ts, &values))
    Check(MatchesHeader(info, false, ts, values));

  // As the piece after `previous`, on the sequence `previous` rebuilt.
  CompressedSamples base;
  ts.clear();
  values.clear();
  if (!base.DecodeRecord(previous, "", &ts, &values)) return;
  for (size_t i = 0; i < ts.size(); ++i) base.Append(ts[i], values[i]);
  ts.clear();
  values.clear();
  if (base.DecodeRecord(record, previous, &ts, &values))
    Check(MatchesHeader(info, true, ts, values));
}

constexpr double kPow10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};

// The encoder takes any timestamps; their sums wrap as its deltas do.
int64_t WrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

void RoundTrip(FuzzedDataProvider& in) {
  CompressedSamples samples;
  std::vector<std::string> records;
  CompressedSamples::Mark mark = samples.mark();
  std::vector<int64_t> want_ts;
  std::vector<uint64_t> want_bits;
  int64_t ts = in.ConsumeIntegral<int64_t>();
  int64_t q = in.ConsumeIntegralInRange<int64_t>(-1000000, 1000000);
  int scale = 0;
  int64_t unit = 1;
  double value = 0;
  while (in.remaining_bytes() > 0 && want_ts.size() < 2048) {
    const uint8_t op = in.ConsumeIntegral<uint8_t>();
    switch (op & 3) {  // the timestamp
      case 0:
      case 1: ts = WrappingAdd(ts, 1000); break;
      case 2: ts = WrappingAdd(ts, in.ConsumeIntegral<int8_t>()); break;
      default: ts = WrappingAdd(ts, in.ConsumeIntegral<int64_t>()); break;
    }
    switch ((op >> 2) & 7) {  // the value
      case 0: break;          // the same again
      case 1:
        value = std::bit_cast<double>(in.ConsumeIntegral<uint64_t>());
        break;
      case 2: scale = in.ConsumeIntegralInRange(0, 6); [[fallthrough]];
      case 3: unit = int64_t{1} << in.ConsumeIntegralInRange(0, 40); [[fallthrough]];
      default:
        q = WrappingAdd(q, static_cast<int64_t>(
                               static_cast<uint64_t>(unit) *
                               static_cast<uint64_t>(in.ConsumeIntegral<int8_t>())));
        // Now and then beyond a double's exact integers.
        if ((op >> 2 & 7) == 7) q ^= int64_t{1} << in.ConsumeIntegralInRange(40, 62);
        value = static_cast<double>(q) / kPow10[scale];
        break;
    }
    samples.Append(ts, value);
    want_ts.push_back(ts);
    want_bits.push_back(std::bit_cast<uint64_t>(value));
    if ((op & 0xe0) == 0xe0) {  // a checkpoint
      records.emplace_back();
      samples.AppendRecordSince(mark, &records.back());
      mark = samples.mark();
    }
  }
  records.emplace_back();
  samples.AppendRecordSince(mark, &records.back());
  if (records.back().empty()) records.pop_back();

  const auto same = [&](size_t from, const std::vector<int64_t>& ts_out,
                        const std::vector<double>& values_out) {
    if (ts_out.size() != want_ts.size() - from || values_out.size() != ts_out.size())
      return false;
    for (size_t i = 0; i < ts_out.size(); ++i) {
      if (ts_out[i] != want_ts[from + i] ||
          std::bit_cast<uint64_t>(values_out[i]) != want_bits[from + i])
        return false;
    }
    return true;
  };
  std::vector<int64_t> ts_out;
  std::vector<double> values_out;
  samples.Decode(0, &ts_out, &values_out);
  Check(same(0, ts_out, values_out));
  if (!want_ts.empty()) {
    const size_t from = static_cast<size_t>(want_bits.back() % want_ts.size());
    ts_out.clear();
    values_out.clear();
    samples.Decode(from, &ts_out, &values_out);
    Check(same(from, ts_out, values_out));
  }

  // The loader: each record against what was rebuilt so far.
  CompressedSamples rebuilt;
  std::string_view previous;
  for (const std::string& record : records) {
    std::vector<int64_t> ts_piece;
    std::vector<double> values_piece;
    Check(rebuilt.DecodeRecord(record, previous, &ts_piece, &values_piece));
    Check(MatchesHeader(CompressedSamples::PeekRecord(record), !rebuilt.empty(),
                        ts_piece, values_piece));
    for (size_t i = 0; i < ts_piece.size(); ++i) rebuilt.Append(ts_piece[i], values_piece[i]);
    previous = record;
  }
  ts_out.clear();
  values_out.clear();
  rebuilt.Decode(0, &ts_out, &values_out);
  Check(same(0, ts_out, values_out));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    DecodeUntrusted(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  } else {
    FuzzedDataProvider in(data + 1, size - 1);
    RoundTrip(in);
  }
  return 0;
}
