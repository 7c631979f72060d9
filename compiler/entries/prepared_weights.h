#pragma once
// Prepared weights as cache entries of their own, so a cache hit in a fresh process maps them
// instead of preparing them again (folding, packing, re-laying out: seconds for a ResNet).
// An entry (family "prepared") holds prepared.safetensors: the values of the preparation steps
// a module's program reads, for one module key and one set of given weights. Its key hashes
// the module key and a digest of the weights the plan prepares from, so an entry made for other
// weights is another key; it is verified, signed, quarantined and evicted like every entry, and
// its tensors must have the types the plan expects (a mismatch is a bad entry, rebuilt).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_store.h"
#include "compiler/module_plan.h"

namespace kiln {

// SHA-256 over the index, dtype, shape and content digest (compiler/value_digest.h) of every
// given constant the plan's preparation reads (ModulePlan::prepared_from), in order.
std::string weights_digest(const ModulePlan& plan, const Graph& given);

class PreparedWeights {
 public:
  PreparedWeights(std::shared_ptr<CacheStore> store, std::string module_key);
  // The prepared values from the cache (views of the mapped file; steps the program does not
  // read are left empty), or nullopt on a miss or a bad entry (quarantined, with a warning).
  std::optional<std::vector<Tensor>> find(const ModulePlan& plan, const std::string& digest);
  // Stores what preparation gave for these weights, written behind the caller
  // (compiler/entries/background_stores.h); a failure costs a warning, never the compile.
  void put(const ModulePlan& plan, const std::string& digest, const std::vector<Tensor>& prepared);
  // The entry's key.
  std::string key(const std::string& digest) const;

 private:
  KeyComponents components(const std::string& digest) const;
  std::shared_ptr<CacheStore> store_;
  std::string module_key_;
};

}  // namespace kiln
