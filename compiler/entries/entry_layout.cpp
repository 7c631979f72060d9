#include "compiler/entries/entry_layout.h"

#include "cache/cache_store.h"
#include "compiler/backend.h"

namespace kiln {

std::vector<std::string> module_entry_files(const std::string& device_unit,
                                            const std::vector<std::string>& device_images) {
  std::vector<std::string> files{"module.so", "module.c", "plan"};
  if (!device_unit.empty()) {
    files.push_back(device_unit);
    files.insert(files.end(), device_images.begin(), device_images.end());
  }
  return files;
}

std::vector<std::string> kernel_entry_files() { return {"kernel.o", "kernel.c"}; }

std::string entry_layout(const EntryMeta& meta) {
  if (meta.family == kKernelFamily) return missing_or_extra_files(meta, kernel_entry_files());
  if (meta.family == kPreparedFamily) return missing_or_extra_files(meta, {"prepared.safetensors"});
  if (meta.family == kModelFamily)
    return missing_or_extra_files(meta, {"graph.json", "constants.safetensors"});
  // The "device" component: the backend's name, then " device_io" where it applies.
  std::string device;
  for (const auto& [name, value] : meta.components) {
    if (name == "device") device = value.substr(0, value.find(' '));
  }
  const Backend* backend = find_backend(device);
  if (!backend || backend->is_host()) return missing_or_extra_files(meta, module_entry_files());
  // A device module holds the device unit and one of the backend's image layouts.
  std::string problem;
  for (const auto& images : backend->image_layouts()) {
    problem = missing_or_extra_files(meta, module_entry_files(backend->unit_name(), images));
    if (problem.empty()) return "";
  }
  return problem;
}

void install_entry_layout() { set_entry_layout_rule(&entry_layout); }

}  // namespace kiln
