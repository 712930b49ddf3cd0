// Fuzzes frame-log recovery (storage/frame_log.h): a segment file as a
// crash, a torn write or a bad sector left it. Replay must stop cleanly at
// the first bad record, hand over only well-formed frames, and cut the file
// to its valid prefix, which replays again to the same records.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "storage/frame_log.h"

namespace {

// The records of `path`; traps on a frame whose columns disagree.
uint64_t Replay(const std::string& path, bool truncate) {
  absl::StatusOr<vigil::FrameLogReplay> r = vigil::ReplayFrameLogSegment(
      path, truncate, [](std::span<const vigil::FrameColumns> frames) {
        for (const vigil::FrameColumns& f : frames)
          if (f.ids.size() != f.values.size()) __builtin_trap();
        return absl::OkStatus();
      });
  if (!r.ok()) return UINT64_MAX;
  if (r->valid_bytes + r->torn_bytes != std::filesystem::file_size(path) &&
      !truncate)
    __builtin_trap();
  return r->records;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = std::filesystem::temp_directory_path() /
                                  ("vigil-frame-log-fuzz-" + std::to_string(getpid()));
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const uint64_t first = Replay(path, /*truncate=*/false);
  const uint64_t cut = Replay(path, /*truncate=*/true);
  if (first != cut) __builtin_trap();
  // What was kept is whole: it replays again to the same records, untorn.
  absl::StatusOr<vigil::FrameLogReplay> again = vigil::ReplayFrameLogSegment(
      path, false, [](std::span<const vigil::FrameColumns>) { return absl::OkStatus(); });
  if (cut != UINT64_MAX && (!again.ok() || again->records != cut || again->torn_bytes != 0))
    __builtin_trap();
  return 0;
}
