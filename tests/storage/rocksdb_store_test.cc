// RocksDB-only behaviour: reopening, the frame log's torn tail, and crash
// consistency of checkpoints. Crashes run in a re-executed child process
// (threadsafe death tests) that _exit()s or is SIGKILLed mid-stream.
#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <future>
#include <mutex>
#include <thread>

#include "absl/time/clock.h"
#include "storage/chunk_codec.h"
#include "storage/compressed_samples.h"
#include "storage/frame_log.h"
#include "gmock/gmock.h"
#include "tests/storage/store_test_util.h"
#include "tests/storage/xor_format_records.h"

namespace vigil::testing {
namespace {

constexpr double kT0 = 1764000000.0;
constexpr int kSeries = 5;

// A file system whose writable files fail every append with "no space
// left on device" while `full` is set, as a full disk does.
class FullDiskFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FullDiskFs(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}
  const char* Name() const override { return "FullDiskFs"; }

  rocksdb::IOStatus NewWritableFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, &file, dbg);
    if (s.ok()) *result = std::make_unique<File>(std::move(file), &full);
    return s;
  }

  std::atomic<bool> full{false};

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, std::atomic<bool>* full)
        : FSWritableFileOwnerWrapper(std::move(file)), full_(full) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (*full_) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return FSWritableFileOwnerWrapper::Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (*full_) return rocksdb::IOStatus::NoSpace("injected: disk full");
      return FSWritableFileOwnerWrapper::Append(data, options, info, dbg);
    }

   private:
    std::atomic<bool>* full_;
  };
};

// A file system whose table (.sst) files fail every read with an I/O error
// while `unreadable` is set, as a failing disk does; files opened before
// it was set fail too.
class UnreadableTablesFs : public rocksdb::FileSystemWrapper {
 public:
  explicit UnreadableTablesFs(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}
  const char* Name() const override { return "UnreadableTablesFs"; }

  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& name, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
      rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSRandomAccessFile> file;
    rocksdb::IOStatus s = target()->NewRandomAccessFile(name, options, &file, dbg);
    if (!s.ok()) return s;
    if (name.ends_with(".sst"))
      *result = std::make_unique<File>(std::move(file), &unreadable);
    else
      *result = std::move(file);
    return s;
  }

  std::atomic<bool> unreadable{false};

 private:
  class File : public rocksdb::FSRandomAccessFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSRandomAccessFile> file, std::atomic<bool>* unreadable)
        : FSRandomAccessFileOwnerWrapper(std::move(file)), unreadable_(unreadable) {}
    rocksdb::IOStatus Read(uint64_t offset, size_t n, const rocksdb::IOOptions& options,
                           rocksdb::Slice* result, char* scratch,
                           rocksdb::IODebugContext* dbg) const override {
      if (*unreadable_) return rocksdb::IOStatus::IOError("injected: unreadable");
      return FSRandomAccessFileOwnerWrapper::Read(offset, n, options, result, scratch, dbg);
    }
    rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs,
                                const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* dbg) override {
      if (*unreadable_) return rocksdb::IOStatus::IOError("injected: unreadable");
      return FSRandomAccessFileOwnerWrapper::MultiRead(reqs, num_reqs, options, dbg);
    }

   private:
    std::atomic<bool>* unreadable_;
  };
};

// True once `done()` holds, polling for up to 20 s.
template <typename Fn>
bool WaitFor(Fn done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// The database of the store at `dir` (closed), opened behind its back with
// every column family; `db` is null if it cannot be opened.
class RawDb {
 public:
  RawDb(const std::string& dir, bool read_only) {
    rocksdb::DBOptions options;
    if (!rocksdb::DB::ListColumnFamilies(options, dir + "/db", &names_).ok()) return;
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names_)
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    rocksdb::DB* db = nullptr;
    const rocksdb::Status opened =
        read_only ? rocksdb::DB::OpenForReadOnly(options, dir + "/db", families, &handles_, &db)
                  : rocksdb::DB::Open(options, dir + "/db", families, &handles_, &db);
    if (opened.ok()) db_.reset(db);
  }
  ~RawDb() {
    if (db_ == nullptr) return;
    for (auto* h : handles_) (void)db_->DestroyColumnFamilyHandle(h);
  }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  rocksdb::DB* db() const { return db_.get(); }
  // The family named `name`, or null.
  rocksdb::ColumnFamilyHandle* family(const std::string& name) const {
    for (size_t i = 0; i < names_.size() && i < handles_.size(); ++i) {
      if (names_[i] == name) return handles_[i];
    }
    return nullptr;
  }

 private:
  std::vector<std::string> names_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::unique_ptr<rocksdb::DB> db_;
};

// Open-block pieces in the store at `dir` (closed) that belong to blocks
// already closed (their start is not after the series' closed-block
// cursor), read behind the store's back; -1 if it cannot be read.
int CountStalePieces(const std::string& dir) {
  RawDb raw(dir, /*read_only=*/true);
  rocksdb::ColumnFamilyHandle* open = raw.family("open");
  if (raw.db() == nullptr || open == nullptr) return -1;
  int stale = 0;
  // Keys: series id (4 bytes, big-endian) -> cursor whose first 8 bytes are
  // the last closed sample's time; id + piece time (8 bytes: its block's
  // start plus its number in ms, or in older data dirs its last sample's
  // or its first's) -> piece. Times are biased big-endian, so bytes
  // compare as times; a piece's time is never after its samples'.
  std::string cursor_id, cursor_last;
  std::unique_ptr<rocksdb::Iterator> it(raw.db()->NewIterator(rocksdb::ReadOptions(), open));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string key = it->key().ToString();
    if (key.size() == 4) {
      cursor_id = key;
      cursor_last = it->value().ToString().substr(0, 8);
    } else if (key.size() == 12 && key.substr(0, 4) == cursor_id &&
               key.substr(4) <= cursor_last) {
      ++stale;
    }
  }
  return stale;
}


