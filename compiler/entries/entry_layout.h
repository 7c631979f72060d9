#pragma once
// The files of the cache entries the compiler publishes — a module (module.so, module.c,
// plan; with a device, its unit and image, e.g. kernels.cu and kernels.cubin) or a kernel object
// (kernel.o, kernel.c) — and the rule every verification applies (cache/entry_meta.h): an entry
// lists exactly the files of its kind, or it is a bad entry, quarantined and rebuilt instead of a
// hit that fails.
#include <string>
#include <vector>

#include "cache/entry_meta.h"

namespace kiln {

// A module entry's files: with a device unit (a backend's kernels.cu), the unit and the images
// its toolchain built beside it.
std::vector<std::string> module_entry_files(const std::string& device_unit = "",
                                            const std::vector<std::string>& device_images = {});
std::vector<std::string> kernel_entry_files();
// "" when meta lists exactly the files of its kind (by its family and its "device" key
// component, both covered by the key and the signature); otherwise what is wrong.
std::string entry_layout(const EntryMeta& meta);
// Registers entry_layout with the cache (idempotent; every compile and cache command calls it).
void install_entry_layout();

}  // namespace kiln
