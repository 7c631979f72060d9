// kiln cache SUBCOMMAND: inspect and maintain the kernel cache.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "cache/cache_store.h"
#include "cache/entry_signature.h"
#include "cli/cache_remote.h"
#include "cli/commands.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/quantity.h"
#include "util/strings.h"

namespace kiln::cli {

namespace {

const char* kSubcommands =
    "ls, show, stats, verify, gc, clear, reindex, remote, push, pull, keygen";

std::string age_text(double then) {
  const double s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      then;
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof buf, "%.0fm", s / 60);
  } else if (s < 172800) {
    std::snprintf(buf, sizeof buf, "%.0fh", s / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%.0fd", s / 86400);
  }
  return buf;
}

std::string resolve_key(CacheStore& store, const std::string& prefix) {
  if (prefix.size() < 4) throw UsageError{"kiln cache show: give at least 4 characters of the key"};
  for (char c : prefix) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      throw UserError("'" + prefix + "' is not a cache key or key prefix (lowercase hex)");
    }
  }
  auto keys = store.resolve_prefix(prefix);
  // Rows are only as trustworthy as the index file: a key that is not a key is never used.
  std::erase_if(keys, [](const std::string& k) { return !is_cache_key(k); });
  if (keys.empty()) {
    throw UserError("no cache entry with key '" + prefix + "' in " + store.root().string());
  }
  if (keys.size() > 1 && keys[0] != prefix) {
    throw UserError("key prefix '" + prefix + "' is ambiguous: " + join(keys, ", "));
  }
  return keys[0];
}

// Needs no cache folder: a key pair is made once and handed to writers and readers.
int keygen(const std::string& name, const std::string& out_dir) {
  auto [secret, pub] = generate_key_pair(name);
  const std::filesystem::path dir = out_dir.empty() ? "." : out_dir;
  const auto secret_file = dir / (name + ".secret"), public_file = dir / (name + ".public");
  std::error_code ec;
  for (const auto& f : {secret_file, public_file}) {
    if (std::filesystem::exists(f, ec)) {
      throw UserError("'" + f.string() + "' exists; not overwriting a key");
    }
  }
  make_dirs(dir, 0700);
  write_file_atomic(secret_file, secret + "\n", 0600, true);
  write_file_atomic(public_file, pub + "\n", 0644, true);
  std::printf("secret key %s (KILN_CACHE_SIGNING_KEY)\npublic key %s: %s\n", secret_file.c_str(),
              public_file.c_str(), pub.c_str());
  return 0;
}

// Kernel objects, prepared weight sets and imported models are named by hash: summed up, not
// listed.
void list(CacheStore& store) {
  auto rows = store.list();
  struct Tally {
    const char* family;
    const char* what;
    size_t count = 0;
    uint64_t bytes = 0;
  };
  Tally tallies[] = {{kKernelFamily, "kernel objects"},
                     {kPreparedFamily, "prepared weight sets"},
                     {kModelFamily, "imported models"}};
  std::erase_if(rows, [&](const IndexRow& r) {
    for (Tally& t : tallies) {
      if (r.family == t.family) {
        ++t.count;
        t.bytes += r.size;
        return true;
      }
    }
    return false;
  });
  std::printf("%-16s  %-20s %10s %6s %6s %6s\n", "KEY", "MODEL", "SIZE", "AGE", "USED", "HITS");
  for (const auto& r : rows) {
    std::printf("%-16s  %-20s %10s %6s %6s %6lld\n", r.key.substr(0, 16).c_str(),
                terminal_line(r.label.substr(0, 20)).c_str(), format_size(r.size).c_str(),
                age_text(r.created).c_str(), age_text(r.last_used).c_str(),
                static_cast<long long>(r.hits));
  }
  std::printf("%zu entries", rows.size());
  for (const Tally& t : tallies) {
    if (t.count) std::printf(" (and %zu %s, %s)", t.count, t.what, format_size(t.bytes).c_str());
  }
  std::printf("\n");
}

void show(CacheStore& store, const std::string& prefix) {
  const std::string key = resolve_key(store, prefix);
  auto meta = store.read_meta(key);
  if (!meta) {
    throw UserError("cache entry " + key + " has no readable meta.json (run 'kiln cache verify')");
  }
  std::printf(
      "key        %s\nmodel      %s\nsummary    %s\ncreated    %s ago\ncompile    %.1f ms\n",
      key.c_str(), terminal_line(meta->label).c_str(), terminal_line(meta->summary).c_str(),
      age_text(meta->created).c_str(), meta->compile_ms);
  if (auto r = store.row(key)) {
    std::printf("hits       %lld (last used %s ago)\n", static_cast<long long>(r->hits),
                age_text(r->last_used).c_str());
  }
  std::printf("folder     %s\nsource     %s\nfiles\n", store.entry_dir(key).c_str(),
              (store.entry_dir(key) / (meta->file("kernel.c") ? "kernel.c" : "module.c")).c_str());
  for (const auto& f : meta->files) {
    std::printf("  %-10s %10llu bytes  sha256 %s\n", f.name.c_str(),
                static_cast<unsigned long long>(f.size), f.sha256.c_str());
  }
  std::printf("key components\n");
  for (const auto& [name, value] : meta->components) {
    if (value.find('\n') == std::string::npos) {
      std::printf("  %-18s %s\n", terminal_line(name).c_str(), terminal_line(value).c_str());
      continue;
    }
    std::printf("  %s:\n", terminal_line(name).c_str());
    for (const auto& line : split_lines(value))
      std::printf("    %s\n", terminal_line(line).c_str());
  }
}