// The key times (ms) of the open-block pieces of series `id` in the store
// at `dir` (closed), in order, read behind the store's back.
std::vector<int64_t> PieceKeyTimes(const std::string& dir, uint32_t id) {
  RawDb raw(dir, /*read_only=*/true);
  rocksdb::ColumnFamilyHandle* open = raw.family("open");
  if (raw.db() == nullptr || open == nullptr) {
    ADD_FAILURE() << "cannot open " << dir;
    return {};
  }
  std::string prefix;
  for (int shift = 24; shift >= 0; shift -= 8) prefix.push_back(static_cast<char>(id >> shift));
  std::vector<int64_t> times;
  std::unique_ptr<rocksdb::Iterator> it(raw.db()->NewIterator(rocksdb::ReadOptions(), open));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    if (it->key().size() != 12) continue;
    uint64_t biased = 0;
    for (int i = 4; i < 12; ++i) biased = biased << 8 | static_cast<uint8_t>(it->key()[i]);
    times.push_back(static_cast<int64_t>(biased ^ (uint64_t{1} << 63)));
  }
  return times;
}

// Open-block pieces of series `id` in the store at `dir` (closed).
int CountPieces(const std::string& dir, uint32_t id) {
  return static_cast<int>(PieceKeyTimes(dir, id).size());
}

// `v` as `bytes` big-endian bytes appended to `out`, as the store's keys.
void PutBE(std::string* out, uint64_t v, int bytes) {
  for (int s = 8 * (bytes - 1); s >= 0; s -= 8)
    out->push_back(static_cast<char>(v >> s));
}
// A time as key bytes compare: its sign bit flipped.
uint64_t Biased(int64_t v) { return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63); }

// Rewrites the open-block pieces of the store at `dir` (closed) behind its
// back: `edit(key, value)` returns the pieces to write instead (key ->
// value; empty to delete it). False if the database cannot be opened.
template <typename Edit>
bool EditPieces(const std::string& dir, Edit edit) {
  RawDb raw(dir, /*read_only=*/false);
  rocksdb::ColumnFamilyHandle* open = raw.family("open");
  if (raw.db() == nullptr || open == nullptr) return false;
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it(raw.db()->NewIterator(rocksdb::ReadOptions(), open));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != 12) continue;
    (void)batch.Delete(open, it->key());
    for (const auto& [key, value] : edit(it->key().ToString(), it->value().ToString()))
      (void)batch.Put(open, key, value);
  }
  it.reset();
  return raw.db()->Write(rocksdb::WriteOptions(), &batch).ok();
}

// The value series `s` holds at frame `f`.
double ValueAt(int s, int f) { return f % 13 == 0 ? NAN : (f * 7 + s) * 0.25; }

class RocksDbStoreTest : public ::testing::Test {
 protected:
  RocksDbStoreTest() { GTEST_FLAG_SET(death_test_style, "threadsafe"); }

  std::unique_ptr<SeriesStore> Open(RocksDbStoreOptions options) {
    auto store = OpenRocksDbStore(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  // SmallRocksOptions, blocks staggered as stagger_ says.
  RocksDbStoreOptions Options() {
    RocksDbStoreOptions options = SmallRocksOptions(&clock_, dir_.path());
    options.store.stagger_first_blocks = stagger_;
    return options;
  }
  std::unique_ptr<SeriesStore> Open() { return Open(Options()); }

  // Resolves kSeries series; ids are 0..kSeries-1.
  static std::vector<SeriesId> ResolveAll(SeriesStore* store) {
    std::vector<SeriesId> ids;
    for (int s = 0; s < kSeries; ++s)
      ids.push_back(*store->Resolve(Key("m", "n" + std::to_string(s))));
    return ids;
  }

  static absl::Status AppendFrameAt(SeriesStore* store, int f) {
    std::vector<SeriesId> ids;
    std::vector<double> values;
    for (int s = 0; s < kSeries; ++s) {
      ids.push_back(s);
      values.push_back(ValueAt(s, f));
    }
    FrameColumns frame{.ts = kT0 + f, .ids = ids, .values = values};
    return store->Append({&frame, 1}, nullptr);
  }

  // Number of frames stored: checks that every series holds exactly frames
  // 0..n-1 with the right values, the same n for all.
  static int StoredFrames(SeriesStore* store) {
    int n = -1;
    for (int s = 0; s < kSeries; ++s) {
      auto got = store->Query(s, 0, 1e10);
      EXPECT_TRUE(got.ok());
      if (n < 0) n = static_cast<int>(got->size());
      EXPECT_EQ(static_cast<int>(got->size()), n) << "series " << s;
      for (size_t f = 0; f < got->size(); ++f) {
        EXPECT_EQ((*got)[f].ts, kT0 + f);
        const double want = ValueAt(s, static_cast<int>(f));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan((*got)[f].value));
        } else {
          EXPECT_EQ((*got)[f].value, want) << "series " << s << " frame " << f;
        }
      }
    }
    return n;
  }

  // A fresh store: frames [0, flushed) appended and flushed, then
  // [flushed, end) appended and the store closed (closing checkpoints).
  void AppendAcrossTwoCheckpoints(int flushed, int end) {
    auto store = Open();
    ResolveAll(store.get());
    for (int f = 0; f < end; ++f) {
      if (f == flushed) ASSERT_TRUE(store->Flush().ok());
      ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
    }
  }

  // Frames the child acknowledged, from its ack file.
  int AckedFrames() const {
    std::ifstream in(dir_.path() + "/acks", std::ios::binary);
    int last = 0, v;
    while (in.read(reinterpret_cast<char*>(&v), sizeof v)) last = v;
    return last;
  }

