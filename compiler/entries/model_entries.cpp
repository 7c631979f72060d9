#include "compiler/entries/model_entries.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cache/file_digests.h"
#include "compiler/entries/background_stores.h"
#include "compiler/entries/entry_layout.h"
#include "compiler/entries/graph_file.h"
#include "compiler/entries/remote_entries.h"
#include "runtime/engine/default_engine.h"
#include "runtime/engine/parallel_for.h"
#include "runtime/io/safetensors.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

constexpr const char* kGraphFile = "graph.json";
constexpr const char* kConstantsFile = "constants.safetensors";

}  // namespace

std::unique_ptr<ModelEntries> ModelEntries::open_default() {
  const char* env = std::getenv("KILN_CACHE");
  if (env && std::string(env) == "0") return nullptr;
  install_entry_layout();  // lookups (and the remote tier) know what a model entry holds
  try {
    return std::make_unique<ModelEntries>(CacheStore::open(cache_root()));
  } catch (const Error& e) {
    if (debug_level() >= 2) log_line(std::string("cache: models not cached: ") + e.what());
    return nullptr;
  }
}

std::optional<Graph> ModelEntries::find(const KeyComponents& source) {
  const std::string key = artifact_key(source);
  wait_for_background_store(key);
  LookupResult r = store_->lookup(key, true);
  if (!r.entry) r.entry = fetch_from_remote(*store_, key);  // another machine may have it
  if (!r.entry) return std::nullopt;
  try {
    const Safetensors constants = read_safetensors(r.entry->file(kConstantsFile));
    Graph g = graph_from_files(read_file(r.entry->file(kGraphFile)), constants,
                               r.entry->file(kGraphFile).string());
    if (debug_level() >= 2) log_line("cache: model hit " + r.entry->dir.string());
    return g;
  } catch (const UserError& e) {
    // An op this process does not know (an op library not loaded) is no fault of the entry.
    const std::string why = e.what();
    if (why.find("unknown op") != std::string::npos) {
      if (debug_level() >= 2) log_line("cache: model entry not usable here: " + why);
      return std::nullopt;
    }
    r.entry.reset();
    store_->discard_bad(key, "model: " + why);
    return std::nullopt;
  }
}

void ModelEntries::put(const KeyComponents& source, const Graph& graph) {
  if (!store_->publish_blocker().empty()) return;
  const std::string key = artifact_key(source);
  std::optional<GraphFiles> files;
  try {
    if (store_->lookup(key, false).entry) return;  // another process stored it first
    files = graph_files(graph);
    if (!files) return;
    // Stored only if it comes back exactly: what a hit returns must be what the importer gave.
    const Safetensors round_trip{files->tensors, {}};
    if (!same_graph(graph, graph_from_files(files->structure, round_trip, "model entry"))) {
      if (debug_level() >= 1)
        log_line("cache: model '" + graph.name() + "' not stored: it does not come back the same");
      return;
    }
  } catch (const Error& e) {
    warn(std::string("could not store the model in the cache: ") + e.what());
    return;
  }
  EntryMeta meta;
  meta.key = key;
  meta.label = graph.name();
  meta.family = kModelFamily;
  meta.summary = std::to_string(graph.nodes().size()) + " nodes, " +
                 std::to_string(files->tensors.size()) + " constants";
  meta.created = unix_now();
  meta.components = source;
  meta.files = {FileRecord{kGraphFile, 0, ""}, FileRecord{kConstantsFile, 0, ""}};
  // The tensors share the graph's (immutable) values; the store keeps the cache open.
  store_in_background(
      key, [store = store_, files = std::move(*files), meta = std::move(meta)]() mutable {
        const auto start = Clock::now();
        try {
          WorkFolder staging = store->new_staging(meta.key);
          write_file_atomic(staging.path() / kGraphFile, files.structure,
                            store->access().file_mode(), true);
          add_value_digests(files);
          write_safetensors(staging.path() / kConstantsFile, files.tensors, files.digests);
          const std::string label = meta.label;
          upload_to_remote(*store, store->publish(std::move(staging), std::move(meta)));
          if (debug_level() >= 1)
            log_line("cache: stored model '" + label + "' in " + format_double(ms_since(start)) +
                     " ms (behind the compile)");
        } catch (const std::exception& e) {
          warn(std::string("could not store the model in the cache: ") + e.what());
        }
      });
}

std::string ModelEntries::content_digest(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError("cannot open '" + path.string() + "': " + std::strerror(errno));
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw UserError("cannot read '" + path.string() + "': not a regular file");
  const FileDigests memo(*store_);
  if (std::optional<std::string> known = memo.find("content", path, fd, st)) return *known;
  constexpr size_t kChunk = size_t{4} << 20;
  const auto size = static_cast<size_t>(st.st_size);
  const size_t chunks = (size + kChunk - 1) / kChunk;
  std::vector<std::array<uint8_t, 32>> digests(chunks);
  std::vector<std::string> errors(chunks);
  const auto hash_chunk = [&](int part) {
    const size_t at = static_cast<size_t>(part) * kChunk;
    const size_t n = std::min(kChunk, size - at);
    // One buffer per thread, reused: fresh 4 MiB buffers per chunk cost more in page faults
    // than the hashing.
    thread_local std::vector<char> buf;
    if (buf.size() < kChunk) buf.resize(kChunk);
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        errors[static_cast<size_t>(part)] = r < 0 ? std::strerror(errno) : "it shrank";
        return;
      }
      got += static_cast<size_t>(r);
    }
    Sha256 h;
    h.update(buf.data(), n);
    digests[static_cast<size_t>(part)] = h.digest();
  };
  if (chunks >= 4) {  // a small file hashes faster than the workers wake
    parallel_for(default_engine(), static_cast<int>(chunks), hash_chunk, "file digest");
  } else if (chunks == 1) {
    hash_chunk(0);
  }
  for (const auto& e : errors)
    if (!e.empty()) throw UserError("cannot read '" + path.string() + "': " + e);
  Sha256 h;
  h.update("kiln-file-v1 " + std::to_string(size) + "\n");
  for (const auto& d : digests) h.update(d.data(), d.size());
  std::string digest = h.hex_digest();
  memo.remember("content", path, fd, st, digest);
  return digest;
}

}  // namespace kiln
