// The RocksDB SeriesStore.
//
// Column families and key layout (integers big-endian; days, times and
// timestamps biased so that they sort as signed numbers):
//   raw     day(u32) id(u32) block_start_ms(u64) -> chunk (chunk_codec.h)
//   rollup  day(u32) id(u32)                      -> rollup chunk, that day
//   index   'i' id(u32)                           -> EncodeSeriesKey(key), or
//                                                    "" once expired
//   events  len(u16) stream ts_ms(u64) seq(u64)   -> ts(f64 bits) payload
//   open    id(u32)                 -> last sample of the last closed block
//           id(u32) piece_ms(u64)                 -> piece: the samples of
//                                                    an open block since
//                                                    its previous piece
//   default "log_start", "next_event_seq"         -> u64
//   quarantine family(u8) key                     -> a value that could not
//                                                    be decoded, kept aside
// `day` is that of the block start, so raw retention deletes whole days.
// Service state (PutState) is in the default family under "state/"; a
// state value written in parts (NewStateWriter: the detection snapshot) is
// a file of <data dir>/state/, which GetState reads first.
//
// Durability: Append() writes its frames to the frame log (frame_log.h)
// before touching memory. A block that fills, or whose series has sent
// nothing for idle_block_seconds (closed by the maintenance thread), is
// written to `raw` in one batch with its cursor in `open` and the deletion
// of its pieces. A checkpoint (log over frame_log_checkpoint_bytes,
// Flush(), close) starts a new log segment, then writes the unwritten tail
// of every open block as a piece, then "log_start" = the new segment, then
// deletes older segments (Flush and close write pieces and log start in one
// batch; the maintenance thread writes the pieces slice by slice, pacing
// itself, and the log start last, and once a slice is written its blocks
// free the samples its pieces hold: reading such a block back takes them
// from there, ReadOpenBlock). Opening loads the pieces as open blocks
// and replays segments from log_start; samples already in closed blocks
// are dropped by the out-of-order policy because the cursors are restored
// first.
//
// Write errors (a full disk, a read-only data dir) never lose what was
// accepted. A frame log write that fails refuses that Append (nothing is
// applied). A database write that fails after the frame log took the
// samples keeps the batch in memory as owed: that Append still succeeds,
// later ones are refused with kUnavailable, and the maintenance thread
// calls DB::Resume(), writes what is owed and checkpoints once the cause
// is gone. Checkpoints and retention run on that thread too, never in
// Append(). Until then, samples of blocks closed into an owed batch are in
// the frame log only and not visible to queries.
//
// Rollups are computed when raw data leaves retention: the expired day is
// read back, folded into 1-minute rollups (merged with any already stored)
// and deleted in one batch per group of series, so every minute is counted
// exactly once, either in `raw` or in `rollup`.
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <rocksdb/env.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "storage/chunk_codec.h"
#include "storage/compressed_samples.h"
#include "storage/frame_log.h"
#include "storage/rocksdb_store.h"
#include "storage/series_index.h"
#include "storage/store_util.h"

namespace vigil {
namespace {

// Clock seconds between retention passes of the maintenance thread.
constexpr double kRetentionInterval = 600;
// Clock seconds between the maintenance thread's passes over the open
// blocks (idle ones closed, the open-block gauges counted) at most; a third
// of idle_block_seconds when that is shorter.
constexpr double kOpenBlockScanInterval = 60;
constexpr int64_t kDayMs = 86'400'000;
// Series per batch when turning an expired day into rollups.
constexpr size_t kRetentionBatchSeries = 1024;
// Longest block span: a piece whose samples span more is corrupt.
constexpr double kMaxBlockSeconds = 40 * 86400.0;
// A checkpoint encodes the pieces of this many dirty series at a time; one
// in the background holds the store's lock for one slice.
constexpr size_t kCheckpointSlice = 2048;
// A checkpoint that holds the lock throughout (at start and stop) writes
// its batch once it holds this much, rather than all pieces in one batch.
constexpr size_t kCheckpointBatchBytes = 8 << 20;

enum Cf { kMeta = 0, kRaw, kRollup, kIndex, kEvents, kOpen, kQuarantine, kNumCf };
constexpr const char* kCfNames[kNumCf] = {"default", "raw",  "rollup",    "index",
                                          "events",  "open", "quarantine"};

constexpr char kLogStartKey[] = "log_start";
constexpr char kNextSeqKey[] = "next_event_seq";
// Service state (PutState) lives in the meta family under this prefix.
constexpr char kStatePrefix[] = "state/";

// The file of a state value written in parts: <data dir>/state/<key>, the
// key's bytes other than letters, digits, '.', '-' and '_' as %XX (so no
// two keys share a file), and a key "." or ".." all as %2E.
std::string StateFilePath(const std::string& data_dir, std::string_view key) {
  const bool dots = key == "." || key == "..";
  std::string name;
  for (char c : key) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!dots && (std::isalnum(u) || c == '.' || c == '-' || c == '_')) {
      name.push_back(c);
    } else {
      absl::StrAppend(&name, "%", absl::Hex(u, absl::kZeroPad2));
    }
  }
  return absl::StrCat(data_dir, "/state/", name);
}

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string message = absl::StrCat(std::string(what), ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  return absl::InternalError(message);
}

// A failed write: kUnavailable, since the store retries and recovers once
// the cause (a full disk, a read-only mount) is gone.
absl::Status WriteError(std::string_view what, std::string_view cause) {
  return absl::UnavailableError(absl::StrCat(
      "storage refuses writes: ", std::string(what), ": ", std::string(cause)));
}
absl::Status FromRocksWrite(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsCorruption()) return FromRocks(s, what);
  return WriteError(what, s.ToString());
}

// RocksDB's messages of WARN and above, on stderr. Its default logger
// writes a LOG file in the data dir, and once a write to that file has
// failed (a read-only or full file system) the next message aborts the
// process in RocksDB 7.8 (an assertion in its file writer, left on in
// Debian's build) - the very moment the store tries to recover.
class StderrLogger : public rocksdb::Logger {
 public:
  StderrLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof line, format, ap);
    std::fprintf(stderr, "rocksdb: %s\n", line);
  }
};

// Key of a quarantined value of family `family` under `key`.
std::string QuarantineKey(Cf family, const rocksdb::Slice& key) {
  std::string k(1, static_cast<char>(family));
  k.append(key.data(), key.size());
  return k;
}

void PutBE(std::string* out, uint64_t v, int bytes) {
  for (int s = 8 * (bytes - 1); s >= 0; s -= 8)
    out->push_back(static_cast<char>(v >> s));
}
uint64_t GetBE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t Biased(int64_t v) {
  return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
}
int64_t Unbiased(uint64_t v) {
  return static_cast<int64_t>(v ^ (uint64_t{1} << 63));
}
uint32_t BiasedDay(int64_t day) {
  return static_cast<uint32_t>(static_cast<int32_t>(day)) ^ (1u << 31);
}
int64_t UnbiasedDay(uint32_t v) { return static_cast<int32_t>(v ^ (1u << 31)); }

int64_t DayOf(int64_t ms) {
  int64_t d = ms / kDayMs;
  if (ms % kDayMs < 0) --d;
  return d;
}

// The day of a raw or rollup key.
int64_t KeyDay(const rocksdb::Slice& key) {
  return UnbiasedDay(static_cast<uint32_t>(GetBE(key.data(), 4)));
}

std::string RawKey(int64_t day, SeriesId id, int64_t start_ms) {
  std::string k;
  k.reserve(16);
  PutBE(&k, BiasedDay(day), 4);
  PutBE(&k, id, 4);
  PutBE(&k, Biased(start_ms), 8);
  return k;
}
std::string RollupKey(int64_t day, SeriesId id) {
  std::string k;
  PutBE(&k, BiasedDay(day), 4);
  PutBE(&k, id, 4);
  return k;
}
std::string IndexKey(SeriesId id) {
  std::string k = "i";
  PutBE(&k, id, 4);
  return k;
}
std::string CursorKey(SeriesId id) {
  std::string k;
  PutBE(&k, id, 4);
  return k;
}
std::string PieceKey(SeriesId id, int64_t start_ms) {
  std::string k = CursorKey(id);
  PutBE(&k, Biased(start_ms), 8);
  return k;
}
std::string EventPrefix(std::string_view stream) {
  std::string k;
  PutBE(&k, stream.size(), 2);
  k.append(stream);
  return k;
}
int64_t EventMillis(double ts) {
  return static_cast<int64_t>(std::floor(ts * 1000.0));
}
std::string U64Value(uint64_t v) {
  std::string s;
  PutBE(&s, v, 8);
  return s;
}

// `frames` without the samples of ids >= `series` (the index does not know
// them), copied into the scratch vectors; `skipped` counts what was left
// out. `frames` itself when every id is known or the columns are malformed
// (for ValidateFrames to report).
std::span<const FrameColumns> KnownSeriesOnly(
    std::span<const FrameColumns> frames, size_t series,
    std::vector<FrameColumns>* out, std::vector<std::vector<SeriesId>>* ids,
    std::vector<std::vector<double>>* values, uint64_t* skipped) {
  bool all_known = true;
  for (const FrameColumns& f : frames) {
    if (f.ids.size() != f.values.size()) return frames;
    for (SeriesId id : f.ids) all_known = all_known && id < series;
  }
  if (all_known) return frames;
  out->clear();
  ids->assign(frames.size(), {});
  values->assign(frames.size(), {});
  for (size_t i = 0; i < frames.size(); ++i) {
    for (size_t j = 0; j < frames[i].ids.size(); ++j) {
      if (frames[i].ids[j] >= series) {
        ++*skipped;
        continue;
      }
      (*ids)[i].push_back(frames[i].ids[j]);
      (*values)[i].push_back(frames[i].values[j]);
    }
    out->push_back(FrameColumns{frames[i].ts, (*ids)[i], (*values)[i]});
  }
  return *out;
}