  // Child side: append frames 0.. forever, recording each ack durably
  // (against a process kill) before the next append.
  [[noreturn]] static void AppendForever(SeriesStore* store,
                                         const std::string& dir) {
    const int fd = ::open((dir + "/acks").c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    for (int f = 0;; ++f) {
      if (!AppendFrameAt(store, f).ok()) _exit(3);
      const int acked = f + 1;
      if (::write(fd, &acked, sizeof acked) != sizeof acked) _exit(4);
    }
  }

  TestDir dir_;
  FakeClock clock_{kT0};
  // StoreOptions::stagger_first_blocks; off in tests that count on where
  // blocks end.
  bool stagger_ = true;
};

TEST_F(RocksDbStoreTest, ReopenKeepsEverything) {
  uint64_t last_seq;
  {
    auto store = Open();
    ResolveAll(store.get());
    for (int f = 0; f < 50; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
    last_seq = *store->AppendEvent(Event{.stream = "s", .ts = kT0, .seq = 0, .payload = "p"});
    ASSERT_TRUE(store->PutState("escalation", "state-1").ok());
  }
  auto store = Open();
  EXPECT_EQ(store->Stats().series, size_t{kSeries});
  EXPECT_EQ(*store->Key(3), Key("m", "n3"));
  EXPECT_EQ(*store->Resolve(Key("m", "n4")), 4u);
  EXPECT_EQ(*store->Resolve(Key("new")), size_t{kSeries});
  EXPECT_EQ(StoredFrames(store.get()), 50);
  // The series cursors survived: a resend is a duplicate.
  AppendResult r;
  std::vector<SeriesId> ids = {0};
  std::vector<double> v = {ValueAt(0, 49)};
  FrameColumns frame{.ts = kT0 + 49, .ids = ids, .values = v};
  ASSERT_TRUE(store->Append({&frame, 1}, &r).ok());
  EXPECT_EQ(r.duplicates, 1u);
  // Blocks continue where they stopped.
  for (int f = 50; f < 90; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  EXPECT_EQ(StoredFrames(store.get()), 90);
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(StoredFrames(store.get()), 90);
  EXPECT_EQ(store->Stats().frame_log_bytes, 8u);  // a fresh segment's header
  EXPECT_GT(store->Stats().bytes_on_disk, 0u);
  EXPECT_GT(*store->AppendEvent(Event{.stream = "s", .ts = kT0, .seq = 0, .payload = "q"}),
            last_seq);
  EXPECT_EQ(store->ListEvents("s", 0, 1e10, 10).size(), 2u);
  EXPECT_EQ(store->GetState("escalation").value_or(""), "state-1");
}

TEST_F(RocksDbStoreTest, SecondOpenOfTheSameDirFails) {
  auto store = Open();
  auto second = OpenRocksDbStore(Options());
  EXPECT_FALSE(second.ok());
}

TEST_F(RocksDbStoreTest, BadOptionsAreRejected) {
  RocksDbStoreOptions options = SmallRocksOptions(nullptr, dir_.path());
  EXPECT_EQ(OpenRocksDbStore(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = SmallRocksOptions(&clock_, "");
  EXPECT_EQ(OpenRocksDbStore(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = SmallRocksOptions(&clock_, dir_.path());
  options.store.block_samples = 0;
  EXPECT_EQ(OpenRocksDbStore(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RocksDbStoreTest, KilledProcessKeepsAckedSamples) {
  EXPECT_EXIT(
      {
        auto store = Open();
        ResolveAll(store.get());
        std::atomic<int> acked{0};
        // Kill the process from another thread while appends are running.
        std::thread killer([&] {
          while (acked.load() < 300) std::this_thread::yield();
          kill(getpid(), SIGKILL);
        });
        const int fd = ::open((dir_.path() + "/acks").c_str(),
                              O_WRONLY | O_CREAT | O_TRUNC, 0644);
        for (int f = 0;; ++f) {
          if (!AppendFrameAt(store.get(), f).ok()) _exit(3);
          const int n = f + 1;
          if (::write(fd, &n, sizeof n) != sizeof n) _exit(4);
          acked.store(n);
        }
      },
      ::testing::KilledBySignal(SIGKILL), "");
  const int acked = AckedFrames();
  ASSERT_GE(acked, 300);
  auto store = Open();
  const int stored = StoredFrames(store.get());
  EXPECT_GE(stored, acked);
  EXPECT_LE(stored, acked + 1);  // the append in flight may have made it
}

TEST_F(RocksDbStoreTest, TornFrameLogTailIsCutAndReported) {
  EXPECT_EXIT(
      {
        auto store = Open();
        ResolveAll(store.get());
        for (int f = 0; f < 40; ++f) {
          if (!AppendFrameAt(store.get(), f).ok()) _exit(3);
        }
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  // Cut the last record in half, as a crash during write() would.
  auto segments = ListFrameLogSegments(dir_.path());
  ASSERT_TRUE(segments.ok());
  ASSERT_FALSE(segments->empty());
  const std::string path = FrameLogSegmentPath(dir_.path(), segments->back());
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 30);
  {
    auto store = Open();
    EXPECT_EQ(StoredFrames(store.get()), 39);
    EXPECT_GT(store->Stats().frame_log_torn_bytes, 0u);
    ASSERT_TRUE(AppendFrameAt(store.get(), 39).ok());
  }
  auto store = Open();
  EXPECT_EQ(StoredFrames(store.get()), 40);
  EXPECT_EQ(store->Stats().frame_log_torn_bytes, 0u);
}

// A store closed cleanly has checkpointed everything into RocksDB and
// leaves one segment holding only its header. A server older than the
// version-2 log reads that header as a torn record and cuts the segment to
// nothing, which must lose nothing (docs/ARCHITECTURE.md, the frame log).
TEST_F(RocksDbStoreTest, AClosedStoreLeavesNothingInItsFrameLog) {
  {
    auto store = Open();
    ResolveAll(store.get());
    for (int f = 0; f < 40; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  }
  auto segments = ListFrameLogSegments(dir_.path());
  ASSERT_TRUE(segments.ok());
  ASSERT_EQ(segments->size(), 1u);
  const std::string path = FrameLogSegmentPath(dir_.path(), segments->front());
  auto replay = ReplayFrameLogSegment(
      path, /*truncate_torn=*/false,
      [](std::span<const FrameColumns>) { return absl::OkStatus(); });
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->records, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 8u);  // "VGFL", version
  std::filesystem::resize_file(path, 0);             // what an older server does
  auto store = Open();
  EXPECT_EQ(StoredFrames(store.get()), 40);
  EXPECT_EQ(store->Stats().frame_log_torn_bytes, 0u);
}

// A state value that cannot be written in full (the disk fills while a
// detection snapshot is written) leaves the last committed one whole, and
// the next one written once space returns replaces it.
TEST_F(RocksDbStoreTest, StateWrittenInPartsSurvivesAFullDisk) {
  auto fs = std::make_shared<FullDiskFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  RocksDbStoreOptions options = Options();
  options.env = env.get();
  const auto write = [](SeriesStore* store, const std::string& value) {
    auto writer = store->NewStateWriter("detection");
    if (!writer.ok()) return writer.status();
    if (absl::Status s = (*writer)->Append(value); !s.ok()) return s;
    return (*writer)->Commit();
  };
  {
    auto store = Open(options);
    ASSERT_TRUE(write(store.get(), "first").ok());
    fs->full = true;
    absl::Status refused = write(store.get(), "second");
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
    EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("disk full"));
    EXPECT_EQ(store->GetState("detection").value_or(""), "first");
    fs->full = false;
    ASSERT_TRUE(write(store.get(), "third").ok());
  }
  auto store = Open(options);
  EXPECT_EQ(store->GetState("detection").value_or(""), "third");
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/state"))
    files.push_back(e.path().filename().string());
  EXPECT_THAT(files, ::testing::ElementsAre("detection"));  // no temporary left
}

// A full disk under the database: the append whose closed block cannot be
// written still succeeds (its samples are in the frame log), later ones
// are refused with kUnavailable, and once space returns the store writes
// what it owed and accepts again - without a restart, nothing lost.
TEST_F(RocksDbStoreTest, DatabaseWriteErrorsRefuseAppendsUntilSpaceReturns) {
  stagger_ = false;  // counts on where blocks end
  auto fs = std::make_shared<FullDiskFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  RocksDbStoreOptions options = Options();
  options.env = env.get();
  options.maintenance_interval_seconds = 0.01;
  {
    auto store = Open(options);
    ResolveAll(store.get());
    int f = 0;
    for (; f < 10; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
    fs->full = true;
    absl::Status refused;
    while ((refused = AppendFrameAt(store.get(), f)).ok() && f < 100) ++f;
    EXPECT_EQ(f, 16);  // the 16th frame closed the first blocks
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
    EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("disk full"));
    EXPECT_EQ(store->Health().code(), absl::StatusCode::kUnavailable);
    EXPECT_GE(store->Stats().write_errors, 1u);
    // While the disk stays full, retries keep failing and nothing changes.
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_EQ(AppendFrameAt(store.get(), f).code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(store->Stats().recoveries, 0u);

    fs->full = false;
    ASSERT_TRUE(WaitFor([&] { return store->Health().ok(); }));
    EXPECT_EQ(store->Stats().recoveries, 1u);
    for (; f < 40; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
    EXPECT_EQ(StoredFrames(store.get()), 40);
  }
  auto store = Open();
  EXPECT_EQ(StoredFrames(store.get()), 40);
}

// A frame log that cannot grow (a full disk, here a file size limit)
// refuses that append alone, with nothing applied; the next append after
// the cause is gone is accepted and the store is healthy again.
TEST_F(RocksDbStoreTest, FrameLogWriteErrorsRefuseOnlyWhileTheyLast) {
  RocksDbStoreOptions options = Options();
  options.maintenance_interval_seconds = 3600;  // nothing else writes
  auto store = Open(options);
  ResolveAll(store.get());
  for (int f = 0; f < 5; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit limit = old_limit;
  limit.rlim_cur = store->Stats().frame_log_bytes;  // no file may grow
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  const absl::Status refused = AppendFrameAt(store.get(), 5);
  const absl::Status health = store->Health();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StoredFrames(store.get()), 5);  // nothing of frame 5 applied
  ASSERT_TRUE(AppendFrameAt(store.get(), 5).ok());
  EXPECT_TRUE(store->Health().ok());
  EXPECT_EQ(store->Stats().recoveries, 1u);
  EXPECT_EQ(StoredFrames(store.get()), 6);
  store.reset();
  store = Open();
  EXPECT_EQ(StoredFrames(store.get()), 6);
}

// A series that stops sending (its job ended, its node moved on) gives
// back its open block after idle_block_seconds: the block is written as a
// chunk and its checkpoint pieces deleted, its samples still answer
// queries, before and after a restart, and a series that comes back opens
// a new block. Series that keep sending keep theirs.
TEST_F(RocksDbStoreTest, IdleSeriesGiveBackTheirOpenBlocks) {
  stagger_ = false;  // blocks of 16: 10 frames leave every block open
  RocksDbStoreOptions options = Options();
  options.idle_block_seconds = 900;
  options.maintenance_interval_seconds = 0.005;
  options.frame_log_checkpoint_bytes = 100;  // pieces for the open blocks
  {
    auto store = Open(options);
    ResolveAll(store.get());
    for (int f = 0; f < 10; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
    ASSERT_TRUE(WaitFor([&] { return store->Stats().checkpoints > 1; }));
    clock_.Advance(61);  // a pass over the open blocks is due every 60 s
    ASSERT_TRUE(WaitFor([&] { return store->Stats().open_blocks == size_t{kSeries}; }));
    EXPECT_GT(store->Stats().open_block_bytes, 0u);
    // Series 0 goes on, one sample a minute; the others have stopped.
    std::vector<SeriesId> alive = {0};
    for (int minute = 1; minute <= 20; ++minute) {
      clock_.Advance(60);
      std::vector<double> v = {ValueAt(0, 9 + minute)};
      FrameColumns frame{.ts = kT0 + 9 + minute, .ids = alive, .values = v};
      ASSERT_TRUE(store->Append({&frame, 1}, nullptr).ok());
    }
    ASSERT_TRUE(WaitFor([&] { return store->Stats().idle_blocks_closed == kSeries - 1u; }))
        << store->Stats().idle_blocks_closed;
    ASSERT_TRUE(WaitFor([&] { return store->Stats().open_blocks == 1u; }));
    for (int s = 1; s < kSeries; ++s) {
      absl::StatusOr<std::vector<Sample>> got = store->Query(s, 0, 1e10);
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(got->size(), 10u) << "series " << s;
    }
    EXPECT_EQ(store->Query(0, 0, 1e10)->size(), 30u);
  }
  for (int s = 1; s < kSeries; ++s)
    EXPECT_EQ(CountPieces(dir_.path(), s), 0) << "series " << s << " kept its pieces";
  EXPECT_GT(CountPieces(dir_.path(), 0), 0);
  auto store = Open(options);
  for (int s = 1; s < kSeries; ++s) {
    absl::StatusOr<std::vector<Sample>> got = store->Query(s, 0, 1e10);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->size(), 10u) << "series " << s;
    for (int f = 0; f < 10; ++f) {
      EXPECT_EQ((*got)[f].ts, kT0 + f);
      if (!std::isnan(ValueAt(s, f))) EXPECT_EQ((*got)[f].value, ValueAt(s, f));
    }
  }
  // Series 1 comes back: a new block after the closed one; a resend of its
  // last sample before the pause is still a duplicate.
  std::vector<SeriesId> one = {1};
  std::vector<double> old_value = {ValueAt(1, 9)};
  FrameColumns resend{.ts = kT0 + 9, .ids = one, .values = old_value};
  AppendResult r;
  ASSERT_TRUE(store->Append({&resend, 1}, &r).ok());
  EXPECT_EQ(r.duplicates, 1u);
  std::vector<double> v = {42};
  FrameColumns back{.ts = kT0 + 2000, .ids = one, .values = v};
  ASSERT_TRUE(store->Append({&back, 1}, &r).ok());
  EXPECT_EQ(r.accepted, 1u);
  EXPECT_EQ(store->Query(1, 0, 1e10)->size(), 11u);
}

// An open block whose pieces cannot be read back (the disk under the
// database fails reads) stays open when it is due to close: its samples
// keep being appended, the store's health says why, queries of its series
// fail rather than answer short, and once reads work again it closes with
// every sample - nothing is lost.
TEST_F(RocksDbStoreTest, BlockWhosePiecesCannotBeReadStaysOpen) {
  stagger_ = false;  // counts on where blocks end
  auto fs = std::make_shared<UnreadableTablesFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  RocksDbStoreOptions options = Options();
  options.env = env.get();
  options.maintenance_interval_seconds = 0.01;
  AppendAcrossTwoCheckpoints(5, 10);  // frames 0-9 in two pieces a series
  // Opening loads the pieces (from table files: the database's log was
  // flushed as it opened, and the load leaves RocksDB's cache as it was)
  // and memory lets go of them. Nothing reads them before the disk fails.
  auto store = Open(options);
  ASSERT_NE(store, nullptr);
  fs->unreadable = true;
  int f = 10;
  for (; f < 20; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok()) << f;
  // The blocks were due to close at their 16th sample and could not.
  EXPECT_THAT(std::string(store->Health().message()), ::testing::HasSubstr("injected: unreadable"));
  absl::StatusOr<std::vector<Sample>> got = store->Query(0, kT0, kT0 + 100);
  EXPECT_FALSE(got.ok()) << "answered " << got->size() << " samples";
  fs->unreadable = false;
  ASSERT_TRUE(AppendFrameAt(store.get(), f++).ok());  // the blocks close
  EXPECT_EQ(StoredFrames(store.get()), 21);
  ASSERT_TRUE(WaitFor([&] { return store->Health().ok(); })) << store->Health();
  store.reset();
  for (int s = 0; s < kSeries; ++s) EXPECT_EQ(CountPieces(dir_.path(), s), 0) << s;
  store = Open(options);
  EXPECT_EQ(StoredFrames(store.get()), 21);
}

// With idle_block_seconds 0 open blocks stay open however long their
// series are quiet; a negative or non-finite value is refused.
TEST_F(RocksDbStoreTest, IdleBlocksCanBeKeptOpen) {
  RocksDbStoreOptions options = Options();
  options.idle_block_seconds = -1;
  EXPECT_EQ(OpenRocksDbStore(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.idle_block_seconds = NAN;
  EXPECT_EQ(OpenRocksDbStore(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.idle_block_seconds = 0;
  options.maintenance_interval_seconds = 0.005;
  auto store = Open(options);
  ResolveAll(store.get());
  for (int f = 0; f < 10; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  clock_.Advance(86400);
  ASSERT_TRUE(WaitFor([&] { return store->Stats().open_blocks == size_t{kSeries}; }));
  clock_.Advance(86400);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(store->Stats().idle_blocks_closed, 0u);
  EXPECT_EQ(store->Stats().open_blocks, size_t{kSeries});
}

// Once a checkpoint has written an open block's samples as pieces, memory
// lets go of them: the block is read back from its pieces and what memory
// still holds, for queries, for its close and across a reopen (which
// loads blocks whole from their pieces and lets go again), and holds less
// than the same block kept whole.
TEST_F(RocksDbStoreTest, OpenBlocksLetGoOfWhatCheckpointsWrote) {
  stagger_ = false;
  RocksDbStoreOptions options = Options();
  options.store.block_samples = 64;
  options.idle_block_seconds = 0;
  options.maintenance_interval_seconds = 0.005;
  // A checkpoint a frame: past the 8 bytes of a fresh segment's header.
  options.frame_log_checkpoint_bytes = 9;
  RocksDbStoreOptions whole = options;
  whole.frame_log_checkpoint_bytes = uint64_t{1} << 40;
  whole.data_dir = dir_.path() + "/whole";
  auto kept = Open(whole);
  ResolveAll(kept.get());
  // Open-block bytes of `store` and of `kept`, as counted by the pass due
  // every 60 s, are compared once both have counted.
  auto less_than_half_of_kept = [&](SeriesStore* store) {
    clock_.Advance(61);
    return WaitFor([&] {
      const StoreStats mine = store->Stats(), theirs = kept->Stats();
      return mine.open_blocks == size_t{kSeries} && theirs.open_blocks == size_t{kSeries} &&
             mine.open_block_bytes * 2 < theirs.open_block_bytes;
    });
  };
  {
    auto store = Open(options);
    ResolveAll(store.get());
    for (int f = 0; f < 40; ++f) {
      const uint64_t before = store->Stats().checkpoints;
      ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
      ASSERT_TRUE(AppendFrameAt(kept.get(), f).ok());
      ASSERT_TRUE(WaitFor([&] { return store->Stats().checkpoints > before; }));
    }
    EXPECT_TRUE(less_than_half_of_kept(store.get()))
        << store->Stats().open_block_bytes << " bytes against "
        << kept->Stats().open_block_bytes << " kept whole";
    EXPECT_GT(CountPieces(dir_.path(), 0), 1);
    EXPECT_EQ(StoredFrames(store.get()), 40);
    // Aggregates read the open block too.
    absl::StatusOr<std::vector<Aggregate>> minutes =
        store->QueryAggregate(1, kT0, kT0 + 40, 60);
    ASSERT_TRUE(minutes.ok()) << minutes.status();
    ASSERT_EQ(minutes->size(), 1u);
    EXPECT_EQ(minutes->front().count, 40u);
    for (int f = 40; f < 60; ++f) {
      ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
      ASSERT_TRUE(AppendFrameAt(kept.get(), f).ok());
    }
  }
  // Opening loads the open blocks whole from their pieces; the checkpoint
  // that ends it lets go of them again.
  auto store = Open(options);
  EXPECT_TRUE(less_than_half_of_kept(store.get()))
      << store->Stats().open_block_bytes << " bytes against "
      << kept->Stats().open_block_bytes << " kept whole";
  EXPECT_EQ(StoredFrames(store.get()), 60);
  // The blocks close at 64 and 128 samples, from their pieces and memory.
  for (int f = 60; f < 140; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  EXPECT_EQ(StoredFrames(store.get()), 140);
  store.reset();
  store = Open(options);
  EXPECT_EQ(StoredFrames(store.get()), 140);
}

// Checkpoints happen on the maintenance thread as the frame log grows.
TEST_F(RocksDbStoreTest, CheckpointsRunOffTheAppendPath) {
  RocksDbStoreOptions options = Options();
  options.frame_log_checkpoint_bytes = 400;  // ~10 frames
  std::atomic<int> committed = 0;
  std::atomic<bool> opened = false, on_append_thread = false;
  const std::thread::id self = std::this_thread::get_id();
  options.checkpoint_hook = [&](std::string_view step) {
    if (step != "committed" || !opened) return;  // opening checkpoints too
    ++committed;
    if (std::this_thread::get_id() == self) on_append_thread = true;
  };
  auto store = Open(options);
  opened = true;
  const int at_open = committed;
  ResolveAll(store.get());
  for (int f = 0; f < 100; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  ASSERT_TRUE(WaitFor([&] { return committed > at_open; }));
  EXPECT_FALSE(on_append_thread);
  EXPECT_GT(store->Stats().checkpoints, 0u);
  EXPECT_EQ(StoredFrames(store.get()), 100);
}

// The maintenance thread's checkpoint writes unlocked: an append made
// while it writes goes through, and the blocks it closes (whose pieces the
// checkpoint is writing) leave no piece behind; every frame is stored once.
TEST_F(RocksDbStoreTest, AppendsGoOnWhileACheckpointWrites) {
  RocksDbStoreOptions options = Options();
  options.frame_log_checkpoint_bytes = 400;  // ~10 frames
  std::atomic<bool> armed = false, hooked = false;
  std::atomic<int> appended_while_writing = 0;
  SeriesStore* target = nullptr;
  std::mutex append_mu;  // one appender at a time, frames in order
  int next_frame = 0;
  auto append_next = [&] {
    std::lock_guard<std::mutex> l(append_mu);
    const absl::Status s = AppendFrameAt(target, next_frame);
    if (s.ok()) ++next_frame;
    return s;
  };
  options.checkpoint_hook = [&](std::string_view step) {
    if (step != "writing" || !armed.exchange(false)) return;
    // Another thread appends 20 frames (a block is 16): each closes or
    // extends blocks the checkpoint holds pieces of.
    auto done = std::async(std::launch::async, [&] {
      for (int i = 0; i < 20; ++i) {
        if (!append_next().ok()) return;
        ++appended_while_writing;
      }
    });
    EXPECT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready)
        << "an append waited for the checkpoint's write";
    hooked = true;
  };
  auto store = Open(options);
  target = store.get();
  ResolveAll(store.get());
  for (int f = 0; f < 12; ++f) ASSERT_TRUE(append_next().ok());
  armed = true;
  while (armed) {
    ASSERT_TRUE(append_next().ok());
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(WaitFor([&] { return hooked.load(); }));
  EXPECT_EQ(appended_while_writing, 20);
  const int frames = next_frame;
  EXPECT_EQ(StoredFrames(store.get()), frames);
  store.reset();
  EXPECT_EQ(CountStalePieces(dir_.path()), 0)
      << "pieces of blocks closed during the checkpoint were left behind";
  store = Open();
  EXPECT_EQ(StoredFrames(store.get()), frames);
}

// A chunk that no longer decodes (bit rot, a bug) is skipped by queries,
// Series created together (a job's start) close their first blocks spread
// over one block's length, and keep their own phase after that and across
// a restart: closes per frame stay near series / block_samples instead of
// all series closing in one frame every block_samples frames.
TEST_F(RocksDbStoreTest, SeriesCreatedTogetherCloseTheirBlocksApart) {
  constexpr int kMany = 512;  // 32 closes per frame when spread evenly
  const auto append = [](SeriesStore* store, int f) {
    std::vector<SeriesId> ids;
    std::vector<double> values;
    for (int s = 0; s < kMany; ++s) {
      ids.push_back(s);
      values.push_back(s + 0.5 * f);
    }
    FrameColumns frame{.ts = kT0 + f, .ids = ids, .values = values};
    return store->Append({&frame, 1}, nullptr);
  };
  // The most blocks closed by one frame of [from, to).
  const auto most_closed = [&](SeriesStore* store, int from, int to) {
    uint64_t most = 0;
    for (int f = from; f < to; ++f) {
      const uint64_t before = store->Stats().chunks_flushed;
      EXPECT_TRUE(append(store, f).ok());
      most = std::max(most, store->Stats().chunks_flushed - before);
    }
    return most;
  };
  {
    auto store = Open();
    for (int s = 0; s < kMany; ++s)
      ASSERT_EQ(*store->Resolve(Key("m", "n" + std::to_string(s))), SeriesId(s));
    // Every series closed its first block within 16 frames...
    EXPECT_LE(most_closed(store.get(), 0, 16), 100u);
    EXPECT_GE(store->Stats().chunks_flushed, uint64_t{kMany});
    // ...and full blocks since, each in its own frame.
    EXPECT_LE(most_closed(store.get(), 16, 64), 100u);
  }
  auto store = Open();  // phases survive the restart
  EXPECT_LE(most_closed(store.get(), 64, 96), 100u);
  for (int s = 0; s < kMany; s += 37) {
    auto got = store->Query(s, 0, 1e10);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->size(), 96u) << "series " << s;
    EXPECT_EQ((*got)[95].value, s + 0.5 * 95);
  }
}

// and quarantined by retention instead of blocking it forever.
TEST_F(RocksDbStoreTest, CorruptChunksAreQuarantinedNotFatal) {
  stagger_ = false;  // counts on where blocks end
  {
    auto store = Open();
    ResolveAll(store.get());
    for (int f = 0; f < 100; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  }
  {  // Corrupt the first raw chunk behind the store's back.
    RawDb db(dir_.path(), /*read_only=*/false);
    rocksdb::ColumnFamilyHandle* raw = db.family("raw");
    ASSERT_NE(db.db(), nullptr);
    ASSERT_NE(raw, nullptr);
    std::unique_ptr<rocksdb::Iterator> it(db.db()->NewIterator(rocksdb::ReadOptions(), raw));
    it->SeekToFirst();
    ASSERT_TRUE(it->Valid());
    ASSERT_TRUE(db.db()->Put(rocksdb::WriteOptions(), raw, it->key(), "not a chunk").ok());
  }
  auto store = Open();
  // Series 0 lost its first block (16 frames); the others are intact.
  auto first = store->Query(0, 0, 1e10);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 100u - 16u);
  EXPECT_EQ(store->Query(1, 0, 1e10)->size(), 100u);
  EXPECT_GE(store->Stats().corrupt_chunks_skipped, 1u);
  clock_.Advance(30 * 86400.0);
  ASSERT_TRUE(store->EnforceRetention().ok());
  EXPECT_EQ(store->Stats().chunks_quarantined, 1u);
  auto rolled = store->QueryAggregate(1, kT0, kT0 + 3600, 3600);
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  ASSERT_EQ(rolled->size(), 1u);
  EXPECT_EQ((*rolled)[0].count, 100u);
  EXPECT_TRUE(store->Health().ok());
}

// Open blocks are checkpointed as records of the compressed bits since the
// previous piece (storage/compressed_samples.h). A data dir from before
// holds chunks, one per piece, keyed by their first sample: they still
// load, later records continue them, and closing the block deletes both.
TEST_F(RocksDbStoreTest, PiecesWrittenAsChunksStillLoad) {
  stagger_ = false;  // counts on where blocks end
  AppendAcrossTwoCheckpoints(5, 10);  // two pieces per series
  // Piece k of a block is keyed by the block's start plus k ms.
  const int64_t start_ms = static_cast<int64_t>(kT0 * 1000);
  EXPECT_EQ(PieceKeyTimes(dir_.path(), 0), (std::vector<int64_t>{start_ms, start_ms + 1}));
  std::map<std::string, CompressedSamples> rebuilt;  // by series id
  std::map<std::string, std::string> previous;      // by series id
  int pieces = 0;
  ASSERT_TRUE(EditPieces(dir_.path(), [&](const std::string& key, const std::string& value) {
    ++pieces;
    CompressedSamples& samples = rebuilt[key.substr(0, 4)];
    std::vector<int64_t> ts;
    std::vector<double> values;
    EXPECT_TRUE(samples.DecodeRecord(value, previous[key.substr(0, 4)], &ts, &values));
    previous[key.substr(0, 4)] = value;
    for (size_t i = 0; i < ts.size(); ++i) samples.Append(ts[i], values[i]);
    std::string old_key = key.substr(0, 4);
    PutBE(&old_key, Biased(ts.front()), 8);
    return std::vector<std::pair<std::string, std::string>>{
        {old_key, EncodeChunk(ts, values)}};
  }));
  EXPECT_EQ(pieces, 2 * kSeries);
  {
    auto store = Open();
    EXPECT_EQ(StoredFrames(store.get()), 10);
    EXPECT_EQ(store->Stats().chunks_quarantined, 0u);
    for (int f = 10; f < 13; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  }  // a record continues the chunks
  // Opening wrote the chunks again as one piece of the current format
  // under the block's first key; the piece the close wrote follows it.
  for (int s = 0; s < kSeries; ++s)
    EXPECT_EQ(PieceKeyTimes(dir_.path(), s), (std::vector<int64_t>{start_ms, start_ms + 1})) << s;
  {
    auto store = Open();
    EXPECT_EQ(StoredFrames(store.get()), 13);
    for (int f = 13; f < 40; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  }
  EXPECT_EQ(CountStalePieces(dir_.path()), 0);
  auto store = Open();
  EXPECT_EQ(StoredFrames(store.get()), 40);
  EXPECT_EQ(store->Stats().chunks_quarantined, 0u);
}

// A data dir from before decimal coding holds pieces of the XOR-only format
// (0x47): they load, each continuing from the XOR window of the one before,
// and the block goes on in the current format.
TEST_F(RocksDbStoreTest, PiecesOfTheXorFormatStillLoad) {
  stagger_ = false;
  AppendAcrossTwoCheckpoints(5, 10);
  std::vector<int64_t> want_ts;
  std::vector<double> want;
  XorFormatSamples(&want_ts, &want);
  // Series 0's pieces become the three old records (its samples at
  // kT0 + 1 .. 24 s); the frame log's frames of it are older and dropped.
  bool replaced = false;
  ASSERT_TRUE(EditPieces(dir_.path(), [&](const std::string& key, const std::string& value) {
    std::vector<std::pair<std::string, std::string>> out;
    std::string series0;
    PutBE(&series0, 0, 4);
    if (!key.starts_with(series0)) return decltype(out){{key, value}};
    if (replaced) return out;
    replaced = true;
    const std::vector<std::string> records = XorFormatRecords();
    const int64_t last_ms[] = {want_ts[7], want_ts[15], want_ts[23]};
    for (size_t i = 0; i < records.size(); ++i) {
      std::string piece_key;
      PutBE(&piece_key, 0, 4);
      PutBE(&piece_key, Biased(last_ms[i]), 8);
      out.emplace_back(piece_key, records[i]);
    }
    return out;
  }));
  ASSERT_TRUE(replaced);
  auto check = [&](SeriesStore* store, size_t n) {
    auto got = store->Query(0, kT0, kT0 + 100);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), n);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*got)[i].ts, want_ts[i] / 1000.0) << i;
      EXPECT_EQ(std::bit_cast<uint64_t>((*got)[i].value), std::bit_cast<uint64_t>(want[i])) << i;
    }
    EXPECT_EQ(store->Stats().chunks_quarantined, 0u);
  };
  {
    auto store = Open();
    check(store.get(), 24);
    ASSERT_TRUE(AppendFrameAt(store.get(), 30).ok());
  }  // a record of the current format continues the old ones
  auto store = Open();
  check(store.get(), 25);
}

// A damaged piece is set aside with the pieces that continue it; the other
// series and the blocks already closed are untouched, and the series
// carries on.
TEST_F(RocksDbStoreTest, DamagedPieceIsQuarantinedWithWhatContinuesIt) {
  stagger_ = false;  // counts on where blocks end
  // Series hold frames 0-15 closed, 16-19 and 20-23 in two pieces.
  AppendAcrossTwoCheckpoints(20, 24);
  std::string series2;
  PutBE(&series2, 2, 4);
  bool damaged = false;
  ASSERT_TRUE(EditPieces(dir_.path(), [&](const std::string& key, std::string value) {
    if (key.substr(0, 4) == series2 && !damaged) {
      // A payload byte (the last may be partly padding).
      value[value.size() - 5] = static_cast<char>(value[value.size() - 5] ^ 0xff);
      damaged = true;
    }
    return std::vector<std::pair<std::string, std::string>>{{key, value}};
  }));
  ASSERT_TRUE(damaged);
  auto store = Open();
  EXPECT_EQ(store->Stats().chunks_quarantined, 2u);
  EXPECT_EQ(store->Query(2, 0, 1e10)->size(), 16u);
  EXPECT_EQ(store->Query(1, 0, 1e10)->size(), 24u);
  AppendResult r;
  std::vector<SeriesId> ids = {2};
  std::vector<double> v = {1.5};
  FrameColumns frame{.ts = kT0 + 30, .ids = ids, .values = v};
  ASSERT_TRUE(store->Append({&frame, 1}, &r).ok());
  EXPECT_EQ(r.accepted, 1u);
  EXPECT_EQ(store->Query(2, 0, 1e10)->size(), 17u);
}

// The series index and the frame log are synced apart, so after a power
// loss the log can hold a record naming a series the index lost: its
// sample is skipped and counted, the rest replayed, and the store opens.
TEST_F(RocksDbStoreTest, ReplaySkipsSeriesTheIndexLost) {
  {
    auto store = Open();
    ResolveAll(store.get());
    for (int f = 0; f < 5; ++f) ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  }
  auto segments = ListFrameLogSegments(dir_.path());
  ASSERT_TRUE(segments.ok() && !segments->empty());
  {
    auto writer = FrameLogWriter::Create(FrameLogSegmentPath(dir_.path(), segments->back()));
    ASSERT_TRUE(writer.ok()) << writer.status();
    std::vector<SeriesId> ids = {0, 1, 2, 3, 4, kSeries + 7};
    std::vector<double> values;
    for (int s = 0; s < kSeries; ++s) values.push_back(ValueAt(s, 5));
    values.push_back(1.0);
    FrameColumns frame{.ts = kT0 + 5, .ids = ids, .values = values};
    ASSERT_TRUE((*writer)->Append({&frame, 1}, true).ok());
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(StoredFrames(store.get()), 6);
  EXPECT_EQ(store->Stats().frame_log_unknown_samples, 1u);
}

// A crash at each step of the n-th checkpoint loses and duplicates nothing.
class CheckpointCrashTest
    : public RocksDbStoreTest,
      public ::testing::WithParamInterface<std::tuple<const char*, int>> {
 protected:
  // Child side: appends with frequent checkpoints and _exit()s at `step` of
  // checkpoint number `nth`.
  [[noreturn]] void CrashAt(std::string step, int nth) {
    RocksDbStoreOptions options = Options();
    options.frame_log_checkpoint_bytes = 400;  // ~10 frames
    int calls = 0;
    options.checkpoint_hook = [&](std::string_view s) {
      // Call 1 of each step is the checkpoint made when opening.
      if (s == step && ++calls == nth + 1) _exit(0);
    };
    auto store = Open(options);
    ResolveAll(store.get());
    AppendForever(store.get(), dir_.path());
  }
};

TEST_P(CheckpointCrashTest, NoSampleLostOrDuplicated) {
  const auto [step, nth] = GetParam();
  EXPECT_EXIT(CrashAt(step, nth), ::testing::ExitedWithCode(0), "");
  const int acked = AckedFrames();
  ASSERT_GT(acked, 0);
  auto store = Open();
  const int stored = StoredFrames(store.get());
  EXPECT_GE(stored, acked);
  EXPECT_LE(stored, acked + 1);
  // And it keeps working across another clean reopen.
  for (int f = stored; f < stored + 30; ++f)
    ASSERT_TRUE(AppendFrameAt(store.get(), f).ok());
  store.reset();
  store = Open();
  EXPECT_EQ(StoredFrames(store.get()), stored + 30);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, CheckpointCrashTest,
    ::testing::Combine(::testing::Values("rotated", "writing", "committed"),
                       ::testing::Values(1, 2, 5)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" +
             std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace vigil::testing
