// The cache layer on its own: locks, entry metadata, the SQLite index and the store
// (publish, verify, quarantine, eviction, reindex). No graphs, no compiler.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/cache_index.h"
#include "cache/cache_store.h"
#include "cache/entry_meta.h"
#include "cache/file_lock.h"
#include "tests/helpers.h"
#include "util/fs.h"
#include "util/quantity.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::temp_dir;

TEST(FileLock, ExclusiveExcludesSharedShares) {
  fs::path p = fs::path(temp_dir("lock1")) / "k.lock";
  {
    FileLock ex = FileLock::acquire(p, FileLock::Mode::kExclusive);
    EXPECT_FALSE(FileLock::try_acquire(p, FileLock::Mode::kExclusive));
    EXPECT_FALSE(FileLock::try_acquire(p, FileLock::Mode::kShared));
  }
  FileLock a = FileLock::acquire(p, FileLock::Mode::kShared);
  auto b = FileLock::try_acquire(p, FileLock::Mode::kShared);
  EXPECT_TRUE(b);
  EXPECT_FALSE(FileLock::try_acquire(p, FileLock::Mode::kExclusive));
  a.release();
  b->release();
  EXPECT_TRUE(FileLock::try_acquire(p, FileLock::Mode::kExclusive));
}

TEST(FileLock, HolderKilledBySigkillReleasesIt) {
  fs::path p = fs::path(temp_dir("lock2")) / "k.lock";
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FileLock held = FileLock::acquire(p, FileLock::Mode::kExclusive);
    char c = 'x';
    if (::write(pipe_fds[1], &c, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(pipe_fds[0], &c, 1), 1);
  EXPECT_FALSE(FileLock::try_acquire(p, FileLock::Mode::kExclusive));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_TRUE(FileLock::try_acquire(p, FileLock::Mode::kExclusive));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(FileLock, WaiterNeverHoldsAnUnlinkedFile) {
  fs::path p = fs::path(temp_dir("lock3")) / "k.lock";
  FileLock first = FileLock::acquire(p, FileLock::Mode::kExclusive);
  std::optional<FileLock> second;
  std::thread waiter([&] { second.emplace(FileLock::acquire(p, FileLock::Mode::kExclusive)); });
  // Release only once the kernel shows the waiter blocked on this very file (a "->" line in
  // /proc/locks): an explicit condition, bounded, that fails loudly, not a sleep.
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  const std::string inode = ":" + std::to_string(st.st_ino) + " ";
  bool blocked = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!blocked && std::chrono::steady_clock::now() < deadline) {
    std::ifstream locks("/proc/locks");
    for (std::string line; std::getline(locks, line);)
      blocked = blocked ||
                (line.find("->") != std::string::npos && line.find(inode) != std::string::npos);
    if (!blocked) std::this_thread::yield();
  }
  if (!blocked) {
    first.release();
    waiter.join();
    FAIL() << "the waiter never blocked on " << p;
  }
  first.unlink_and_release();
  waiter.join();
  ASSERT_TRUE(second);
  // The waiter's lock guards the file the path names now, so a third locker conflicts.
  EXPECT_TRUE(fs::exists(p));
  EXPECT_FALSE(FileLock::try_acquire(p, FileLock::Mode::kExclusive));
}

EntryMeta sample_meta(const std::string& tag) {
  EntryMeta m;
  m.components = {{"abi", "1"}, {"graph", "node 0 relu " + tag + "\nnode 1 exp\n"}};
  m.key = artifact_key(m.components);
  m.label = "model-" + tag;
  m.family = "fam";
  m.summary = "2 nodes";
  m.created = 1700000000.5;
  m.compile_ms = 123.5;
  m.files = {{"module.so", 10, std::string(64, 'a')}, {"module.c", 20, std::string(64, 'b')}};
  return m;
}

TEST(EntryMeta, RoundTripsAndRejectsGarbage) {
  EntryMeta m = sample_meta("x");
  EntryMeta back = EntryMeta::parse(m.to_json(), "meta.json");
  EXPECT_EQ(back.key, m.key);
  EXPECT_EQ(back.components, m.components);
  EXPECT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.file("module.c")->size, 20u);
  EXPECT_DOUBLE_EQ(back.compile_ms, 123.5);

  std::string json = m.to_json();
  EXPECT_NE(error_of([&] {
              EntryMeta::parse(json.substr(0, json.size() / 2), "m");
            }).find("m: not valid JSON at byte"),
            std::string::npos);
  std::string forged = json;
  forged.replace(forged.find("relu"), 4, "tanh");  // components no longer hash to the key
  EXPECT_NE(error_of([&] { EntryMeta::parse(forged, "m"); }).find("do not hash to the entry's key"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              EntryMeta::parse(R"({"format": 1, "key": "k"})", "m");
            }).find("missing or mistyped"),
            std::string::npos);
  m.files[0].name = "../escape";
  EXPECT_NE(error_of([&] { EntryMeta::parse(m.to_json(), "m"); }).find("bad file record"),
            std::string::npos);
  // Found by fuzz_cache_meta: a number no type holds is the JSON library's out_of_range,
  // which used to escape as a foreign exception.
  EXPECT_NE(error_of([&] {
              EntryMeta::parse(R"({"format": 1e92247, "key": "k"})", "m");
            }).find("m: not valid JSON: "),
            std::string::npos);
  // Found by fuzz_cache_meta: numbers of the wrong kind where integers belong (converting
  // 7.7e90 to an integer is undefined behaviour).
  EXPECT_NE(error_of([&] {
              EntryMeta::parse(R"({"format": 7.7e90, "key": "k"})", "m");
            }).find("m: unknown format"),
            std::string::npos);
  m.files[0].name = "module.so";
  std::string sized = m.to_json();
  const size_t at = sized.find(':', sized.find("\"size\"")) + 1;
  sized.replace(at, sized.find_first_of(",}", at) - at, "7.7e90");
  EXPECT_NE(error_of([&] { EntryMeta::parse(sized, "m"); }).find("a file size is not"),
            std::string::npos);
}