// One series' in-memory state: its open block and its cursor.
struct Block {
  int64_t start_ms = 0;           // of the first sample of `samples`
  CompressedSamples samples;      // the open block
  // Where the last piece ended: samples [0, checkpointed.count) are in
  // pieces.
  CompressedSamples::Mark checkpointed;
  // Pieces of the block in the open family. Piece k is keyed by the time
  // start_ms + k ms (PieceKey): its first sample is at that time or later,
  // since a piece holds at least one sample and a series' times increase,
  // so keys stay below the next block's start, and a count is all the
  // block keeps of them (a list of keys cost ~80 bytes a series at 1,250
  // nodes: bench/RESULTS.md, "What a long-running server holds").
  uint32_t pieces = 0;
  int64_t PieceKeyMs(uint32_t piece) const { return start_ms + piece; }
  // Whether piece key time `key_ms` is one of this block's pieces (not of
  // a block closed before it).
  bool HasPiece(int64_t key_ms) const {
    return key_ms >= start_ms && key_ms - start_ms < pieces;
  }
  // When its last sample was accepted, in the store's clock seconds since
  // the store opened (RocksDbStoreOptions::idle_block_seconds).
  uint32_t touched_s = 0;
  // Whether the series has a last sample: `samples` keeps it (its time
  // and bits) also once the block is closed, so the cursor costs no more
  // than this flag (152 -> 128 bytes a series).
  bool has_last = false;
  bool expired = false;           // left the index (all data expired)
  // False until a block of the series closed (or one was loaded): the
  // first block of a new series is cut short (FirstBlockShare).
  bool phased = false;
  // The last sample accepted, if any (ClassifySample).
  SeriesCursor cursor() const {
    return {.has_last = has_last, .last_ms = samples.last_ts_ms(), .last_bits = samples.last_bits()};
  }
};

// How far ahead of the sample it appends ApplyFrames prefetches blocks and
// the tails of their samples: far enough for a load from memory (~100 ns)
// to land, near enough for the lines to stay in cache.
constexpr size_t kPrefetchBlocksAhead = 16;
constexpr size_t kPrefetchTailsAhead = 8;

// The share, in 1/1024ths of block_samples and block_seconds, of the first
// block of series `id`, spread evenly over (0, 1] by a hash of the id.
// Series created together (a job's start: thousands at once) would
// otherwise close their blocks in the same second, every block_samples
// seconds, for ever: a burst of chunk encoding and RocksDB writes, and
// open-block memory swinging between empty and full. Cut short once, each
// series keeps its own phase (later blocks run full length, and reloaded
// ones keep theirs), so closes spread evenly and open blocks stay half
// full on average (docs/ARCHITECTURE.md, "Storage layout and durability").
uint32_t FirstBlockShare(SeriesId id) {
  uint64_t h = (uint64_t{id} + 1) * 0x9e3779b97f4a7c15ULL;
  h ^= h >> 29;
  return static_cast<uint32_t>(h % 1024) + 1;
}

// Decodes `piece` of an open block into `ts` and `values` (replacing what
// they held), from `seq`, a sequence holding exactly the samples of the
// block's pieces before it (`previous` the last of them). A piece is a
// record continuing the pieces before it; one written before records (a
// chunk) holds its samples alone. False if it does not decode.
bool DecodePiece(const CompressedSamples& seq, std::string_view piece,
                 std::string_view previous, std::vector<int64_t>* ts,
                 std::vector<double>* values) {
  ts->clear();
  values->clear();
  return CompressedSamples::PeekRecord(piece).has_value()
             ? seq.DecodeRecord(piece, previous, ts, values)
             : DecodeChunk(piece, ts, values).ok();
}

class RocksDbStore : public SeriesStore {
 public:
  explicit RocksDbStore(const RocksDbStoreOptions& options)
      : options_(options),
        block_ms_(TsToMillis(options.store.block_seconds)),
        opened_at_(options.store.clock->Now()),
        next_retention_(opened_at_ + kRetentionInterval),
        next_block_scan_(opened_at_ + BlockScanInterval()) {}

