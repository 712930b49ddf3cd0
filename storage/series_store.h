// Time-series storage: the server's only view of persisted samples.
//
// Two implementations share one contract (tests/storage/contract_test.cc):
// an in-memory store for tests and a RocksDB store for production
// (storage/rocksdb_store.h). Samples are kept per series in an open block
// that is flushed as a compressed chunk; a frame log makes every appended
// sample durable before Append() returns (it survives kill -9).
#ifndef VIGIL_STORAGE_SERIES_STORE_H_
#define VIGIL_STORAGE_SERIES_STORE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/series_key.h"

namespace vigil {

// Writes one state value in parts (SeriesStore::NewStateWriter).
class StateWriter {
 public:
  virtual ~StateWriter() = default;
  // Appends `part` to the value. kUnavailable when it cannot be written
  // (the value then cannot be committed).
  virtual absl::Status Append(std::string_view part) = 0;
  // Makes what was appended the key's value, durably. Once only;
  // kUnavailable when it cannot be written (the old value stays).
  virtual absl::Status Commit() = 0;
};

// Dense, store-assigned id of a series; stable for the life of the data dir.
using SeriesId = uint32_t;

// One stored sample. `ts` is Unix seconds at millisecond resolution.
struct Sample {
  double ts;
  double value;
  friend bool operator==(const Sample&, const Sample&) = default;
};

// One downsampling bucket [start, start + step). NaN values are counted in
// `count` but excluded from min/max/sum (`nan_count` says how many).
struct Aggregate {
  double start;
  double min;
  double max;
  double sum;
  uint64_t count;      // samples in the bucket, NaN included
  uint64_t nan_count;  // NaN samples in the bucket
};

// Samples of one tick sharing one timestamp, as columns. Spans must outlive
// the Append() call only.
struct FrameColumns {
  double ts;
  std::span<const SeriesId> ids;
  std::span<const double> values;
};

// What Append() did with the samples it was given.
struct AppendResult {
  uint64_t accepted = 0;
  // ts equal to the series' last ts and the same value: a resend, dropped.
  uint64_t duplicates = 0;
  // ts before the series' last ts (or equal with another value): dropped.
  uint64_t out_of_order = 0;
};

// Filter for ListSeries: every non-empty field must match exactly.
struct SeriesFilter {
  std::string job;
  std::string node;
  std::string metric;
  // A page: only ids >= start, at most `limit` of them.
  SeriesId start = 0;
  size_t limit = SIZE_MAX;
};

struct SeriesInfo {
  SeriesId id;
  SeriesKey key;
};

// Retention periods, in seconds. Defaults follow the requirements.
struct RetentionOptions {
  double raw_seconds = 7 * 86400.0;        // raw chunks: 7 days
  double rollup_seconds = 183 * 86400.0;   // 1-minute rollups: ~6 months
  // Events are not expired by the store; a service that owns a stream
  // deletes what it no longer needs (SeriesStore::DeleteEventsBefore).
};

// Counters for /metrics. Monotonic unless noted.
struct StoreStats {
  uint64_t series = 0;            // gauge: live series
  // Series removed from the index because all their data expired.
  uint64_t series_expired = 0;
  uint64_t samples_appended = 0;
  uint64_t samples_dropped = 0;   // duplicates + out of order
  uint64_t chunks_flushed = 0;
  uint64_t bytes_on_disk = 0;     // gauge: SST + frame log bytes (0 in memory)
  uint64_t frame_log_bytes = 0;   // gauge
  // Bytes of a torn frame log tail cut off when the store was opened.
  uint64_t frame_log_torn_bytes = 0;
  // Samples of the frame log replayed at open whose series the index had
  // lost (they are synced apart; a power loss can keep one, not the other).
  uint64_t frame_log_unknown_samples = 0;
  // Failed writes to the frame log or the database (disk full, read-only
  // data dir, I/O errors), and returns to health after one.
  uint64_t write_errors = 0;
  uint64_t recoveries = 0;
  // Checkpoints written (open blocks saved, frame log cut).
  uint64_t checkpoints = 0;
  // Chunks that failed to decode: moved aside by retention (quarantined),
  // or skipped by a query that met them.
  uint64_t chunks_quarantined = 0;
  uint64_t corrupt_chunks_skipped = 0;
  // Gauges as of the store's last pass over its open blocks (the RocksDB
  // store: about once a minute; 0 in memory): series with an open block,
  // and the bytes their compressed samples hold in memory.
  uint64_t open_blocks = 0;
  uint64_t open_block_bytes = 0;
  // Open blocks closed because their series had stopped sending
  // (RocksDbStoreOptions::idle_block_seconds).
  uint64_t idle_blocks_closed = 0;
};

// One permanent, timestamped record in the events family (incidents,
// notifications, actions). `stream` groups related records, e.g.
// "incident/42". Payload is opaque to the store (JSON by convention).
struct Event {
  std::string stream;
  double ts = 0;
  uint64_t seq = 0;  // assigned by AppendEvent, unique and increasing
  std::string payload;
};

// Storage of series, samples, rollups and events. All methods are safe for
// concurrent use from several threads.
class SeriesStore {
 public:
  virtual ~SeriesStore() = default;

  // The id of `key` (which must be normalized, see NormalizeSeriesKey),
  // creating and persisting it on first use. kInvalidArgument if the key is
  // malformed; kResourceExhausted past the configured series limit.
  virtual absl::StatusOr<SeriesId> Resolve(const SeriesKey& key) = 0;

