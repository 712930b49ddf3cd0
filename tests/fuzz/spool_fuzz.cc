// Fuzzes the agent's spool recovery (agent/disk_spool.h): the segment,
// dictionary and "acked" files an earlier agent process (or a full disk, or
// a hand edit) left. Reopening must never crash, hand back batches in
// increasing seq order, and accept new batches after them.
//
// Input: [u16 n][n bytes segment][u16 m][m bytes series.dict][rest: acked].
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "agent/disk_spool.h"

namespace {

std::string_view Take(std::string_view* in) {
  if (in->size() < 2) {
    std::string_view all = *in;
    *in = {};
    return all;
  }
  const size_t n = static_cast<uint8_t>((*in)[0]) | (static_cast<uint8_t>((*in)[1]) << 8);
  in->remove_prefix(2);
  std::string_view part = in->substr(0, n);
  in->remove_prefix(part.size());
  return part;
}

void Write(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("vigil-spool-fuzz-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string_view in(reinterpret_cast<const char*>(data), size);
  Write(dir / "spool-00000000000000000001.seg", Take(&in));
  Write(dir / "series.dict", Take(&in));
  if (!in.empty()) Write(dir / "acked", in);

  auto spool = vigil::agent::DiskBatchQueue::Open(dir.string(), 1 << 20);
  if (!spool.ok()) return 0;
  uint64_t last = 0;
  for (auto batch = (*spool)->NextAfter(0); batch != nullptr;
       batch = (*spool)->NextAfter(batch->seq())) {
    if (batch->seq() <= last) __builtin_trap();
    last = batch->seq();
  }
  auto next = std::make_shared<vigil::v1::FrameBatch>();
  next->set_seq(last + 1);
  if (last < UINT64_MAX - 1 && !(*spool)->Push(next).ok()) __builtin_trap();
  while ((*spool)->PopFront() != nullptr) {
  }
  return 0;
}