  ~RocksDbStore() override {
    StopMaintenance();
    {
      absl::MutexLock l(&mu_);
      if (owed_.empty() && log_ != nullptr) (void)Checkpoint();
    }
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      if (db_ != nullptr) (void)db_->DestroyColumnFamilyHandle(h);
    }
    if (db_ != nullptr) (void)db_->Close();
  }

  // Opens the database, reloads series, open blocks and the frame log.
  absl::Status Init() ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<SeriesId> Resolve(const SeriesKey& key) override;
  absl::StatusOr<SeriesId> Find(const SeriesKey& key) const override;
  absl::StatusOr<SeriesKey> Key(SeriesId id) const override;
  std::vector<SeriesInfo> ListSeries(const SeriesFilter& filter) const override;
  absl::Status Append(std::span<const FrameColumns> frames,
                      AppendResult* result) override;
  absl::StatusOr<std::vector<Sample>> Query(SeriesId id, double from,
                                            double to) const override;
  absl::StatusOr<std::vector<Aggregate>> QueryAggregate(
      SeriesId id, double from, double to, double step) const override;
  absl::StatusOr<uint64_t> AppendEvent(const Event& event) override;
  absl::Status PutState(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> GetState(std::string_view key) const override;
  absl::StatusOr<std::unique_ptr<StateWriter>> NewStateWriter(
      std::string_view key) override;
  absl::Status DeleteEventsBefore(std::string_view stream, double ts) override;
  std::vector<Event> ListEvents(std::string_view stream, double from,
                                double to, size_t limit) const override;
  absl::Status Flush() override;
  absl::Status EnforceRetention() override;
  absl::Status Health() const override;
  StoreStats Stats() const override;

  // Starts the maintenance thread (after Init succeeded).
  void StartMaintenance();

 private:
  // The maintenance thread: checkpoints, retention and recovery.
  void MaintenanceLoop() ABSL_LOCKS_EXCLUDED(mu_, wake_mu_);
  // Wakes the maintenance thread now.
  void Kick() ABSL_LOCKS_EXCLUDED(wake_mu_);
  void StopMaintenance() ABSL_LOCKS_EXCLUDED(wake_mu_);
  // After an error: resumes the database, writes what is owed and
  // checkpoints into a fresh frame log segment; healthy again on success.
  void TryRecover() ABSL_LOCKS_EXCLUDED(mu_);
  // Notes a failed write outside mu_ (events, state, index, maintenance):
  // health turns degraded until the next successful recovery pass.
  void NoteError(const absl::Status& s) ABSL_LOCKS_EXCLUDED(health_mu_);
  // Writes `batch` unless an earlier write failed and recovery has not
  // succeeded since: then the database is left alone (only DB::Resume()
  // may touch it; RocksDB must not reuse a file writer that failed) and
  // that failure is returned. A failure marks the database failed.
  absl::Status DbWrite(const rocksdb::WriteOptions& options,
                       rocksdb::WriteBatch* batch, std::string_view what)
      ABSL_LOCKS_EXCLUDED(health_mu_);
  // Applies validated frames to the open blocks; closed blocks go to `batch`.
  // `now_s` is StoreSeconds() of the append.
  void ApplyFrames(std::span<const FrameColumns> frames, uint32_t now_s,
                   AppendResult* result, rocksdb::WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `now` (the store's clock) in whole seconds since the store opened.
  uint32_t StoreSeconds(double now) const {
    return static_cast<uint32_t>(std::clamp(
        now - opened_at_, 0.0,
        static_cast<double>(std::numeric_limits<uint32_t>::max())));
  }
  double BlockScanInterval() const {
    return options_.idle_block_seconds > 0
               ? std::min(kOpenBlockScanInterval, options_.idle_block_seconds / 3)
               : kOpenBlockScanInterval;
  }
  // One pass over the open blocks, in slices that release mu_ in between:
  // closes those idle for idle_block_seconds and counts the others for
  // Stats(). An error is the failed write of closed blocks (owed, as for
  // Append).
  absl::Status ScanOpenBlocks() ABSL_LOCKS_EXCLUDED(mu_);
  // Adds `block` of `id` to `batch` as a raw chunk and empties it. False
  // (the block left as it is, to be closed by a later call) if its samples
  // cannot be read back (ReadOpenBlock).
  bool CloseBlock(SeriesId id, Block* block, rocksdb::WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decodes the open block `b` of `id` whole into `ts` and `values`
  // (replacing what they held): the samples it no longer holds in memory
  // (DropWritten) from its first pieces in the open family, then the rest.
  // kDataLoss if a piece is missing or does not decode, kInternal if
  // RocksDB fails.
  absl::Status ReadOpenBlock(SeriesId id, const Block& b,
                             std::vector<int64_t>* ts,
                             std::vector<double>* values) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `batch`. On failure the batch is kept as owed and the store
  // refuses appends until TryRecover() has written it, since memory then
  // holds less than the frame log promises.
  absl::Status WriteLocked(rocksdb::WriteBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A checkpoint in progress: the new segment, the series to write, what
  // was written.
  struct CheckpointWork {
    uint64_t log_number = 0;
    std::vector<SeriesId> ids;  // the dirty list it took; may repeat ids
    rocksdb::WriteBatch batch;  // what is encoded and not written yet
    // A piece encoded: its series, its key time, and where the series'
    // pieces ended before it (restored if the piece is not written).
    struct Piece {
      SeriesId id;
      int64_t start;
      CompressedSamples::Mark checkpointed_before;
      CompressedSamples::Mark checkpointed_after;
    };
    std::vector<Piece> written;
    size_t durable = 0;  // written[0, durable) are in the database
  };
  // Starts a new log segment and takes the dirty list.
  absl::StatusOr<CheckpointWork> BeginCheckpoint()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Encodes the unwritten tails of work.ids[begin, end) into the batch.
  void EncodePieces(CheckpointWork& work, size_t begin, size_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the pieces encoded so far (without the new log start).
  absl::Status WritePieces(CheckpointWork& work);
  // Lets the blocks of the pieces work.written[begin, work.durable), now
  // in the database, free the samples those pieces hold (DropBefore):
  // reading the block back takes them from there (ReadOpenBlock). At
  // 1,250 nodes a checkpoint comes every ~76 s, so an open block holds
  // about that much in memory instead of up to block_samples
  // (bench/RESULTS.md, "What a long-running server holds").
  void DropWritten(const CheckpointWork& work, size_t begin)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the batch with the new log start.
  absl::Status WriteCheckpoint(CheckpointWork& work);
  // Rolls back after a failed write, or deletes the pieces of blocks that
  // closed meanwhile and the old segments.
  absl::Status FinishCheckpoint(CheckpointWork& work, absl::Status written)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a new log segment and writes all open-block tails (see top),
  // all under mu_ (after any sliced checkpoint in flight).
  absl::Status Checkpoint() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The maintenance thread's checkpoint, when the log is due: encodes the
  // tails in slices of series, releasing mu_ in between, and writes them
  // unlocked, so appends wait for one slice, not for the whole store.
  absl::Status CheckpointInSlices() ABSL_LOCKS_EXCLUDED(mu_);
  void Hook(std::string_view step) const {
    if (options_.checkpoint_hook) options_.checkpoint_hook(step);
  }
  absl::Status LoadIndex() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadOpenBlocks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReplayLog() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> ReadU64(const std::string& key, uint64_t missing);
  // Calls `fn(ts_ms, values)` for each raw chunk of `id` that may hold
  // samples in [from_ms, to_ms) and starts before `open_start`.
  absl::Status ScanRaw(
      const rocksdb::ReadOptions& read, SeriesId id, int64_t from_ms,
      int64_t to_ms, int64_t open_start,
      const std::function<void(const std::vector<int64_t>&,
                               const std::vector<double>&)>& fn) const;
  // Copies the open block of `id` restricted to [from_ms, to_ms) and
  // returns its start (INT64_MAX if empty). kNotFound for unknown ids.
  absl::StatusOr<int64_t> SnapshotOpenBlock(SeriesId id, int64_t from_ms,
                                            int64_t to_ms,
                                            std::vector<int64_t>* ts,
                                            std::vector<double>* values) const;
  // Removes from the index the series whose last sample is in `last_day`
  // or before and that hold no open block (all their data expired).
  absl::Status ExpireSeries(int64_t last_day) ABSL_LOCKS_EXCLUDED(mu_);
  // Turns raw day `day` into rollups; false if a late write forced a retry.
  absl::StatusOr<bool> RollUpDay(int64_t day);
  rocksdb::ColumnFamilyHandle* cf(Cf c) const { return handles_[c]; }
  rocksdb::Env* env() const {
    return options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  }

  const RocksDbStoreOptions options_;
  const int64_t block_ms_;
  const double opened_at_;  // the store's clock when it opened
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;

  // The series index; Append never takes it, so listing series does not
  // hold up ingest. Acquired after mu_ when both are needed.
  mutable absl::Mutex index_mu_ ABSL_ACQUIRED_AFTER(mu_);
  SeriesIndex index_ ABSL_GUARDED_BY(index_mu_);
  uint64_t expired_ ABSL_GUARDED_BY(index_mu_) = 0;

  mutable absl::Mutex mu_;
  // Batches the database refused, oldest first; appends are refused with
  // `refusal_` while any is owed.
  std::vector<rocksdb::WriteBatch> owed_ ABSL_GUARDED_BY(mu_);
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
  // The last frame log append failed (cleared by the next that succeeds, or
  // by recovery when the segment broke).
  absl::Status log_error_ ABSL_GUARDED_BY(mu_);
  uint64_t checkpoints_ ABSL_GUARDED_BY(mu_) = 0;
  // A sliced checkpoint runs (CheckpointInSlices); others wait for it.
  bool checkpointing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Block> blocks_ ABSL_GUARDED_BY(mu_);  // by id, like index_
  uint64_t expired_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SeriesId> dirty_ ABSL_GUARDED_BY(mu_);  // may repeat ids
  std::unique_ptr<FrameLogWriter> log_ ABSL_GUARDED_BY(mu_);
  uint64_t log_number_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t chunks_flushed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t torn_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unknown_replayed_ ABSL_GUARDED_BY(mu_) = 0;
  double next_retention_ ABSL_GUARDED_BY(mu_);
  double next_block_scan_ ABSL_GUARDED_BY(mu_);
  // As of the last ScanOpenBlocks().
  uint64_t open_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t open_block_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t idle_blocks_closed_ ABSL_GUARDED_BY(mu_) = 0;
  // Raw days up to this one are being rolled up; closing a block into one
  // of them bumps late_writes_ so the roll-up retries.
  int64_t retention_day_ ABSL_GUARDED_BY(mu_) =
      std::numeric_limits<int64_t>::min();
  uint64_t late_writes_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex events_mu_ ABSL_ACQUIRED_AFTER(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(events_mu_) = 1;

  absl::Mutex retention_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  // Health outside the append path; a leaf lock.
  mutable absl::Mutex health_mu_;
  absl::Status other_error_ ABSL_GUARDED_BY(health_mu_);
  // A database write failed; recovery has not succeeded since.
  std::atomic<bool> db_failed_{false};
  absl::Status db_error_ ABSL_GUARDED_BY(health_mu_);
  // The database write error that started the current outage: failed
  // recoveries report it first (a Resume() answering "Resource busy"
  // tells an operator less than "No space left on device").
  absl::Status outage_cause_ ABSL_GUARDED_BY(health_mu_);
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> recoveries_{0};
  std::atomic<uint64_t> quarantined_{0};
  mutable std::atomic<uint64_t> corrupt_skipped_{0};

  absl::Mutex wake_mu_;
  bool kicked_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread maintenance_;
};

absl::Status RocksDbStore::Init() {
  std::error_code ec;
  std::filesystem::create_directories(options_.data_dir + "/db", ec);
  if (ec)
    return absl::InternalError(absl::StrCat(
        "cannot create data dir ", options_.data_dir, ": ", ec.message()));

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.max_total_wal_size = 64 << 20;
  // One budget for the memtables of all column families: RocksDB's
  // default (64 MiB a family, two each) let them hold ~100 MiB at 1,250
  // streams (bench/RESULTS.md).
  db_options.db_write_buffer_size = options_.memtable_budget_bytes;
  if (options_.env != nullptr) db_options.env = options_.env;
  db_options.info_log = std::make_shared<StderrLogger>();
  const auto supported = rocksdb::GetSupportedCompressions();
  const bool has_zstd = std::find(supported.begin(), supported.end(),
                                  rocksdb::kZSTD) != supported.end();
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (int c = 0; c < kNumCf; ++c) {
    rocksdb::ColumnFamilyOptions cf_options;
    // Chunks are zstd already; small records compress well.
    const bool chunks = c == kRaw || c == kRollup || c == kOpen;
    cf_options.compression = chunks || !has_zstd ? rocksdb::kNoCompression
                                                 : rocksdb::kZSTD;
    descriptors.emplace_back(kCfNames[c], cf_options);
  }
  rocksdb::DB* db = nullptr;
  VIGIL_RETURN_IF_ERROR(FromRocks(
      rocksdb::DB::Open(db_options, options_.data_dir + "/db", descriptors,
                        &handles_, &db),
      "cannot open RocksDB in " + options_.data_dir));
  db_.reset(db);

  absl::MutexLock l(&mu_);
  VIGIL_RETURN_IF_ERROR(LoadIndex());
  VIGIL_RETURN_IF_ERROR(LoadOpenBlocks());
  {
    absl::MutexLock e(&events_mu_);
    VIGIL_ASSIGN_OR_RETURN(next_seq_, ReadU64(kNextSeqKey, 1));
  }
  return ReplayLog();
}

absl::StatusOr<uint64_t> RocksDbStore::ReadU64(const std::string& key,
                                               uint64_t missing) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(kMeta), key, &value);
  if (s.IsNotFound()) return missing;
  VIGIL_RETURN_IF_ERROR(FromRocks(s, "cannot read " + key));
  if (value.size() != 8)
    return absl::DataLossError(absl::StrCat("corrupt metadata ", key));
  return GetBE(value.data(), 8);
}

absl::Status RocksDbStore::LoadIndex() {
  absl::MutexLock index(&index_mu_);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cf(kIndex)));
  for (it->Seek("i"); it->Valid() && it->key().starts_with("i"); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 5 || GetBE(k.data() + 1, 4) != index_.size())
      return absl::DataLossError(
          absl::StrCat("series index: missing or bad id near ", index_.size()));
    if (it->value().empty()) {  // expired
      index_.AddExpired();
      blocks_.emplace_back().expired = true;
      ++expired_;
      ++expired_blocks_;
      continue;
    }
    // Decoded once to check it; kept encoded.
    VIGIL_RETURN_IF_ERROR(
        DecodeSeriesKey(it->value().ToStringView()).status());
    index_.Add(it->value().ToStringView());
    blocks_.emplace_back();
  }
  return FromRocks(it->status(), "cannot read series index");
}

absl::Status RocksDbStore::LoadOpenBlocks() {
  // One pass over the family: its blocks would only push out of RocksDB's
  // cache what reads need later.
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, cf(kOpen)));
  std::vector<int64_t> ts;
  std::vector<double> values;
  rocksdb::WriteBatch quarantine;
  // The last piece decoded into a block, which the next piece of that block
  // continues (keys sort by series, then piece time).
  std::string previous_piece;
  SeriesId previous_id = 0;
  // The keys of the pieces loaded into the block of previous_id, and
  // whether they must be written again: pieces of an older format (a
  // chunk, a record that carries no state to go on from), or keyed as
  // before pieces were counted (by their last sample's time). Such a block
  // becomes one piece of the current format under its first key, so that
  // reading it back (ReadOpenBlock) needs only its count of pieces.
  std::vector<std::string> loaded_keys;
  bool rewrite = false;
  auto finish_block = [&] {
    Block& b = blocks_[previous_id];
    if (rewrite && !b.samples.empty()) {
      for (const std::string& key : loaded_keys) (void)quarantine.Delete(cf(kOpen), key);
      std::string piece;
      b.samples.AppendRecordSince({}, &piece);
      (void)quarantine.Put(cf(kOpen), PieceKey(previous_id, b.start_ms), piece);
      b.pieces = 1;
    }
    loaded_keys.clear();
    rewrite = false;
  };
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 4 && k.size() != 12)
      return absl::DataLossError("open blocks: bad key");
    const SeriesId id = static_cast<SeriesId>(GetBE(k.data(), 4));
    if (id >= blocks_.size())
      return absl::DataLossError(
          absl::StrCat("open blocks: unknown series id ", id));
    Block& b = blocks_[id];
    if (k.size() == 4) {  // cursor of the last closed block
      const rocksdb::Slice v = it->value();
      if (v.size() != 16) return absl::DataLossError("open blocks: bad cursor");
      b.samples.SetLast(Unbiased(GetBE(v.data(), 8)), GetBE(v.data() + 8, 8));
      b.has_last = true;
      b.phased = true;
      continue;
    }
    const std::string_view piece = it->value().ToStringView();
    const std::optional<CompressedSamples::RecordInfo> record =
        CompressedSamples::PeekRecord(piece);
    if (record.has_value() && b.has_last &&
        record->last_ts_ms <= b.samples.last_ts_ms() && b.samples.empty()) {
      // The piece of a block that closed while a checkpoint wrote it (see
      // below): what it continues was deleted with the block.
      (void)quarantine.Delete(cf(kOpen), k);
      continue;
    }
    const std::string_view previous =
        previous_id == id && !b.samples.empty() ? std::string_view(previous_piece)
                                                : std::string_view();
    const bool decoded = DecodePiece(b.samples, piece, previous, &ts, &values);
    const int64_t block_start = b.samples.empty() && !ts.empty() ? ts[0] : b.start_ms;
    if (!decoded || std::any_of(ts.begin(), ts.end(), [&](int64_t t) {
          return t < block_start || t - block_start > TsToMillis(kMaxBlockSeconds);
        })) {
      // Its samples are lost; the rest of the store stays usable.
      (void)quarantine.Put(cf(kQuarantine), QuarantineKey(kOpen, k), it->value());
      (void)quarantine.Delete(cf(kOpen), k);
      ++quarantined_;
      continue;
    }
    if (ts.empty() || (b.has_last && ts.back() <= b.samples.last_ts_ms())) {
      // Holds nothing, or is a piece of a block that closed while a
      // checkpoint wrote it (a crash before that checkpoint deleted it):
      // the chunk has it all.
      (void)quarantine.Delete(cf(kOpen), k);
      continue;
    }
    if (id != previous_id && !loaded_keys.empty()) finish_block();
    if (b.samples.empty()) b.start_ms = ts[0];
    previous_piece.assign(piece);
    previous_id = id;
    b.phased = true;
    for (size_t i = 0; i < ts.size(); ++i) b.samples.Append(ts[i], values[i]);
    b.has_last = true;
    CompressedSamples probe;
    if (Unbiased(GetBE(k.data() + 4, 8)) != b.PieceKeyMs(b.pieces) ||
        !probe.ContinueFrom(piece, static_cast<uint32_t>(b.samples.size())))
      rewrite = true;
    loaded_keys.push_back(k.ToString());
    ++b.pieces;
    b.checkpointed = b.samples.mark();
  }
  VIGIL_RETURN_IF_ERROR(FromRocks(it->status(), "cannot read open blocks"));
  if (!loaded_keys.empty()) finish_block();
  // What was loaded is in pieces: memory lets go of it (DropWritten).
  for (Block& b : blocks_) b.samples.DropBefore(b.checkpointed);
  if (quarantine.Count() == 0) return absl::OkStatus();
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &quarantine),
                   "cannot quarantine open blocks");
}