TEST(EntryMeta, ArtifactKeyIsOrderedAndCollisionFree) {
  EXPECT_NE(artifact_key({{"a", "bc"}}), artifact_key({{"ab", "c"}}));
  EXPECT_NE(artifact_key({{"a", "1"}, {"b", "2"}}), artifact_key({{"b", "2"}, {"a", "1"}}));
  EXPECT_EQ(artifact_key({{"a", "1"}}), artifact_key({{"a", "1"}}));
  EXPECT_EQ(artifact_key({{"a", "1"}}).size(), 64u);
}

TEST(CacheIndex, RowsHitsCountersAndOrder) {
  CacheIndex index(fs::path(temp_dir("index1")) / "index.sqlite", 10000);
  for (int i = 0; i < 5; ++i) {
    IndexRow r;
    r.key = std::string(63, 'a') + char('0' + i);
    r.label = "m" + std::to_string(i);
    r.family = i < 3 ? "f1" : "f2";
    r.size = 100 * (i + 1);
    r.created = r.last_used = 1000 + i;
    r.compile_ms = 10;
    index.put(r);
  }
  auto row = index.find(std::string(63, 'a') + '2');
  ASSERT_TRUE(row);
  EXPECT_EQ(row->label, "m2");
  EXPECT_EQ(row->size, 300u);
  EXPECT_FALSE(index.find("nope"));
  index.record_hit(std::string(63, 'a') + '0', 5000);  // now the most recent
  index.record_miss();
  auto lru = index.list(CacheIndex::Order::kLeastRecent);
  ASSERT_EQ(lru.size(), 5u);
  EXPECT_EQ(lru.front().key.back(), '1');
  EXPECT_EQ(lru.back().key.back(), '0');
  EXPECT_EQ(lru.back().hits, 1);
  EXPECT_EQ(index.with_family("f1").size(), 3u);
  EXPECT_EQ(index.with_label("m4").size(), 1u);
  EXPECT_EQ(index.keys_with_prefix(std::string(63, 'a') + '3').size(), 1u);
  EXPECT_EQ(index.keys_with_prefix("aaaa").size(), 5u);
  IndexTotals t = index.totals();
  EXPECT_EQ(t.entries, 5);
  EXPECT_EQ(t.bytes, 1500u);
  EXPECT_EQ(t.hits, 1);
  EXPECT_EQ(t.misses, 1);
  EXPECT_DOUBLE_EQ(t.saved_ms, 10);
  index.replace_all({lru.front()});
  EXPECT_EQ(index.totals().entries, 1);
  EXPECT_EQ(index.totals().hits, 1);  // counters survive a reindex
}

// Publishes an entry whose files hold `payload`.
CacheEntry publish(CacheStore& store, const std::string& tag,
                   const std::string& payload = "module bytes") {
  EntryMeta m = sample_meta(tag);
  WorkFolder staging = store.new_staging(m.key);
  write_file_atomic(staging.path() / "module.so", payload);
  write_file_atomic(staging.path() / "module.c", "int x; /* " + tag + " */");
  return store.publish(std::move(staging), m);
}

