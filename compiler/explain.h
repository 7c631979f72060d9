#pragma once
// Why a compile missed the cache: the nearest entry for the same graph (same structure, or
// the same model name) and which key components differ — the toolchain, a flag, an op's
// version, a dtype, a prop.
#include <string>

#include "cache/cache_store.h"
#include "compiler/graph_key.h"

namespace kiln {

std::string explain_miss(CacheStore& store, const ModuleKey& key, const std::string& label);

// The differences between two key-component lists, one line each ("toolchain.flags: ...").
std::vector<std::string> component_differences(const KeyComponents& here,
                                               const KeyComponents& entry);

}  // namespace kiln