absl::Status RocksDbStore::ReplayLog() {
  VIGIL_ASSIGN_OR_RETURN(const uint64_t log_start, ReadU64(kLogStartKey, 0));
  VIGIL_ASSIGN_OR_RETURN(std::vector<uint64_t> segments,
                         ListFrameLogSegments(options_.data_dir));
  log_number_ = log_start == 0 ? 0 : log_start - 1;
  std::vector<uint64_t> replay;
  for (uint64_t n : segments) {
    if (n < log_start) {
      std::filesystem::remove(FrameLogSegmentPath(options_.data_dir, n));
    } else {
      replay.push_back(n);
      log_number_ = std::max(log_number_, n);
    }
  }
  std::vector<FrameColumns> kept_frames;
  std::vector<std::vector<SeriesId>> kept_ids;
  std::vector<std::vector<double>> kept_values;
  for (size_t i = 0; i < replay.size(); ++i) {
    const std::string path = FrameLogSegmentPath(options_.data_dir, replay[i]);
    const bool last = i + 1 == replay.size();
    absl::Status apply_status;
    VIGIL_ASSIGN_OR_RETURN(
        FrameLogReplay r,
        ReplayFrameLogSegment(
            path, last,
            [&](std::span<const FrameColumns> frames)
                ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
                  // Ids the index lost (it and the log are synced apart,
                  // so a power loss can keep a record whose new series
                  // did not survive) are skipped and counted.
                  const std::span<const FrameColumns> known =
                      KnownSeriesOnly(frames, blocks_.size(), &kept_frames,
                                      &kept_ids, &kept_values,
                                      &unknown_replayed_);
                  if (auto s = ValidateFrames(known, blocks_.size()); !s.ok())
                    return absl::DataLossError(
                        absl::StrCat("frame log ", path, ": ", s.message()));
                  AppendResult ignored;
                  rocksdb::WriteBatch batch;
                  ApplyFrames(known, StoreSeconds(options_.store.clock->Now()),
                              &ignored, &batch);
                  return WriteLocked(&batch);
                }));
    if (r.torn_bytes > 0 && !last)
      return absl::DataLossError(absl::StrCat(
          "frame log ", path, " is corrupt at byte ", r.valid_bytes,
          " and is not the last segment"));
    torn_bytes_ += r.torn_bytes;
  }
  // Start from a fresh segment with everything replayed made durable.
  return Checkpoint();
}

void RocksDbStore::ApplyFrames(std::span<const FrameColumns> frames,
                               uint32_t now_s, AppendResult* result,
                               rocksdb::WriteBatch* batch) {
  const uint32_t block_samples = std::max<uint32_t>(1, options_.store.block_samples);
  for (const FrameColumns& frame : frames) {
    const int64_t ts_ms = TsToMillis(frame.ts);
    const size_t n = frame.ids.size();
    for (size_t i = 0; i < n; ++i) {
      // A second of a big cluster touches each series once: its block and
      // the tail of its samples are out of cache. Ask for those of the
      // samples a few places ahead while this one is written (the block
      // first, as the tail's address is in it).
      if (i + kPrefetchBlocksAhead < n) {
        const char* ahead =
            reinterpret_cast<const char*>(&blocks_[frame.ids[i + kPrefetchBlocksAhead]]);
        __builtin_prefetch(ahead, 1);
        __builtin_prefetch(ahead + sizeof(Block) - 1, 1);
      }
      if (i + kPrefetchTailsAhead < n)
        blocks_[frame.ids[i + kPrefetchTailsAhead]].samples.PrefetchTail();
      const SeriesId id = frame.ids[i];
      Block& b = blocks_[id];
      SeriesCursor cursor = b.cursor();
      const SampleVerdict v = ClassifySample(&cursor, ts_ms, frame.values[i]);
      CountVerdict(v, result);
      if (v != SampleVerdict::kAccept) continue;
      const uint32_t share =
          b.phased || !options_.store.stagger_first_blocks ? 1024 : FirstBlockShare(id);
      if (!b.samples.empty() && ts_ms - b.start_ms >= block_ms_ * share / 1024)
        CloseBlock(id, &b, batch);
      if (b.samples.empty()) b.start_ms = ts_ms;
      if (b.samples.size() == b.checkpointed.count) dirty_.push_back(id);
      b.samples.Append(ts_ms, frame.values[i]);
      b.has_last = true;
      b.touched_s = now_s;
      if (b.samples.size() >= std::max<uint64_t>(1, uint64_t{block_samples} * share / 1024))
        CloseBlock(id, &b, batch);
    }
  }
}

bool RocksDbStore::CloseBlock(SeriesId id, Block* b,
                              rocksdb::WriteBatch* batch) {
  thread_local std::vector<int64_t> ts;
  thread_local std::vector<double> values;
  if (absl::Status s = ReadOpenBlock(id, *b, &ts, &values); !s.ok()) {
    // The database cannot give back what it took minutes ago: the block
    // stays open (its samples appended on) until it can.
    NoteError(s);
    return false;
  }
  const std::string chunk = EncodeChunk(ts, values);
  const int64_t day = DayOf(b->start_ms);
  if (day <= retention_day_) ++late_writes_;
  (void)batch->Put(cf(kRaw), RawKey(day, id, b->start_ms), chunk);
  std::string cursor;
  PutBE(&cursor, Biased(ts.back()), 8);
  uint64_t bits;
  std::memcpy(&bits, &values.back(), sizeof bits);
  PutBE(&cursor, bits, 8);
  (void)batch->Put(cf(kOpen), CursorKey(id), cursor);
  for (uint32_t piece = 0; piece < b->pieces; ++piece)
    (void)batch->Delete(cf(kOpen), PieceKey(id, b->PieceKeyMs(piece)));
  b->samples.Clear();
  b->pieces = 0;
  b->checkpointed = {};
  b->phased = true;
  ++chunks_flushed_;
  return true;
}

absl::Status RocksDbStore::ReadOpenBlock(SeriesId id, const Block& b,
                                         std::vector<int64_t>* ts,
                                         std::vector<double>* values) const {
  ts->clear();
  values->clear();
  if (b.samples.Decode(0, ts, values)) return absl::OkStatus();
  // The samples before kept() are those of the block's first pieces:
  // decode them in turn, each from the state the one before ends with,
  // then what memory holds, which continues them. All pieces are of the
  // current format (opening the store rewrites older ones,
  // LoadOpenBlocks), and their keys follow from the count, so they are
  // read in one MultiGet (each SST file looked up once for all).
  const uint32_t dropped = b.samples.kept().count;
  std::vector<std::string> keys;
  std::vector<rocksdb::Slice> key_slices;
  keys.reserve(b.pieces);
  key_slices.reserve(b.pieces);
  for (uint32_t p = 0; p < b.pieces; ++p) {
    keys.push_back(PieceKey(id, b.PieceKeyMs(p)));
    key_slices.emplace_back(keys.back());
  }
  std::vector<rocksdb::PinnableSlice> pieces(b.pieces);
  std::vector<rocksdb::Status> got(b.pieces);
  if (b.pieces > 0)
    db_->MultiGet(rocksdb::ReadOptions(), cf(kOpen), b.pieces, key_slices.data(),
                  pieces.data(), got.data(), /*sorted_input=*/true);
  uint32_t decoded = 0;
  CompressedSamples seq;
  std::string_view previous;
  std::vector<int64_t> piece_ts;
  std::vector<double> piece_values;
  for (uint32_t p = 0; p < b.pieces && decoded < dropped; ++p) {
    if (got[p].IsNotFound())
      return absl::DataLossError(absl::StrCat("series ", id, ": piece ", p,
                                              " of its open block is missing"));
    VIGIL_RETURN_IF_ERROR(FromRocks(got[p], "cannot read a piece of an open block"));
    const std::string_view piece = pieces[p].ToStringView();
    if (!DecodePiece(seq, piece, previous, &piece_ts, &piece_values) ||
        !seq.ContinueFrom(piece, decoded + static_cast<uint32_t>(piece_ts.size())))
      return absl::DataLossError(absl::StrCat("series ", id, ": piece ", p,
                                              " of its open block does not decode"));
    decoded += static_cast<uint32_t>(piece_ts.size());
    ts->insert(ts->end(), piece_ts.begin(), piece_ts.end());
    values->insert(values->end(), piece_values.begin(), piece_values.end());
    previous = piece;
  }
  std::string rest;
  b.samples.AppendRecordSince(b.samples.kept(), &rest);
  if (decoded != dropped || seq.size() != dropped ||
      (!rest.empty() && !seq.DecodeRecord(rest, previous, ts, values)) ||
      ts->size() != b.samples.size())
    return absl::DataLossError(absl::StrCat(
        "series ", id, ": its open block's pieces do not continue into memory"));
  return absl::OkStatus();
}

absl::Status RocksDbStore::WriteLocked(rocksdb::WriteBatch* batch) {
  if (batch->Count() == 0) return absl::OkStatus();
  rocksdb::WriteOptions write;
  write.sync = options_.sync_frame_log;
  absl::Status s = DbWrite(write, batch, "cannot write chunks");
  if (!s.ok()) {
    ++write_errors_;
    owed_.push_back(std::move(*batch));
    batch->Clear();
    refusal_ = s;
  }
  return s;
}

