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

namespace vigil {

struct RocksDbStoreOptions {
  StoreOptions store;
  std::string data_dir;  // required; created if missing
  // fsync the frame log on every Append (survives power loss, slower).
  // When false, an acked sample survives a process crash (kill -9) only.
  bool sync_frame_log = false;
  // Frame log size that triggers a checkpoint (open blocks written out).
  uint64_t frame_log_checkpoint_bytes = 64 << 20;
  // Test hook, called (under the store's lock) at the steps of a checkpoint:
  // "rotated" (new log segment created, open blocks not yet written) and
  // "committed" (open blocks written, old segments not yet deleted). Crash
  // tests _exit() there. Empty by default.
  std::function<void(std::string_view step)> checkpoint_hook;
};

// Opens (creating if needed) the store in options.data_dir and replays the
// frame log. kInvalidArgument for bad options; kDataLoss/kInternal when the
// data dir is unreadable or corrupt beyond the torn tail of the frame log
// (which is truncated and reported, not fatal).
absl::StatusOr<std::unique_ptr<SeriesStore>> OpenRocksDbStore(
    const RocksDbStoreOptions& options);

}  // namespace vigil

#endif  // VIGIL_STORAGE_ROCKSDB_STORE_H_