void stats(CacheStore& store) {
  auto t = store.stats();
  const double lookups = static_cast<double>(t.hits + t.misses);
  std::printf(
      "cache      %s\nentries    %lld\nbytes      %llu (%s; cap %s)\nhits       %lld\nmisses     "
      "%lld\nhit rate   %.1f%%\ncompiles   %lld\nsaved      %.1f s of compile time\n",
      store.root().c_str(), static_cast<long long>(t.entries - t.kernels - t.prepared - t.models),
      static_cast<unsigned long long>(t.bytes), format_size(t.bytes).c_str(),
      format_size(CacheStore::default_max_size()).c_str(), static_cast<long long>(t.hits),
      static_cast<long long>(t.misses),
      lookups > 0 ? 100.0 * static_cast<double>(t.hits) / lookups : 0.0,
      static_cast<long long>(t.compiles), t.saved_ms / 1000.0);
  if (t.kernels || t.kernel_hits || t.kernel_compiles) {
    std::printf("kernels    %lld objects (%s), %lld reused, %lld compiled, %.1f s saved\n",
                static_cast<long long>(t.kernels), format_size(t.kernel_bytes).c_str(),
                static_cast<long long>(t.kernel_hits), static_cast<long long>(t.kernel_compiles),
                t.kernel_saved_ms / 1000.0);
  }
  if (t.prepared || t.prepared_hits || t.prepared_stores) {
    std::printf("prepared   %lld weight sets (%s), %lld reused, %lld stored\n",
                static_cast<long long>(t.prepared), format_size(t.prepared_bytes).c_str(),
                static_cast<long long>(t.prepared_hits), static_cast<long long>(t.prepared_stores));
  }
  if (t.models || t.model_hits || t.model_stores) {
    std::printf("models     %lld imported (%s), %lld reused, %lld stored\n",
                static_cast<long long>(t.models), format_size(t.model_bytes).c_str(),
                static_cast<long long>(t.model_hits), static_cast<long long>(t.model_stores));
  }
  if (std::getenv("KILN_REMOTE_CACHE") || t.remote_hits || t.remote_misses || t.remote_errors) {
    std::printf(
        "remote     %lld hits, %lld misses, %lld rejected, %lld errors, %lld uploads, %s moved\n",
        static_cast<long long>(t.remote_hits), static_cast<long long>(t.remote_misses),
        static_cast<long long>(t.remote_rejects), static_cast<long long>(t.remote_errors),
        static_cast<long long>(t.remote_uploads),
        format_size(static_cast<uint64_t>(t.remote_bytes)).c_str());
    for (const auto& [name, r] : t.remotes) {
      std::printf("  %-40s %lld hits, %lld misses, %lld rejected, %lld errors, %lld uploads, %s\n",
                  name.c_str(), static_cast<long long>(r.hits), static_cast<long long>(r.misses),
                  static_cast<long long>(r.rejects), static_cast<long long>(r.errors),
                  static_cast<long long>(r.uploads),
                  format_size(static_cast<uint64_t>(r.bytes)).c_str());
    }
  }
}

void print_gc(const GcReport& r) {
  std::printf("removed %d entries (%s)", r.removed, format_size(r.removed_bytes).c_str());
  if (!r.in_use.empty()) std::printf("; kept %zu in use by a live process", r.in_use.size());
  if (r.swept) std::printf("; cleaned %d leftovers", r.swept);
  std::printf("\n");
  for (const auto& k : r.in_use) std::printf("in use  %s\n", k.c_str());
}