absl::StatusOr<RocksDbStore::CheckpointWork> RocksDbStore::BeginCheckpoint() {
  const uint64_t number = log_number_ + 1;
  VIGIL_ASSIGN_OR_RETURN(
      std::unique_ptr<FrameLogWriter> writer,
      FrameLogWriter::Create(FrameLogSegmentPath(options_.data_dir, number)));
  log_ = std::move(writer);
  log_number_ = number;
  Hook("rotated");
  CheckpointWork work;
  work.log_number = number;
  work.ids.swap(dirty_);
  return work;
}

void RocksDbStore::EncodePieces(CheckpointWork& work, size_t begin,
                                size_t end) {
  std::string piece;
  for (size_t i = begin; i < end; ++i) {
    const SeriesId id = work.ids[i];
    Block& b = blocks_[id];
    if (b.checkpointed.count >= b.samples.size()) continue;
    // The bits as they are, no decoding.
    piece.clear();
    b.samples.AppendRecordSince(b.checkpointed, &piece);
    const int64_t key_ms = b.PieceKeyMs(b.pieces);
    (void)work.batch.Put(cf(kOpen), PieceKey(id, key_ms), piece);
    work.written.push_back({id, key_ms, b.checkpointed, b.samples.mark()});
    ++b.pieces;  // provisional: rolled back on failure
    b.checkpointed = b.samples.mark();
  }
}

void RocksDbStore::DropWritten(const CheckpointWork& work, size_t begin) {
  for (size_t i = begin; i < work.durable; ++i) {
    const CheckpointWork::Piece& piece = work.written[i];
    Block& b = blocks_[piece.id];
    // Not if the block closed (and maybe opened anew) since.
    if (b.HasPiece(piece.start)) b.samples.DropBefore(piece.checkpointed_after);
  }
}

absl::Status RocksDbStore::WritePieces(CheckpointWork& work) {
  if (work.batch.Count() == 0) return absl::OkStatus();
  VIGIL_RETURN_IF_ERROR(
      DbWrite(rocksdb::WriteOptions(), &work.batch, "cannot checkpoint"));
  work.durable = work.written.size();
  work.batch.Clear();
  return absl::OkStatus();
}

absl::Status RocksDbStore::WriteCheckpoint(CheckpointWork& work) {
  (void)work.batch.Put(cf(kMeta), kLogStartKey, U64Value(work.log_number));
  rocksdb::WriteOptions write;
  write.sync = options_.sync_frame_log;
  VIGIL_RETURN_IF_ERROR(DbWrite(write, &work.batch, "cannot checkpoint"));
  work.durable = work.written.size();
  return absl::OkStatus();
}

absl::Status RocksDbStore::FinishCheckpoint(CheckpointWork& work,
                                            absl::Status written) {
  // Whether the block of `id` still holds the piece starting at `start`
  // (it may have closed while an unlocked checkpoint wrote; that deleted
  // its pieces, and cleared them, before this one was put).
  auto holds = [this](SeriesId id, int64_t start) {
    return blocks_[id].HasPiece(start);
  };
  rocksdb::WriteBatch orphans;
  if (!written.ok()) {
    // The old segments stay in the replay range; undo the bookkeeping of
    // the pieces not written (those written stay: valid pieces), last
    // first, since a block's count of pieces holds only those before.
    for (size_t i = work.written.size(); i-- > work.durable;) {
      const CheckpointWork::Piece& piece = work.written[i];
      if (!holds(piece.id, piece.start)) continue;
      Block& b = blocks_[piece.id];
      --b.pieces;
      b.checkpointed = piece.checkpointed_before;
    }
    dirty_.insert(dirty_.end(), work.ids.begin(), work.ids.end());
    for (size_t i = 0; i < work.durable; ++i) {
      const CheckpointWork::Piece& piece = work.written[i];
      if (!holds(piece.id, piece.start))
        (void)orphans.Delete(cf(kOpen), PieceKey(piece.id, piece.start));
    }
    if (orphans.Count() > 0) (void)DbWrite(rocksdb::WriteOptions(), &orphans, "cannot delete pieces");
    return written;
  }
  ++checkpoints_;
  Hook("committed");
  for (const CheckpointWork::Piece& piece : work.written) {
    if (!holds(piece.id, piece.start))
      (void)orphans.Delete(cf(kOpen), PieceKey(piece.id, piece.start));
  }
  // One left by a crash before this write is dropped when the store opens.
  if (orphans.Count() > 0) (void)DbWrite(rocksdb::WriteOptions(), &orphans, "cannot delete pieces");
  auto segments = ListFrameLogSegments(options_.data_dir);
  if (segments.ok()) {
    for (uint64_t n : *segments) {
      if (n < work.log_number) {
        std::error_code ec;
        std::filesystem::remove(FrameLogSegmentPath(options_.data_dir, n), ec);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RocksDbStore::Checkpoint() {
  mu_.Await(absl::Condition(
      +[](bool* in_flight) { return !*in_flight; }, &checkpointing_));
  VIGIL_ASSIGN_OR_RETURN(CheckpointWork work, BeginCheckpoint());
  // A slice's pieces at a time, so the batch does not hold every dirty
  // block's pieces at once (after a crash's replay that is every series).
  absl::Status s;
  for (size_t begin = 0; begin < work.ids.size() && s.ok(); begin += kCheckpointSlice) {
    EncodePieces(work, begin, std::min(work.ids.size(), begin + kCheckpointSlice));
    if (work.batch.GetDataSize() >= kCheckpointBatchBytes) s = WritePieces(work);
  }
  if (s.ok()) s = WriteCheckpoint(work);
  // What it wrote (at open: the samples replayed) need not stay in memory.
  if (s.ok()) DropWritten(work, 0);
  return FinishCheckpoint(work, s);
}

absl::Status RocksDbStore::CheckpointInSlices() {
  CheckpointWork work;
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* in_flight) { return !*in_flight; }, &checkpointing_));
    if (log_->size() < options_.frame_log_checkpoint_bytes) return absl::OkStatus();
    VIGIL_ASSIGN_OR_RETURN(work, BeginCheckpoint());
    checkpointing_ = true;
  }
  // Appends go on between slices. A sample they add after the rotation
  // may land in a piece too: replaying the new segment then finds it
  // stored and drops it as a duplicate. Each slice's pieces are written
  // on their own (pieces without the new log start are harmless: a
  // restart loads them and replays the old segments, dropping what they
  // hold), and after each slice the thread rests as long as the slice
  // took, so a checkpoint uses at most half a core instead of bursting.
  constexpr double kMaxRestSeconds = 0.02;
  Clock& clock = *options_.store.clock;
  absl::Status s;
  for (size_t begin = 0; begin < work.ids.size() && s.ok(); begin += kCheckpointSlice) {
    const double start = clock.Now();
    {
      absl::MutexLock l(&mu_);
      EncodePieces(work, begin, std::min(work.ids.size(), begin + kCheckpointSlice));
    }
    const size_t durable = work.durable;
    s = WritePieces(work);
    if (s.ok() && work.durable > durable) {
      absl::MutexLock l(&mu_);
      DropWritten(work, durable);
    }
    const double rest = std::min(kMaxRestSeconds, clock.Now() - start);
    if (rest > 0) {
      absl::MutexLock w(&wake_mu_);
      wake_mu_.AwaitWithTimeout(
          absl::Condition(+[](bool* stopping) { return *stopping; }, &stopping_),
          absl::Seconds(rest));
    }
  }
  Hook("writing");  // unlocked: appends may run, and close blocks
  if (s.ok()) s = WriteCheckpoint(work);
  absl::MutexLock l(&mu_);
  checkpointing_ = false;
  return FinishCheckpoint(work, s);
}

absl::StatusOr<SeriesId> RocksDbStore::Find(const SeriesKey& key) const {
  SeriesKey normal = key;
  VIGIL_RETURN_IF_ERROR(NormalizeSeriesKey(&normal));
  const std::string encoded = EncodeSeriesKey(normal);
  absl::MutexLock l(&index_mu_);
  std::optional<SeriesId> id = index_.Find(encoded);
  if (!id.has_value()) return absl::NotFoundError("no such series");
  return *id;
}

absl::StatusOr<SeriesId> RocksDbStore::Resolve(const SeriesKey& key) {
  SeriesKey normal = key;
  VIGIL_RETURN_IF_ERROR(NormalizeSeriesKey(&normal));
  const std::string encoded = EncodeSeriesKey(normal);
  {
    absl::MutexLock index(&index_mu_);
    if (std::optional<SeriesId> id = index_.Find(encoded)) return *id;
  }
  absl::MutexLock l(&mu_);
  absl::MutexLock index(&index_mu_);
  // Created meanwhile?
  if (std::optional<SeriesId> id = index_.Find(encoded)) return *id;
  if (index_.size() - expired_ >= options_.store.max_series)
    return absl::ResourceExhaustedError(
        absl::StrCat("series limit ", options_.store.max_series, " reached"));
  if (index_.size() >= std::numeric_limits<SeriesId>::max())
    return absl::ResourceExhaustedError("series ids exhausted");
  const SeriesId id = static_cast<SeriesId>(index_.size());
  rocksdb::WriteOptions write;
  write.sync = options_.sync_frame_log;
  rocksdb::WriteBatch batch;
  (void)batch.Put(cf(kIndex), IndexKey(id), encoded);
  if (absl::Status s = DbWrite(write, &batch, "cannot persist series"); !s.ok()) {
    NoteError(s);
    return s;
  }
  index_.Add(encoded);
  blocks_.emplace_back();
  return id;
}

absl::StatusOr<SeriesKey> RocksDbStore::Key(SeriesId id) const {
  absl::MutexLock l(&index_mu_);
  return index_.Key(id);
}

std::vector<SeriesInfo> RocksDbStore::ListSeries(
    const SeriesFilter& filter) const {
  absl::MutexLock l(&index_mu_);
  std::vector<SeriesInfo> out;
  for (SeriesId id = filter.start; id < index_.size() && out.size() < filter.limit;
       ++id) {
    if (!index_.Live(id) || !index_.Matches(id, filter)) continue;
    absl::StatusOr<SeriesKey> key = DecodeSeriesKey(index_.Encoded(id));
    if (key.ok()) out.push_back(SeriesInfo{.id = id, .key = *std::move(key)});
  }
  return out;
}