  // The id of `key` (normalized) if it exists; kNotFound otherwise, without
  // creating it. kInvalidArgument if the key is malformed.
  virtual absl::StatusOr<SeriesId> Find(const SeriesKey& key) const = 0;

  // The key of `id`, or kNotFound.
  virtual absl::StatusOr<SeriesKey> Key(SeriesId id) const = 0;

  // Series whose labels match `filter`, ordered by id. Never holds up
  // Append() while it scans.
  virtual std::vector<SeriesInfo> ListSeries(const SeriesFilter& filter) const = 0;

  // Appends frames atomically with respect to durability: when OK is
  // returned every accepted sample is in the frame log. Samples at or before
  // their series' last timestamp are dropped and counted in `result` (the
  // call still succeeds). kInvalidArgument, with nothing applied, if an id is
  // unknown, columns differ in length, or a ts is not finite;
  // kFailedPrecondition, with nothing applied, if an id has expired (see
  // EnforceRetention: resolve the key again for a new id).
  virtual absl::Status Append(std::span<const FrameColumns> frames,
                              AppendResult* result) = 0;

  // Raw samples of `id` with from <= ts < to, in time order; open blocks
  // included. kNotFound for an unknown id.
  virtual absl::StatusOr<std::vector<Sample>> Query(SeriesId id, double from,
                                                    double to) const = 0;

  // Samples of `id` in [from, to) downsampled into buckets of `step`
  // seconds aligned to multiples of `step`; empty buckets are omitted. Uses
  // raw data where retained and 1-minute rollups beyond it (step >= 60).
  // kInvalidArgument if step <= 0; kNotFound for an unknown id.
  virtual absl::StatusOr<std::vector<Aggregate>> QueryAggregate(
      SeriesId id, double from, double to, double step) const = 0;

  // Appends `event` (its seq is assigned) and returns the seq. Durable on
  // return. kInvalidArgument if the stream is empty.
  virtual absl::StatusOr<uint64_t> AppendEvent(const Event& event) = 0;

  // Events of `stream` with from <= ts < to, oldest first, at most `limit`.
  virtual std::vector<Event> ListEvents(std::string_view stream, double from,
                                        double to, size_t limit) const = 0;

  // Deletes, durably, the events of `stream` older than `ts` (to the
  // millisecond: one in the same millisecond as `ts` may stay); for a
  // service pruning its own stream. Deleting nothing is OK. kUnavailable
  // while the store refuses writes (see Health), kInvalidArgument for an
  // empty stream.
  virtual absl::Status DeleteEventsBefore(std::string_view stream,
                                          double ts) = 0;

  // Stores `value` under `key` in a small key-value space for service
  // state (e.g. escalation state), replacing what was there. Durable on
  // return. kInvalidArgument if the key is empty.
  virtual absl::Status PutState(std::string_view key, std::string_view value) = 0;

  // The value stored under `key`, or kNotFound.
  virtual absl::StatusOr<std::string> GetState(std::string_view key) const = 0;

  // A writer of a state value too large to build in memory at once (the
  // detection snapshot: hundreds of MiB while a 10,000-GPU cluster's
  // series learn). What is appended replaces the value of `key` on Commit
  // (durable then, and read back by GetState); a writer dropped without
  // Commit leaves the old value. The default collects the parts and calls
  // PutState; the RocksDB store writes them to a file as they come. The
  // writer must not outlive the store. kInvalidArgument if the key is
  // empty; kUnavailable if the store cannot write.
  virtual absl::StatusOr<std::unique_ptr<StateWriter>> NewStateWriter(
      std::string_view key);

  // Writes every open block as a chunk so the frame log can be truncated.
  virtual absl::Status Flush() = 0;

  // Drops raw chunks and rollups older than the retention periods, using the
  // store's clock. Also run periodically by the store itself (the RocksDB
  // store does it on its own maintenance thread, never in Append). A chunk
  // that cannot be decoded is quarantined and counted, never an error.
  // A series whose data has all expired (its last sample is past both
  // retentions) leaves the index: Key, Find, Query and ListSeries no longer
  // know its id, which is never given out again, and Resolve of its key
  // makes a new series.
  virtual absl::Status EnforceRetention() = 0;

  // OK while the store accepts appends. Otherwise kUnavailable saying why
  // (a full disk, a read-only data dir): Append() refuses with that status,
  // nothing accepted before is lost, and the store retries on its own and
  // turns healthy again, without a restart, once the cause is gone.
  virtual absl::Status Health() const = 0;

  virtual StoreStats Stats() const = 0;
};

// Options shared by both implementations.
struct StoreOptions {
  Clock* clock = nullptr;          // required; not owned
  RetentionOptions retention;
  uint32_t max_series = 10'000'000;
  // An open block is flushed when it holds this many samples...
  uint32_t block_samples = 720;
  // ...or spans this many seconds.
  double block_seconds = 2 * 3600.0;
  // The first block of a new series closes after a share of both limits
  // spread evenly over (0, 1] by series, so series created together do not
  // close their blocks together for ever after (a burst of writes and a
  // swing of memory every block_samples seconds). Off: every block runs
  // the full limits (tests that count blocks).
  bool stagger_first_blocks = true;
};

// A store that keeps everything in memory (same semantics, no durability).
std::unique_ptr<SeriesStore> NewMemoryStore(const StoreOptions& options);

}  // namespace vigil

#endif  // VIGIL_STORAGE_SERIES_STORE_H_