int run(const CommandLine& line) {
  const std::vector<std::string>& args = line.positional();
  if (args.empty())
    throw UsageError{std::string("kiln cache: missing subcommand (") + kSubcommands + ")"};
  const std::string& sub = args[0];
  // Each flag belongs to one subcommand.
  for (const auto& [flag, owner] :
       {std::pair{"--max-size", "gc"}, {"--max-age", "gc"}, {"--out", "keygen"}}) {
    if (line.has(flag) && sub != owner) {
      throw UsageError{std::string(flag) + " belongs to 'kiln cache " + owner +
                       "', not 'kiln cache " + sub + "'"};
    }
  }
  if (sub == "remote" || sub == "push" || sub == "pull") return run_cache_remote(args);
  static const std::vector<std::string> known{"ls", "show",  "stats",   "verify",
                                              "gc", "clear", "reindex", "keygen"};
  if (std::find(known.begin(), known.end(), sub) == known.end()) {
    throw UsageError{"kiln cache: unknown subcommand '" + sub + "' (" + kSubcommands + ")"};
  }
  const size_t want_args = sub == "show" || sub == "keygen" ? 2 : 1;
  if (args.size() != want_args) {
    throw UsageError{sub == "show" ? "kiln cache show: expected one KEY"
                     : sub == "keygen"
                         ? "kiln cache keygen: expected NAME (and --out DIR)"
                         : "kiln cache " + sub + ": unexpected argument '" + args.back() + "'"};
  }
  if (sub == "keygen") return keygen(args[1], line.value("--out"));
  auto store = CacheStore::open(cache_root());
  store->set_patient(true);  // maintenance may wait for a busy index; compiles never do
  if (sub == "ls") {
    list(*store);
  } else if (sub == "show") {
    show(*store, args[1]);
  } else if (sub == "stats") {
    stats(*store);
  } else if (sub == "verify") {
    auto r = store->verify_all();
    for (const auto& b : r.bad) std::printf("bad  %s\n", b.c_str());
    std::printf("%d entries good, %zu bad (moved to %s)\n", r.good, r.bad.size(),
                (store->root() / "quarantine").c_str());
    return r.bad.empty() ? 0 : 1;
  } else if (sub == "gc") {
    std::optional<uint64_t> size = CacheStore::default_max_size();
    std::optional<double> age;
    if (line.has("--max-size")) size = parse_size(line.value("--max-size"), "--max-size");
    // 0 is an age: "unused for any time at all".
    if (line.has("--max-age")) {
      age = parse_duration(line.value("--max-age"), "--max-age", 0, 100 * 365 * 86400.0);
    }
    print_gc(store->gc(size, age, true));
  } else if (sub == "clear") {
    print_gc(store->clear());
  } else {
    std::printf("indexed %d entries from %s\n", store->reindex(),
                (store->root() / "objects").c_str());
  }
  return 0;
}

}  // namespace

const Command& cache_command() {
  static const Command c{
      "cache",
      "SUBCOMMAND",
      "inspect and maintain the kernel cache (kiln help cache)",
      "Inspects and maintains the kernel cache:\n"
      "  ls                 every entry: key, model, size, age, hits (most recently used first)\n"
      "  show KEY           an entry's meta, key components and source path (KEY may be a\n"
      "                     prefix)\n"
      "  stats              entries, bytes, hits, misses, hit rate, compile time saved\n"
      "  verify             check every entry's files (size, SHA-256); bad ones go to\n"
      "                     quarantine/ (exit 1 if any was bad)\n"
      "  gc [--max-size SIZE] [--max-age AGE]\n"
      "                     remove least-recently-used entries until the cache fits SIZE\n"
      "                     (default KILN_CACHE_MAX_SIZE or 2G) and none is unused for longer\n"
      "                     than AGE (e.g. 7d, 12h); entries loaded by a live process are kept\n"
      "  clear              remove every entry not in use, quarantine/, failed/ and abandoned\n"
      "                     scratch folders (folders a live process works in stay)\n"
      "  reindex            rebuild index.sqlite from objects/\n"
      "  remote status      the remote tier (KILN_REMOTE_CACHE): reachable? namespace,\n"
      "                     entries, trusted keys, whether this process may write (exit 1 if\n"
      "                     unreachable)\n"
      "  push [KEY...]      upload local entries (all when no KEY), signed with\n"
      "                     KILN_CACHE_SIGNING_KEY\n"
      "  pull KEY...        fetch entries from the remote tier, verify and store them locally\n"
      "  keygen NAME [--out DIR]\n"
      "                     make an Ed25519 key pair for signing entries: DIR/NAME.secret\n"
      "                     (mode 0600; for KILN_CACHE_SIGNING_KEY) and DIR/NAME.public (one\n"
      "                     line NAME:base64; for KILN_CACHE_TRUSTED_KEYS)\n",
      {{"--max-size", "", "SIZE", "gc: the size to fit (2G, 500MiB, 64k, ...)"},
       {"--max-age", "", "AGE", "gc: the longest an entry may stay unused (7d, 12h, ...)"},
       {"--out", "", "DIR", "keygen: where the key pair is written (default .)"}},
      "The cache lives in $KILN_CACHE_DIR (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln).\n"
      "It is private to its owner unless KILN_CACHE_UMASK (e.g. 002) shares it with a group;\n"
      "see docs/cache.md, \"Security model\".\n",
      run};
  return c;
}

}  // namespace kiln::cli