absl::Status RocksDbStore::Append(std::span<const FrameColumns> frames,
                                  AppendResult* result) {
  AppendResult local;
  absl::Status status;
  bool maintenance_due = false;
  {
    absl::MutexLock l(&mu_);
    VIGIL_RETURN_IF_ERROR(refusal_);
    VIGIL_RETURN_IF_ERROR(ValidateFrames(frames, blocks_.size()));
    if (expired_blocks_ > 0) {
      for (const FrameColumns& frame : frames) {
        for (SeriesId id : frame.ids) {
          if (blocks_[id].expired) return ExpiredSeriesError(id);
        }
      }
    }
    status = log_->Append(frames, options_.sync_frame_log);
    if (!status.ok()) {
      ++write_errors_;
      log_error_ = status =
          WriteError("cannot write the frame log", std::string(status.message()));
      // A segment that cannot be trusted any more needs a new one.
      maintenance_due = log_->broken();
    } else {
      if (!log_error_.ok()) {  // the cause went away
        log_error_ = absl::OkStatus();
        ++recoveries_;
      }
      rocksdb::WriteBatch batch;
      const double now = options_.store.clock->Now();
      ApplyFrames(frames, StoreSeconds(now), &local, &batch);
      appended_ += local.accepted;
      dropped_ += local.duplicates + local.out_of_order;
      // The samples are durable in the frame log: a failed chunk write does
      // not fail this Append, it makes the store refuse the next ones until
      // the maintenance thread has written what is owed.
      maintenance_due = !WriteLocked(&batch).ok() ||
                        log_->size() >= options_.frame_log_checkpoint_bytes ||
                        now >= next_retention_;
    }
  }
  if (maintenance_due) Kick();
  if (status.ok() && result != nullptr) *result = local;
  return status;
}

absl::StatusOr<int64_t> RocksDbStore::SnapshotOpenBlock(
    SeriesId id, int64_t from_ms, int64_t to_ms, std::vector<int64_t>* ts,
    std::vector<double>* values) const {
  absl::MutexLock l(&mu_);
  if (id >= blocks_.size() || blocks_[id].expired)
    return absl::NotFoundError(absl::StrCat("unknown series id ", id));
  const Block& b = blocks_[id];
  if (b.samples.empty()) return std::numeric_limits<int64_t>::max();
  thread_local std::vector<int64_t> all_ts;
  thread_local std::vector<double> all_values;
  VIGIL_RETURN_IF_ERROR(ReadOpenBlock(id, b, &all_ts, &all_values));
  for (size_t i = 0; i < all_ts.size(); ++i) {
    if (all_ts[i] < from_ms || all_ts[i] >= to_ms) continue;
    ts->push_back(all_ts[i]);
    values->push_back(all_values[i]);
  }
  return b.start_ms;
}

absl::Status RocksDbStore::ScanRaw(
    const rocksdb::ReadOptions& read, SeriesId id, int64_t from_ms,
    int64_t to_ms, int64_t open_start,
    const std::function<void(const std::vector<int64_t>&,
                             const std::vector<double>&)>& fn) const {
  // Blocks span less than block_ms_, so earlier starts cannot overlap.
  const int64_t first = from_ms - block_ms_;
  const int64_t end = std::min(to_ms, open_start);
  if (end <= first) return absl::OkStatus();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, cf(kRaw)));
  std::vector<int64_t> ts;
  std::vector<double> values;
  int64_t day = DayOf(first);
  while (day <= DayOf(end - 1)) {
    it->Seek(RawKey(day, id, first));
    if (!it->Valid()) break;
    const int64_t key_day = KeyDay(it->key());
    if (key_day > day) {  // nothing stored in between
      day = key_day;
      continue;
    }
    const std::string prefix = RawKey(day, id, 0).substr(0, 8);
    for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
      const int64_t start = Unbiased(GetBE(it->key().data() + 8, 8));
      if (start >= end) break;
      ts.clear();
      values.clear();
      // A corrupt chunk is skipped (and quarantined by retention).
      if (!DecodeChunk(it->value().ToStringView(), &ts, &values).ok()) {
        ++corrupt_skipped_;
        continue;
      }
      fn(ts, values);
    }
    ++day;
  }
  return FromRocks(it->status(), "cannot read chunks");
}

absl::StatusOr<std::vector<Sample>> RocksDbStore::Query(SeriesId id,
                                                        double from,
                                                        double to) const {
  const int64_t from_ms = TsToMillis(from) - 1, to_ms = TsToMillis(to) + 1;
  std::vector<int64_t> open_ts;
  std::vector<double> open_values;
  VIGIL_ASSIGN_OR_RETURN(
      const int64_t open_start,
      SnapshotOpenBlock(id, from_ms, to_ms, &open_ts, &open_values));
  std::vector<Sample> out;
  auto add = [&](const std::vector<int64_t>& ts,
                 const std::vector<double>& values) {
    for (size_t i = 0; i < ts.size(); ++i) {
      const double t = MillisToTs(ts[i]);
      if (t >= from && t < to) out.push_back(Sample{t, values[i]});
    }
  };
  VIGIL_RETURN_IF_ERROR(
      ScanRaw(rocksdb::ReadOptions(), id, from_ms, to_ms, open_start, add));
  add(open_ts, open_values);
  return out;
}

absl::StatusOr<std::vector<Aggregate>> RocksDbStore::QueryAggregate(
    SeriesId id, double from, double to, double step) const {
  VIGIL_RETURN_IF_ERROR(ValidateStep(step));
  const int64_t from_ms = TsToMillis(from) - 1, to_ms = TsToMillis(to) + 1;
  std::vector<int64_t> open_ts;
  std::vector<double> open_values;
  VIGIL_ASSIGN_OR_RETURN(
      const int64_t open_start,
      SnapshotOpenBlock(id, from_ms, to_ms, &open_ts, &open_values));
  AggregateBuilder builder(from, to, step);
  // One snapshot, so a concurrent roll-up is seen entirely or not at all.
  const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
  rocksdb::ReadOptions read;
  read.snapshot = snapshot;
  absl::Status status = ScanRaw(
      read, id, from_ms, to_ms, open_start,
      [&](const std::vector<int64_t>& ts, const std::vector<double>& values) {
        for (size_t i = 0; i < ts.size(); ++i) builder.AddSample(ts[i], values[i]);
      });
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, cf(kRollup)));
  int64_t day = DayOf(from_ms);
  while (status.ok() && day <= DayOf(to_ms)) {
    it->Seek(RollupKey(day, id));
    if (!it->Valid()) break;
    const int64_t key_day = KeyDay(it->key());
    if (key_day > day) {
      day = key_day;
      continue;
    }
    if (it->key() == RollupKey(day, id)) {
      absl::StatusOr<std::vector<RollupPoint>> points =
          DecodeRollupChunk(it->value().ToStringView());
      if (points.ok()) {
        for (const RollupPoint& p : *points) builder.AddRollup(p);
      } else {
        ++corrupt_skipped_;
      }
    }
    ++day;
  }
  if (status.ok()) status = FromRocks(it->status(), "cannot read rollups");
  it.reset();
  db_->ReleaseSnapshot(snapshot);
  VIGIL_RETURN_IF_ERROR(status);
  for (size_t i = 0; i < open_ts.size(); ++i)
    builder.AddSample(open_ts[i], open_values[i]);
  return builder.Finish();
}

absl::StatusOr<uint64_t> RocksDbStore::AppendEvent(const Event& event) {
  if (event.stream.empty())
    return absl::InvalidArgumentError("event stream is empty");
  if (event.stream.size() > 0xffff)
    return absl::InvalidArgumentError("event stream name longer than 65535");
  if (!std::isfinite(event.ts))
    return absl::InvalidArgumentError("event timestamp is not finite");
  absl::MutexLock l(&events_mu_);
  const uint64_t seq = next_seq_;
  std::string key = EventPrefix(event.stream);
  PutBE(&key, Biased(EventMillis(event.ts)), 8);
  PutBE(&key, seq, 8);
  std::string value;
  uint64_t bits;
  std::memcpy(&bits, &event.ts, sizeof bits);
  PutBE(&value, bits, 8);
  value.append(event.payload);
  rocksdb::WriteBatch batch;
  (void)batch.Put(cf(kEvents), key, value);
  (void)batch.Put(cf(kMeta), kNextSeqKey, U64Value(seq + 1));
  rocksdb::WriteOptions write;
  write.sync = true;
  if (absl::Status s = DbWrite(write, &batch, "cannot append event"); !s.ok()) {
    NoteError(s);
    return s;
  }
  next_seq_ = seq + 1;
  return seq;
}

absl::Status RocksDbStore::DeleteEventsBefore(std::string_view stream,
                                              double ts) {
  if (stream.empty()) return absl::InvalidArgumentError("event stream is empty");
  if (stream.size() > 0xffff)
    return absl::InvalidArgumentError("event stream name longer than 65535");
  if (std::isnan(ts)) return absl::InvalidArgumentError("cutoff is NaN");
  const std::string prefix = EventPrefix(stream);
  std::string begin = prefix;
  PutBE(&begin, 0, 8);
  // Keys are (prefix, biased millis, seq): everything below the cutoff's
  // millisecond, whatever its seq.
  std::string end = prefix;
  PutBE(&end, Biased(EventMillis(std::clamp(ts, -9e12, 9e12))), 8);
  if (end <= begin) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  (void)batch.DeleteRange(cf(kEvents), begin, end);
  rocksdb::WriteOptions write;
  write.sync = true;
  absl::Status s = DbWrite(write, &batch, "cannot delete events");
  if (!s.ok()) NoteError(s);
  return s;
}

absl::Status RocksDbStore::PutState(std::string_view key,
                                    std::string_view value) {
  if (key.empty()) return absl::InvalidArgumentError("state key is empty");
  rocksdb::WriteOptions write;
  write.sync = true;
  rocksdb::WriteBatch batch;
  (void)batch.Put(cf(kMeta), absl::StrCat(kStatePrefix, std::string(key)),
                  rocksdb::Slice(value.data(), value.size()));
  absl::Status s = DbWrite(write, &batch, "cannot store state");
  if (!s.ok()) {
    NoteError(s);
    return s;
  }
  // A file written by NewStateWriter would shadow the new value.
  const std::string file = StateFilePath(options_.data_dir, key);
  if (env()->FileExists(file).ok()) {
    return FromRocksWrite(env()->DeleteFile(file), "cannot delete a state file");
  }
  return absl::OkStatus();
}

namespace {

// Writes a state value to <path>.tmp part by part; Commit syncs it,
// renames it to <path>, syncs the directory and then drops the value the
// meta family may still hold under the key (GetState reads the file first,
// so a crash in between reads the new value).
class FileStateWriter : public StateWriter {
 public:
  FileStateWriter(rocksdb::Env* env, std::string path,
                  std::unique_ptr<rocksdb::WritableFile> file,
                  std::function<absl::Status()> after_commit)
      : env_(env), path_(std::move(path)), file_(std::move(file)),
        after_commit_(std::move(after_commit)) {}

  ~FileStateWriter() override {
    if (file_ != nullptr) {
      (void)file_->Close();
      (void)env_->DeleteFile(path_ + ".tmp");
    }
  }

