#include "storage/series_index.h"

#include <cstring>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "storage/varint.h"

namespace vigil {
namespace {

// Reads a key's field length, consuming it; false when it is cut short.
bool GetVarint(std::string_view* in, size_t* n) {
  uint64_t v;
  if (!storage_internal::GetVarint64(in, &v) || v > UINT32_MAX) return false;
  *n = static_cast<size_t>(v);
  return true;
}

// Reads one length-prefixed field of an encoded key (EncodeSeriesKey's
// layout: the metric, then name and value of each label, each as a varint
// length and its bytes), consuming it; false when the bytes are cut short.
bool NextField(std::string_view* in, std::string_view* field) {
  size_t n;
  if (!GetVarint(in, &n) || in->size() < n) return false;
  *field = in->substr(0, n);
  in->remove_prefix(n);
  return true;
}

}  // namespace

size_t SeriesIndex::Hash::operator()(SeriesId id) const {
  return (*this)(index->Encoded(id));
}

size_t SeriesIndex::Hash::operator()(std::string_view encoded) const {
  return absl::Hash<std::string_view>()(encoded);
}

bool SeriesIndex::Eq::operator()(SeriesId a, std::string_view b) const {
  return index->Encoded(a) == b;
}

SeriesIndex::SeriesIndex() : ids_(0, Hash{this}, Eq{this}) {}

std::optional<SeriesId> SeriesIndex::Find(std::string_view encoded) const {
  auto it = ids_.find(encoded);
  if (it == ids_.end()) return std::nullopt;
  return *it;
}

SeriesId SeriesIndex::Add(std::string_view encoded) {
  const SeriesId id = static_cast<SeriesId>(keys_.size());
  char prefix[storage_internal::kMaxVarint64Bytes];
  const size_t prefix_size =
      storage_internal::EncodeVarint64(prefix, encoded.size()) - prefix;
  auto bytes = std::make_unique_for_overwrite<char[]>(prefix_size + encoded.size());
  std::memcpy(bytes.get(), prefix, prefix_size);
  std::memcpy(bytes.get() + prefix_size, encoded.data(), encoded.size());
  keys_.push_back(std::move(bytes));
  ids_.insert(id);
  return id;
}

void SeriesIndex::AddExpired() { keys_.emplace_back(); }

void SeriesIndex::Expire(SeriesId id) {
  if (!Live(id)) return;
  ids_.erase(id);
  keys_[id].reset();
}

std::string_view SeriesIndex::Encoded(SeriesId id) const {
  // The varint length written by Add, then the bytes.
  const auto* p = reinterpret_cast<const unsigned char*>(keys_[id].get());
  size_t n = 0;
  int shift = 0;
  for (; *p & 0x80; ++p, shift += 7) n |= static_cast<size_t>(*p & 0x7f) << shift;
  n |= static_cast<size_t>(*p++) << shift;
  return std::string_view(reinterpret_cast<const char*>(p), n);
}

absl::StatusOr<SeriesKey> SeriesIndex::Key(SeriesId id) const {
  if (!Live(id))
    return absl::NotFoundError(absl::StrCat("unknown series id ", id));
  return DecodeSeriesKey(Encoded(id));
}

bool SeriesIndex::Matches(SeriesId id, const SeriesFilter& filter) const {
  std::string_view rest = Encoded(id);
  std::string_view metric;
  if (!NextField(&rest, &metric)) return false;
  if (!filter.metric.empty() && metric != filter.metric) return false;
  if (filter.job.empty() && filter.node.empty()) return true;
  std::string_view job, node, name, value;
  while (NextField(&rest, &name) && NextField(&rest, &value)) {
    if (name == "job") job = value;
    if (name == "node") node = value;
  }
  return (filter.job.empty() || job == filter.job) &&
         (filter.node.empty() || node == filter.node);
}

}  // namespace vigil
