// The in-memory series index of the RocksDB store: id -> key and key -> id
// with each key held once, in its compact encoded form (EncodeSeriesKey),
// and the key -> id direction a hash set of ids that hashes the bytes the
// ids point at. About 80 bytes a series where a SeriesKey in a vector plus
// another in a hash map took ~700 (bench/RESULTS.md, issue 14).
// Internal to storage/.
#ifndef VIGIL_STORAGE_SERIES_INDEX_H_
#define VIGIL_STORAGE_SERIES_INDEX_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/series_key.h"
#include "storage/series_store.h"

namespace vigil {

// Series keys by dense id (0, 1, 2, ...) and ids by key. An id stays given
// out once its series expires; its key is freed. Not thread-safe: the
// owner locks. Neither copyable nor movable (the hash set's functors point
// into it).
class SeriesIndex {
 public:
  SeriesIndex();
  SeriesIndex(const SeriesIndex&) = delete;
  SeriesIndex& operator=(const SeriesIndex&) = delete;

  // Ids given out so far, expired ones included; the next id.
  size_t size() const { return keys_.size(); }

  // The id of the series whose encoded key is `encoded`, or nullopt.
  std::optional<SeriesId> Find(std::string_view encoded) const;

  // Gives out id size() to the series whose encoded key is `encoded` (a
  // valid EncodeSeriesKey of a normalized key, not in the index yet).
  SeriesId Add(std::string_view encoded);

  // Gives out id size() as an id already expired (loading an index).
  void AddExpired();

  // Frees the key of `id`: Find no longer knows it, its id stays taken.
  void Expire(SeriesId id);

  // Whether `id` was given out and has not expired.
  bool Live(SeriesId id) const {
    return id < keys_.size() && keys_[id] != nullptr;
  }

  // The encoded key of live `id` (see Live).
  std::string_view Encoded(SeriesId id) const;

  // The key of `id`; kNotFound for an id not live.
  absl::StatusOr<SeriesKey> Key(SeriesId id) const;

  // Whether the key of live `id` matches the label fields of `filter`
  // (metric, job, node; not its page), read from the encoded bytes.
  bool Matches(SeriesId id, const SeriesFilter& filter) const;

 private:
  // Hashes and compares ids by their encoded keys, and encoded keys
  // directly (heterogeneous lookup).
  struct Hash {
    using is_transparent = void;
    const SeriesIndex* index;
    size_t operator()(SeriesId id) const;
    size_t operator()(std::string_view encoded) const;
  };
  struct Eq {
    using is_transparent = void;
    const SeriesIndex* index;
    bool operator()(SeriesId a, SeriesId b) const { return a == b; }
    bool operator()(SeriesId a, std::string_view b) const;
    bool operator()(std::string_view a, SeriesId b) const { return (*this)(b, a); }
  };

  // Per id: a varint length, then the encoded key; null once expired.
  std::vector<std::unique_ptr<char[]>> keys_;
  absl::flat_hash_set<SeriesId, Hash, Eq> ids_;
};

}  // namespace vigil

#endif  // VIGIL_STORAGE_SERIES_INDEX_H_