TEST(CacheStore, PublishThenVerifiedHit) {
  auto store = CacheStore::open(temp_dir("store1"));
  CacheEntry e = publish(*store, "a");
  EXPECT_TRUE(fs::exists(e.file("module.so")));
  EXPECT_TRUE(fs::exists(e.file("meta.json")));
  EXPECT_EQ(e.dir, store->entry_dir(e.meta.key));
  EXPECT_EQ(e.meta.file("module.so")->size, 12u);
  EXPECT_TRUE(fs::is_empty(store->root() / "staging"));
  LookupResult r = store->lookup(e.meta.key, true);
  ASSERT_TRUE(r.entry);
  EXPECT_EQ(r.entry->meta.file("module.so")->sha256, e.meta.file("module.so")->sha256);
  EXPECT_FALSE(store->lookup(std::string(64, 'f'), true).entry);
  IndexTotals t = store->stats();
  EXPECT_EQ(t.entries, 1);
  EXPECT_EQ(t.compiles, 1);
  EXPECT_EQ(t.hits, 1);
}

struct Damage {
  const char* name;
  void (*apply)(const fs::path& dir);
  const char* problem;
};

void PrintTo(const Damage& d, std::ostream* os) { *os << d.name; }

void truncate_module(const fs::path& dir) { fs::resize_file(dir / "module.so", 5); }
void flip_bit(const fs::path& dir) {
  std::string bytes = read_file(dir / "module.so");
  bytes[3] ^= 0x10;
  std::ofstream(dir / "module.so", std::ios::binary | std::ios::trunc) << bytes;
}
void remove_source(const fs::path& dir) { fs::remove(dir / "module.c"); }
void garble_meta(const fs::path& dir) {
  std::string meta = read_file(dir / "meta.json");
  std::ofstream(dir / "meta.json", std::ios::binary | std::ios::trunc)
      << meta.substr(0, meta.size() / 3);
}
void remove_meta(const fs::path& dir) { fs::remove(dir / "meta.json"); }

class DamagedEntry : public ::testing::TestWithParam<Damage> {};

