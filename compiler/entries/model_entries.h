#pragma once
// A model as its importer left it, as a cache entry of its own (family "model": graph.json and
// constants.safetensors; compiler/entries/graph_file.h), so a fresh process that loads a model it
// has seen maps its weights instead of parsing and copying them (for a ResNet, ~150 ms of a cache
// hit). The key is what the caller says identifies the import (the model file's content digest and
// the fingerprint of the importer's code); the entry is verified, signed, quarantined and evicted
// like every entry. A graph that does not come back exactly the same (graph_file.h's self-check
// when it is stored) is never stored.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cache/cache_store.h"
#include "cache/entry_meta.h"
#include "graph/graph.h"

namespace kiln {

class ModelEntries {
 public:
  // The entries of this user's cache (KILN_CACHE_DIR...), or null where the cache is off
  // (KILN_CACHE=0) or cannot be opened (then models load as they always did).
  static std::unique_ptr<ModelEntries> open_default();
  explicit ModelEntries(std::shared_ptr<CacheStore> store) : store_(std::move(store)) {}

  // The stored graph (constants map the entry's file), or nullopt on a miss or a bad entry
  // (quarantined, with a warning).
  std::optional<Graph> find(const KeyComponents& source);
  // Stores `graph`: checked here, written and published behind the caller
  // (compiler/entries/background_stores.h). A failure costs a warning, never the load.
  void put(const KeyComponents& source, const Graph& graph);
  // The SHA-256 tree digest of a model file's bytes (4 MiB chunks hashed on all cores, then
  // their digests in order), remembered by the file's stamp in a private cache
  // (cache/file_digests.h), so an unchanged file is not read again. Throws UserError naming
  // the file when it cannot be read.
  std::string content_digest(const std::filesystem::path& path);

 private:
  std::shared_ptr<CacheStore> store_;
};

}  // namespace kiln
