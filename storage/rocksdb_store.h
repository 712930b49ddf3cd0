// The production SeriesStore: RocksDB column families for raw chunks,
// rollups, the series index and events, plus a frame log in the data dir.
#ifndef VIGIL_STORAGE_ROCKSDB_STORE_H_
#define VIGIL_STORAGE_ROCKSDB_STORE_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "storage/series_store.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace vigil {

struct RocksDbStoreOptions {
  StoreOptions store;
  std::string data_dir;  // required; created if missing
  // fsync the frame log on every Append (survives power loss, slower).
  // When false, an acked sample survives a process crash (kill -9) only.
  bool sync_frame_log = false;
  // Frame log size that triggers a checkpoint (open blocks written out).
  // Each checkpoint writes a piece per open series, and a closing block
  // deletes its pieces: smaller means more RocksDB writes per sample;
  // larger, a longer frame log to replay after a crash. 96 MiB: a
  // checkpoint every ~80 s at 1,250 8-GPU nodes (~4.2 bytes a sample).
  uint64_t frame_log_checkpoint_bytes = 96 << 20;
  // Memory all RocksDB memtables together may hold before the largest is
  // flushed to disk; 0: no such budget (RocksDB's 64 MiB a column family,
  // two each).
  uint64_t memtable_budget_bytes = 32 << 20;
  // An open block whose series has had no sample for this many seconds of
  // the store's clock is closed (written as a chunk, its checkpoint pieces
  // deleted, its memory freed), after between this and 4/3 of it. Series
  // stop for good when a job ends or a node moves to another job; without
  // this their open blocks would stay in memory until raw retention (days),
  // so memory would follow the series seen in a week instead of those
  // alive. A series that resumes opens a new block. 0: never.
  double idle_block_seconds = 900;
  // Checkpoints, retention, closing idle blocks and recovery from write
  // errors run on the store's own maintenance thread, never in Append(). It
  // wakes when the frame log passes frame_log_checkpoint_bytes or retention
  // falls due, and at least this often (wall-clock seconds) to retry after
  // an error and to look for idle blocks.
  double maintenance_interval_seconds = 1;
  // The RocksDB environment, for tests that inject I/O faults; null: the
  // default. Not owned; must outlive the store.
  rocksdb::Env* env = nullptr;
  // Test hook, called at the steps of a checkpoint: "rotated" (new log
  // segment created, open blocks not yet written; under the store's lock),
  // "writing" (the maintenance thread's checkpoint only: pieces written,
  // the new log start not yet; unlocked, so appends run meanwhile) and "committed" (open
  // blocks written, old segments and pieces of blocks closed meanwhile not
  // yet deleted; under the lock). Crash tests _exit() there. Empty by
  // default.
  std::function<void(std::string_view step)> checkpoint_hook;
};

// Opens (creating if needed) the store in options.data_dir, replays the
// frame log and starts the maintenance thread. A chunk or open-block piece
// that cannot be decoded is quarantined (kept aside, counted), not fatal. kInvalidArgument for bad options; kDataLoss/kInternal when the
// data dir is unreadable or corrupt beyond the torn tail of the frame log
// (which is truncated and reported, not fatal).
absl::StatusOr<std::unique_ptr<SeriesStore>> OpenRocksDbStore(
    const RocksDbStoreOptions& options);

}  // namespace vigil

#endif  // VIGIL_STORAGE_ROCKSDB_STORE_H_