TEST_P(DamagedEntry, IsReportedThenQuarantinedNeverHandedOut) {
  const Damage& d = GetParam();
  auto store = CacheStore::open(temp_dir(std::string("damage-") + d.name));
  CacheEntry e = publish(*store, d.name);
  const std::string key = e.meta.key;
  e.pin.reset();
  d.apply(e.dir);
  LookupResult seen = store->lookup(key, false);  // without the key lock: report only
  EXPECT_FALSE(seen.entry);
  EXPECT_NE(seen.problem.find(d.problem), std::string::npos) << seen.problem;
  EXPECT_TRUE(fs::exists(e.dir));

  ::testing::internal::CaptureStderr();
  LookupResult moved = store->lookup(key, true);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(moved.entry);
  EXPECT_NE(err.find("cache entry " + key + " failed verification"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(e.dir));
  int quarantined = 0;
  for (const auto& q : fs::directory_iterator(store->root() / "quarantine")) {
    ++quarantined;
    EXPECT_NE(read_file(q.path() / "reason.txt").find(d.problem), std::string::npos);
  }
  EXPECT_EQ(quarantined, 1);
  EXPECT_FALSE(store->row(key));
  // A fresh publish of the same key works and hits.
  publish(*store, d.name);
  EXPECT_TRUE(store->lookup(key, true).entry);
}

INSTANTIATE_TEST_SUITE_P(AllDamage, DamagedEntry,
                         ::testing::Values(Damage{"truncated", truncate_module,
                                                  "module.so is 5 bytes, meta.json says 12"},
                                           Damage{"bitflip", flip_bit,
                                                  "module.so does not match its SHA-256"},
                                           Damage{"missing", remove_source, "module.c is missing"},
                                           Damage{"garbled", garble_meta, "not valid JSON"},
                                           Damage{"nometa", remove_meta, "meta.json is missing"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CacheStore, GcEvictsLeastRecentlyUsedButNeverAPinnedEntry) {
  auto store = CacheStore::open(temp_dir("gc1"));
  CacheEntry a = publish(*store, "a");
  CacheEntry b = publish(*store, "b");
  CacheEntry c = publish(*store, "c");
  const uint64_t one = store->row(a.meta.key)->size;
  b.pin.reset();
  c.pin.reset();
  // Use order a, b, c: a is the least recently used, and it stays pinned.
  for (const auto* e : {&a, &b, &c}) {
    LookupResult r = store->lookup(e->meta.key, false);
    ASSERT_TRUE(r.entry);
  }
  GcReport r = store->gc(3 * one, std::nullopt);
  EXPECT_EQ(r.removed, 0);
  r = store->gc(one, std::nullopt);
  EXPECT_EQ(r.removed, 2);
  EXPECT_EQ(r.in_use, std::vector<std::string>{a.meta.key});
  EXPECT_TRUE(fs::exists(a.dir));
  EXPECT_FALSE(fs::exists(b.dir));
  EXPECT_FALSE(fs::exists(c.dir));
  EXPECT_EQ(store->stats().entries, 1);
  a.pin.reset();
  EXPECT_EQ(store->gc(std::nullopt, 3600.0).removed, 0);  // used a moment ago
  EXPECT_EQ(store->gc(std::nullopt, 0.0).removed, 1);
  EXPECT_FALSE(fs::exists(a.dir));
}

TEST(CacheStore, SizeCapIsEnforcedAfterPublish) {
  auto store = CacheStore::open(temp_dir("cap"));
  CacheEntry first = publish(*store, "first");
  const uint64_t one = store->row(first.meta.key)->size;
  first.pin.reset();
  ::setenv("KILN_CACHE_MAX_SIZE", std::to_string(2 * one + one / 2).c_str(), 1);
  for (const char* tag : {"second", "third", "fourth"}) {
    publish(*store, tag);  // each returned pin is dropped at once
  }
  ::unsetenv("KILN_CACHE_MAX_SIZE");
  IndexTotals t = store->stats();
  EXPECT_EQ(t.entries, 2);
  EXPECT_LE(t.bytes, 2 * one + one / 2);
  EXPECT_FALSE(fs::exists(first.dir));  // the oldest went first
}

TEST(CacheStore, ReindexRebuildsTheIndexFromObjectsAlone) {
  fs::path root = temp_dir("reindex");
  std::string ka, kb;
  {
    auto store = CacheStore::open(root);
    ka = publish(*store, "a").meta.key;
    kb = publish(*store, "b").meta.key;
  }
  for (const char* f : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"})
    fs::remove(root / f);
  auto store = CacheStore::open(root);  // the old instance's index file is gone: a new one
  EXPECT_EQ(store->stats().entries, 0);
  EXPECT_EQ(store->reindex(), 2);
  EXPECT_TRUE(store->row(ka));
  EXPECT_TRUE(store->row(kb));
  EXPECT_EQ(store->row(ka)->label, "model-a");
}

TEST(CacheStore, CorruptIndexIsMovedAsideAndRebuilt) {
  fs::path good = temp_dir("corrupt-src");
  std::string key = publish(*CacheStore::open(good), "a").meta.key;
  fs::path root = temp_dir("corrupt-index");
  fs::copy(good / "objects", root / "objects", fs::copy_options::recursive);
  write_file_atomic(root / "index.sqlite", std::string(4096, 'Z'));
  ::testing::internal::CaptureStderr();
  auto store = CacheStore::open(root);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rebuilt it from objects/"), std::string::npos) << err;
  EXPECT_TRUE(store->row(key));
  EXPECT_TRUE(store->lookup(key, true).entry);
}

TEST(CacheStore, VerifyAllQuarantinesOnlyBadEntries) {
  auto store = CacheStore::open(temp_dir("verify"));
  CacheEntry good = publish(*store, "good");
  CacheEntry bad = publish(*store, "bad");
  bad.pin.reset();  // a bad entry some process has loaded stays where it is (see below)
  flip_bit(bad.dir);
  ::testing::internal::CaptureStderr();
  VerifyReport r = store->verify_all();
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.good, 1);
  ASSERT_EQ(r.bad.size(), 1u);
  EXPECT_NE(r.bad[0].find(bad.meta.key), std::string::npos);
  EXPECT_TRUE(fs::exists(good.dir));
  EXPECT_FALSE(fs::exists(bad.dir));
}

// A file's change time must be older than the stamping margin before a stamp is taken.
void let_stamps_settle() { std::this_thread::sleep_for(std::chrono::milliseconds(80)); }

// Flips a bit of module.so, then puts its modification time back: only the change time (which
// nobody can set) and the bytes tell.
void flip_bit_keep_mtime(const fs::path& dir) {
  struct stat before {};
  ASSERT_EQ(::stat((dir / "module.so").c_str(), &before), 0);
  flip_bit(dir);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir / "module.so").c_str(), times, 0), 0);
}