  absl::Status Append(std::string_view part) override {
    if (!status_.ok()) return status_;
    if (file_ == nullptr) return absl::FailedPreconditionError("state already committed");
    status_ = FromRocksWrite(file_->Append(rocksdb::Slice(part.data(), part.size())),
                             "cannot write a state file");
    return status_;
  }

  absl::Status Commit() override {
    if (!status_.ok()) return status_;
    if (file_ == nullptr) return absl::FailedPreconditionError("state already committed");
    const std::string tmp = path_ + ".tmp";
    rocksdb::Status s = file_->Sync();
    if (s.ok()) s = file_->Close();
    file_.reset();
    if (s.ok()) s = env_->RenameFile(tmp, path_);
    std::unique_ptr<rocksdb::Directory> dir;
    if (s.ok()) s = env_->NewDirectory(std::filesystem::path(path_).parent_path(), &dir);
    if (s.ok()) s = dir->Fsync();
    if (!s.ok()) {
      (void)env_->DeleteFile(tmp);
      return status_ = FromRocksWrite(s, "cannot write a state file");
    }
    return after_commit_();
  }

 private:
  rocksdb::Env* env_;
  const std::string path_;
  std::unique_ptr<rocksdb::WritableFile> file_;
  std::function<absl::Status()> after_commit_;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateWriter>> RocksDbStore::NewStateWriter(
    std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("state key is empty");
  const std::string path = StateFilePath(options_.data_dir, key);
  VIGIL_RETURN_IF_ERROR(FromRocksWrite(
      env()->CreateDirIfMissing(std::filesystem::path(path).parent_path()),
      "cannot create the state directory"));
  std::unique_ptr<rocksdb::WritableFile> file;
  VIGIL_RETURN_IF_ERROR(FromRocksWrite(
      env()->NewWritableFile(path + ".tmp", &file, rocksdb::EnvOptions()),
      "cannot create a state file"));
  const std::string db_key = absl::StrCat(kStatePrefix, std::string(key));
  return std::make_unique<FileStateWriter>(
      env(), path, std::move(file), [this, db_key]() {
        rocksdb::WriteBatch batch;
        (void)batch.Delete(cf(kMeta), db_key);
        return DbWrite(rocksdb::WriteOptions(), &batch, "cannot store state");
      });
}

absl::StatusOr<std::string> RocksDbStore::GetState(std::string_view key) const {
  std::string value;
  const std::string file = StateFilePath(options_.data_dir, key);
  if (env()->FileExists(file).ok()) {
    VIGIL_RETURN_IF_ERROR(
        FromRocks(rocksdb::ReadFileToString(env(), file, &value), "cannot read state"));
    return value;
  }
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(kMeta),
                               absl::StrCat(kStatePrefix, std::string(key)), &value);
  if (s.IsNotFound())
    return absl::NotFoundError(absl::StrCat("no state under \"", std::string(key), "\""));
  VIGIL_RETURN_IF_ERROR(FromRocks(s, "cannot read state"));
  return value;
}

std::vector<Event> RocksDbStore::ListEvents(std::string_view stream,
                                            double from, double to,
                                            size_t limit) const {
  std::vector<Event> out;
  if (!(from < to) || limit == 0) return out;
  const std::string prefix = EventPrefix(stream);
  std::string start = prefix;
  PutBE(&start, Biased(EventMillis(std::max(from, -9e12))), 8);
  const int64_t last_ms = EventMillis(std::min(to, 9e12));
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cf(kEvents)));
  for (it->Seek(start); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != prefix.size() + 16 || v.size() < 8) continue;
    if (Unbiased(GetBE(k.data() + prefix.size(), 8)) > last_ms) break;
    uint64_t bits = GetBE(v.data(), 8);
    Event e;
    std::memcpy(&e.ts, &bits, sizeof bits);
    if (e.ts < from || e.ts >= to) continue;
    e.stream = std::string(stream);
    e.seq = GetBE(k.data() + prefix.size() + 8, 8);
    e.payload.assign(v.data() + 8, v.size() - 8);
    out.push_back(std::move(e));
    if (out.size() >= limit) break;
  }
  return out;
}

absl::Status RocksDbStore::Flush() {
  {
    absl::MutexLock l(&mu_);
    VIGIL_RETURN_IF_ERROR(refusal_);
    VIGIL_RETURN_IF_ERROR(Checkpoint());
  }
  if (db_failed_) return absl::UnavailableError("storage refuses writes: not flushed");
  VIGIL_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions(), handles_),
                                  "cannot flush memtables"));
  // The open family is small and mostly deleted pieces: drop them now.
  return FromRocks(db_->CompactRange(rocksdb::CompactRangeOptions(), cf(kOpen),
                                     nullptr, nullptr),
                   "cannot compact open blocks");
}

absl::StatusOr<bool> RocksDbStore::RollUpDay(int64_t day) {
  uint64_t generation;
  {
    absl::MutexLock l(&mu_);
    generation = late_writes_;
  }
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cf(kRaw)));
  const std::string day_prefix = RawKey(day, 0, 0).substr(0, 4);
  std::vector<int64_t> ts;
  std::vector<double> values;
  it->Seek(day_prefix);
  while (it->Valid() && it->key().starts_with(day_prefix)) {
    // One group of series: fold their chunks into rollups.
    std::map<SeriesId, std::vector<RollupPoint>> rollups;
    SeriesId first = 0, last = 0;
    rocksdb::WriteBatch batch;
    uint64_t quarantined = 0;
    while (it->Valid() && it->key().starts_with(day_prefix)) {
      const SeriesId id = static_cast<SeriesId>(GetBE(it->key().data() + 4, 4));
      if (rollups.empty()) first = id;
      if (!rollups.contains(id) && rollups.size() >= kRetentionBatchSeries) break;
      last = id;
      ts.clear();
      values.clear();
      std::vector<RollupPoint>& points = rollups[id];
      if (DecodeChunk(it->value().ToStringView(), &ts, &values).ok()) {
        RollUp(ts, values, &points);
      } else {  // deleted with the day like the others, but kept aside
        (void)batch.Put(cf(kQuarantine), QuarantineKey(kRaw, it->key()),
                        it->value());
        ++quarantined;
      }
      it->Next();
    }
    VIGIL_RETURN_IF_ERROR(FromRocks(it->status(), "cannot read chunks"));
    for (auto& [id, points] : rollups) {
      std::sort(points.begin(), points.end(),
                [](const RollupPoint& a, const RollupPoint& b) {
                  return a.minute_ms < b.minute_ms;
                });
      // Chunks may spill into the next day: group by the minute's day.
      size_t begin = 0;
      while (begin < points.size()) {
        const int64_t rday = DayOf(points[begin].minute_ms);
        size_t end = begin;
        std::vector<RollupPoint> group;
        while (end < points.size() && DayOf(points[end].minute_ms) == rday) {
          if (!group.empty() && group.back().minute_ms == points[end].minute_ms)
            MergeRollup(&group.back(), points[end]);
          else
            group.push_back(points[end]);
          ++end;
        }
        std::string existing;
        rocksdb::Status s =
            db_->Get(rocksdb::ReadOptions(), cf(kRollup), RollupKey(rday, id), &existing);
        if (!s.IsNotFound()) {
          VIGIL_RETURN_IF_ERROR(FromRocks(s, "cannot read rollups"));
          absl::StatusOr<std::vector<RollupPoint>> old = DecodeRollupChunk(existing);
          if (old.ok()) {
            group = MergeRollups(*old, group);
          } else {  // replaced by the new minutes alone, kept aside
            (void)batch.Put(cf(kQuarantine),
                            QuarantineKey(kRollup, RollupKey(rday, id)), existing);
            ++quarantined;
          }
        }
        (void)batch.Put(cf(kRollup), RollupKey(rday, id), EncodeRollupChunk(group));
        begin = end;
      }
    }
    std::string range_end = RawKey(day, last, std::numeric_limits<int64_t>::max());
    range_end.push_back('\0');
    (void)batch.DeleteRange(cf(kRaw), RawKey(day, first, std::numeric_limits<int64_t>::min()),
                            range_end);
    absl::MutexLock l(&mu_);
    if (late_writes_ != generation) return false;
    VIGIL_RETURN_IF_ERROR(DbWrite(rocksdb::WriteOptions(), &batch, "cannot write rollups"));
    quarantined_ += quarantined;
  }
  return true;
}

absl::Status RocksDbStore::EnforceRetention() {
  absl::MutexLock r(&retention_mu_);
  const double now = options_.store.clock->Now();
  const RetentionOptions& retention = options_.store.retention;
  // A raw day is expired once every block starting in it is.
  const int64_t raw_last =
      DayOf(TsToMillis(now - retention.raw_seconds) - block_ms_) - 1;
  const int64_t rollup_last =
      DayOf(TsToMillis(now - retention.rollup_seconds)) - 1;
  {
    absl::MutexLock l(&mu_);
    VIGIL_RETURN_IF_ERROR(refusal_);
    retention_day_ = raw_last;
    rocksdb::WriteBatch batch;
    for (SeriesId id = 0; id < blocks_.size(); ++id) {
      Block& b = blocks_[id];
      if (!b.samples.empty() && DayOf(b.start_ms) <= raw_last)
        CloseBlock(id, &b, &batch);
    }
    VIGIL_RETURN_IF_ERROR(WriteLocked(&batch));
  }
  bool deleted_raw = false;
  while (true) {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), cf(kRaw)));
    it->SeekToFirst();
    VIGIL_RETURN_IF_ERROR(FromRocks(it->status(), "cannot read chunks"));
    if (!it->Valid()) break;
    const int64_t day = KeyDay(it->key());
    if (day > raw_last) break;
    VIGIL_ASSIGN_OR_RETURN(const bool done, RollUpDay(day));
    (void)done;  // a late write only means the loop goes round again
    deleted_raw = true;
  }
  if (deleted_raw) {
    const std::string end = RawKey(raw_last + 1, 0, 0);
    const rocksdb::Slice end_slice(end);
    VIGIL_RETURN_IF_ERROR(FromRocks(
        db_->CompactRange(rocksdb::CompactRangeOptions(), cf(kRaw), nullptr, &end_slice),
        "cannot compact raw chunks"));
  }
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cf(kRollup)));
  it->SeekToFirst();
  VIGIL_RETURN_IF_ERROR(FromRocks(it->status(), "cannot read rollups"));
  if (it->Valid() &&
      KeyDay(it->key()) <= rollup_last) {
    const std::string begin = it->key().ToString();
    const std::string end = RollupKey(rollup_last + 1, 0);
    rocksdb::WriteBatch range;
    (void)range.DeleteRange(cf(kRollup), begin, end);
    VIGIL_RETURN_IF_ERROR(DbWrite(rocksdb::WriteOptions(), &range, "cannot delete rollups"));
    const rocksdb::Slice end_slice(end);
    VIGIL_RETURN_IF_ERROR(FromRocks(
        db_->CompactRange(rocksdb::CompactRangeOptions(), cf(kRollup), nullptr, &end_slice),
        "cannot compact rollups"));
  }
  return ExpireSeries(std::min(raw_last, rollup_last));
}

