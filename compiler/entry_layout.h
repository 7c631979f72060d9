#pragma once
// The files of the cache entries the compiler publishes — a module (module.so, module.c,
// plan; with CUDA, kernels.cu and the device image) or a kernel object (kernel.o, kernel.c) —
// and the rule every verification applies (cache/entry_meta.h): an entry lists exactly the
// files of its kind, or it is a bad entry, quarantined and rebuilt instead of a hit that fails.
#include <string>
#include <vector>

#include "cache/entry_meta.h"

namespace kiln {

// A module entry's files; `cuda_outputs` are the CUDA toolchain's device files (none on CPU).
std::vector<std::string> module_entry_files(const std::vector<std::string>& cuda_outputs);
std::vector<std::string> kernel_entry_files();
// "" when meta lists exactly the files of its kind (by its family and its "device" key
// component, both covered by the key and the signature); otherwise what is wrong.
std::string entry_layout(const EntryMeta& meta);
// Registers entry_layout with the cache (idempotent; every compile and cache command calls it).
void install_entry_layout();

}  // namespace kiln