TEST(CacheStore, StampedFilesAreNotHashedAgainUntilTheyChange) {
  auto store = CacheStore::open(temp_dir("stamps"));
  CacheEntry e = publish(*store, "stamped");
  const std::string key = e.meta.key;
  e.pin.reset();
  let_stamps_settle();
  LookupResult first = store->lookup(key, true);
  ASSERT_TRUE(first.entry);
  EXPECT_EQ(first.files_hashed, 2);  // module.so and module.c, then stamped
  EXPECT_TRUE(fs::exists(e.dir / ".stamps"));
  first.entry.reset();
  LookupResult second = store->lookup(key, true);
  ASSERT_TRUE(second.entry);
  EXPECT_EQ(second.files_hashed, 0);
  // A full check (kiln cache verify) hashes every byte whatever the stamps say.
  second.entry.reset();
  EXPECT_EQ(store->lookup(key, true, CacheStore::Hashing::kFull).files_hashed, 2);
  // Stamps that are not stamps are ignored, never trusted.
  std::ofstream(e.dir / ".stamps", std::ios::trunc) << "module.so\tnot a stamp\nmodule.c\n";
  EXPECT_EQ(store->lookup(key, true).files_hashed, 2);
}

TEST(CacheStore, ADamagedFileIsCaughtThroughItsStamp) {
  auto store = CacheStore::open(temp_dir("stamps-damage"));
  CacheEntry e = publish(*store, "damaged");
  const std::string key = e.meta.key;
  e.pin.reset();
  let_stamps_settle();
  ASSERT_EQ(store->lookup(key, true).files_hashed, 2);
  ASSERT_EQ(store->lookup(key, true).files_hashed, 0);
  flip_bit_keep_mtime(e.dir);
  LookupResult seen = store->lookup(key, false);
  EXPECT_FALSE(seen.entry);
  EXPECT_NE(seen.problem.find("module.so does not match its SHA-256"), std::string::npos)
      << seen.problem;
}

TEST(CacheStore, ASharedCacheHashesEveryLookup) {
  // Where others may write files, a stamp proves nothing: it could have been written with them.
  ::setenv("KILN_CACHE_UMASK", "002", 1);
  auto store = CacheStore::open(temp_dir("stamps-shared"));
  ::unsetenv("KILN_CACHE_UMASK");
  ASSERT_TRUE(store->access().shared());
  CacheEntry e = publish(*store, "shared");
  const std::string key = e.meta.key;
  e.pin.reset();
  let_stamps_settle();
  EXPECT_EQ(store->lookup(key, true).files_hashed, 2);
  EXPECT_EQ(store->lookup(key, true).files_hashed, 2);
  EXPECT_FALSE(fs::exists(e.dir / ".stamps"));
}

TEST(CacheStore, GcSweepsWhatDeadProcessesLeft) {
  auto store = CacheStore::open(temp_dir("sweep"));
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);  // a pid that is certainly gone
  fs::create_directories(store->root() / "staging" / ("abcd." + std::to_string(pid) + ".0"));
  WorkFolder live = store->new_staging(std::string(64, 'e'));  // ours: alive, kept
  GcReport r = store->gc(std::nullopt, std::nullopt, true);
  EXPECT_EQ(r.swept, 1);
  EXPECT_TRUE(fs::exists(live.path()));
}

TEST(CacheLimits, SizesAndAges) {
  EXPECT_EQ(parse_size("2G", "x"), uint64_t{2} << 30);
  EXPECT_EQ(parse_size("500MiB", "x"), uint64_t{500} << 20);
  EXPECT_EQ(parse_size("64k", "x"), uint64_t{64} << 10);
  EXPECT_EQ(parse_size("1000", "x"), 1000u);
  EXPECT_NE(error_of([] { parse_size("0", "x"); }).find("too small"), std::string::npos);
  EXPECT_EQ(error_of([] { parse_size("lots", "--max-size"); }),
            "--max-size: 'lots' is not a size (examples: 2G, 500MiB, 64k, 1000000; at least 1 "
            "bytes, at most 2^63)");
  EXPECT_NE(error_of([] { parse_size("5Q", "KILN_CACHE_MAX_SIZE"); }).find("KILN_CACHE_MAX_SIZE"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(parse_duration("7d", "x", 0, 1e9), 7 * 86400);
  EXPECT_DOUBLE_EQ(parse_duration("12h", "x", 0, 1e9), 12 * 3600);
  EXPECT_DOUBLE_EQ(parse_duration("90", "x", 0, 1e9), 90);
  EXPECT_DOUBLE_EQ(parse_duration("250ms", "x", 0, 1e9), 0.25);
  EXPECT_NE(error_of([] {
              parse_duration("7 days", "--max-age", 0, 1e9);
            }).find("--max-age: '7 days' is not a duration"),
            std::string::npos);
  EXPECT_EQ(format_size(1536), "1.5 KiB");
}

}  // namespace
}  // namespace kiln