absl::Status RocksDbStore::ExpireSeries(int64_t last_day) {
  absl::MutexLock l(&mu_);
  VIGIL_RETURN_IF_ERROR(refusal_);
  std::vector<SeriesId> expired;
  for (SeriesId id = 0; id < blocks_.size(); ++id) {
    const Block& b = blocks_[id];
    if (!b.expired && b.has_last && b.samples.empty() &&
        DayOf(b.samples.last_ts_ms()) <= last_day)
      expired.push_back(id);
  }
  if (expired.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (SeriesId id : expired) {
    (void)batch.Put(cf(kIndex), IndexKey(id), "");
    (void)batch.Delete(cf(kOpen), CursorKey(id));
  }
  rocksdb::WriteOptions write;
  write.sync = options_.sync_frame_log;
  VIGIL_RETURN_IF_ERROR(DbWrite(write, &batch, "cannot expire series"));
  absl::MutexLock index(&index_mu_);
  for (SeriesId id : expired) {
    blocks_[id] = Block();
    blocks_[id].expired = true;
    index_.Expire(id);
  }
  expired_blocks_ += expired.size();
  expired_ += expired.size();
  return absl::OkStatus();
}

void RocksDbStore::StartMaintenance() {
  maintenance_ = std::thread([this] { MaintenanceLoop(); });
}

void RocksDbStore::StopMaintenance() {
  {
    absl::MutexLock w(&wake_mu_);
    stopping_ = true;
  }
  if (maintenance_.joinable()) maintenance_.join();
}

void RocksDbStore::Kick() {
  absl::MutexLock w(&wake_mu_);
  kicked_ = true;
}

void RocksDbStore::NoteError(const absl::Status& s) {
  ++write_errors_;
  absl::MutexLock h(&health_mu_);
  other_error_ = s;
}

void RocksDbStore::MaintenanceLoop() {
  const absl::Duration interval =
      absl::Seconds(std::max(0.001, options_.maintenance_interval_seconds));
  while (true) {
    {
      absl::MutexLock w(&wake_mu_);
      auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(wake_mu_) {
        return kicked_ || stopping_;
      };
      wake_mu_.AwaitWithTimeout(absl::Condition(&woken), interval);
      if (stopping_) return;
      kicked_ = false;
    }
    bool failing;
    {
      absl::MutexLock l(&mu_);
      failing = !owed_.empty() || log_->broken();
    }
    {
      absl::MutexLock h(&health_mu_);
      failing = failing || !other_error_.ok() || db_failed_;
    }
    if (failing) {
      TryRecover();
      continue;
    }
    if (absl::Status s = CheckpointInSlices(); !s.ok()) NoteError(s);
    bool retention_due;
    {
      absl::MutexLock l(&mu_);
      const double now = options_.store.clock->Now();
      retention_due = now >= next_retention_;
      if (retention_due) next_retention_ = now + kRetentionInterval;
    }
    if (retention_due) {
      if (absl::Status s = EnforceRetention(); !s.ok()) NoteError(s);
    }
    bool scan_due;
    {
      absl::MutexLock l(&mu_);
      const double now = options_.store.clock->Now();
      scan_due = now >= next_block_scan_;
      if (scan_due) next_block_scan_ = now + BlockScanInterval();
    }
    // A failed write is owed, as for Append: the next pass recovers.
    if (scan_due) (void)ScanOpenBlocks();
  }
}

absl::Status RocksDbStore::ScanOpenBlocks() {
  // Blocks looked at per hold of mu_ (a few hundred microseconds), and
  // closes (~100 us each: decoding, chunk encoding, the write) per hold at
  // most, so that appends wait for one short slice. A whole job's series
  // stop together: after a slice that closed blocks the thread rests as
  // long as the slice took, as checkpoints do, instead of bursting.
  constexpr size_t kSlice = 4096;
  constexpr int kMaxClosesPerSlice = 16;
  constexpr double kMaxRestSeconds = 0.02;
  Clock& clock = *options_.store.clock;
  const double idle = options_.idle_block_seconds;
  uint64_t open = 0;
  uint64_t bytes = 0;
  for (SeriesId id = 0;;) {
    const double start = clock.Now();
    int closes = 0;
    {
      absl::MutexLock l(&mu_);
      // While writes fail, closing would only add to what is owed.
      if (!refusal_.ok()) return refusal_;
      const int64_t now_s = StoreSeconds(start);
      rocksdb::WriteBatch batch;
      const size_t end = std::min<size_t>(blocks_.size(), size_t{id} + kSlice);
      for (; id < end && closes < kMaxClosesPerSlice; ++id) {
        Block& b = blocks_[id];
        if (b.samples.empty()) continue;
        if (idle > 0 && now_s - int64_t{b.touched_s} >= idle &&
            CloseBlock(id, &b, &batch)) {
          ++closes;
          ++idle_blocks_closed_;
          continue;
        }
        ++open;
        bytes += b.samples.capacity_bytes();
      }
      VIGIL_RETURN_IF_ERROR(WriteLocked(&batch));
      if (id >= blocks_.size()) {
        open_blocks_ = open;
        open_block_bytes_ = bytes;
        return absl::OkStatus();
      }
    }
    const double rest = std::min(kMaxRestSeconds, clock.Now() - start);
    if (closes > 0 && rest > 0) {
      absl::MutexLock w(&wake_mu_);
      if (wake_mu_.AwaitWithTimeout(
              absl::Condition(+[](bool* stopping) { return *stopping; }, &stopping_),
              absl::Seconds(rest)))
        return absl::OkStatus();
    }
  }
}

void RocksDbStore::TryRecover() {
  absl::MutexLock l(&mu_);
  // Resume() is a no-op unless a background error stopped the database.
  const rocksdb::Status resumed = db_->Resume();
  // Busy: RocksDB's own recovery runs, and waits until the disk has its
  // reserved buffer (the memtables' size) free again.
  absl::Status s =
      resumed.IsBusy()
          ? absl::UnavailableError(
                "the database recovers once its disk has room for its write "
                "buffers again (see the server log's rocksdb lines)")
          : FromRocksWrite(resumed, "cannot resume the database");
  if (s.ok()) db_failed_ = false;
  while (s.ok() && !owed_.empty()) {
    rocksdb::WriteOptions write;
    write.sync = options_.sync_frame_log;
    s = DbWrite(write, &owed_.front(), "cannot write chunks");
    if (s.ok()) owed_.erase(owed_.begin());
  }
  // A fresh segment: the failing one may have lost its tail on the way.
  if (s.ok()) s = Checkpoint();
  if (!s.ok()) {
    absl::MutexLock h(&health_mu_);
    if (!outage_cause_.ok() && outage_cause_.message() != s.message())
      s = absl::UnavailableError(absl::StrCat(outage_cause_.message(),
                                              " (recovery: ", s.message(), ")"));
    if (!owed_.empty()) refusal_ = s;
    other_error_ = s;
    return;
  }
  refusal_ = absl::OkStatus();
  log_error_ = absl::OkStatus();
  {
    absl::MutexLock h(&health_mu_);
    other_error_ = absl::OkStatus();
    outage_cause_ = absl::OkStatus();
  }
  ++recoveries_;
}

absl::Status RocksDbStore::DbWrite(const rocksdb::WriteOptions& options,
                                   rocksdb::WriteBatch* batch,
                                   std::string_view what) {
  if (db_failed_) {
    absl::MutexLock h(&health_mu_);
    return db_error_;
  }
  absl::Status s = FromRocksWrite(db_->Write(options, batch), what);
  if (!s.ok() && s.code() == absl::StatusCode::kUnavailable) {
    db_failed_ = true;
    absl::MutexLock h(&health_mu_);
    db_error_ = s;
    if (outage_cause_.ok()) outage_cause_ = s;
  }
  return s;
}

absl::Status RocksDbStore::Health() const {
  {
    absl::MutexLock l(&mu_);
    if (!refusal_.ok()) return refusal_;
    if (!log_error_.ok()) return log_error_;
  }
  absl::MutexLock h(&health_mu_);
  if (other_error_.ok()) return absl::OkStatus();
  return absl::UnavailableError(std::string(other_error_.message()));
}

StoreStats RocksDbStore::Stats() const {
  StoreStats stats;
  stats.write_errors = write_errors_;
  stats.recoveries = recoveries_;
  stats.chunks_quarantined = quarantined_;
  stats.corrupt_chunks_skipped = corrupt_skipped_;
  {
    absl::MutexLock l(&mu_);
    stats.checkpoints = checkpoints_;
    absl::MutexLock index(&index_mu_);
    stats.series = index_.size() - expired_;
    stats.series_expired = expired_;
    stats.samples_appended = appended_;
    stats.samples_dropped = dropped_;
    stats.chunks_flushed = chunks_flushed_;
    stats.frame_log_bytes = log_ != nullptr ? log_->size() : 0;
    stats.frame_log_torn_bytes = torn_bytes_;
    stats.frame_log_unknown_samples = unknown_replayed_;
    stats.open_blocks = open_blocks_;
    stats.open_block_bytes = open_block_bytes_;
    stats.idle_blocks_closed = idle_blocks_closed_;
  }
  uint64_t sst = 0;
  for (rocksdb::ColumnFamilyHandle* h : handles_) {
    uint64_t size = 0;
    if (db_->GetIntProperty(h, "rocksdb.live-sst-files-size", &size)) sst += size;
  }
  stats.bytes_on_disk = sst + stats.frame_log_bytes;
  return stats;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SeriesStore>> OpenRocksDbStore(
    const RocksDbStoreOptions& options) {
  if (options.store.clock == nullptr)
    return absl::InvalidArgumentError("RocksDbStoreOptions.store.clock is required");
  if (options.data_dir.empty())
    return absl::InvalidArgumentError("RocksDbStoreOptions.data_dir is required");
  if (options.store.block_samples == 0 || !(options.store.block_seconds > 0) ||
      options.store.block_seconds > kMaxBlockSeconds)
    return absl::InvalidArgumentError(absl::StrCat(
        "block_samples must be > 0 and block_seconds in (0, ", kMaxBlockSeconds, "]"));
  if (!(options.idle_block_seconds >= 0) || !std::isfinite(options.idle_block_seconds))
    return absl::InvalidArgumentError(
        "idle_block_seconds must be a finite number >= 0 (0: never)");
  auto store = std::make_unique<RocksDbStore>(options);
  VIGIL_RETURN_IF_ERROR(store->Init());
  store->StartMaintenance();
  return store;
}

}  // namespace vigil
