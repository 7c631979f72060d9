#pragma once
// Content digests of tensor values, hashed at memory speed: each value's bytes in 1 MiB chunks
// on all cores, then SHA-256 over its size and its chunks' digests in order. They identify a
// model's weights (prepared weights are found by them) and travel with an imported model's
// cache entry, so a model loaded from the cache is never hashed again.
#include <string>
#include <vector>

#include "graph/graph.h"
#include "runtime/tensor.h"

namespace kiln {

// The digest of each value's bytes (contiguous copies of strided views), in order; on the
// calling thread alone unless `all_cores` and there are 16 MiB or more to hash.
std::vector<std::string> value_digests(const std::vector<Tensor>& values, bool all_cores = true);
// The digest of a constant's value: its known_digest while that still holds, else hashed.
std::string constant_digest(const Variable& constant);
// constant_digest of several constants, hashing the unknown ones together on all cores.
std::vector<std::string> constant_digests(const std::vector<const Variable*>& constants);
// Hashes the graph's constants that have no known_digest yet (together, on all cores) and
// keeps each digest as its known_digest: a model just imported is then hashed once, for its
// cache entry and its prepared weights alike.
void remember_constant_digests(const Graph& graph);

}  // namespace kiln
