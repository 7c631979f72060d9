#include "compiler/entry_layout.h"

#include "cache/cache_store.h"

namespace kiln {

std::vector<std::string> module_entry_files(const std::vector<std::string>& cuda_outputs) {
  std::vector<std::string> files{"module.so", "module.c", "plan"};
  if (!cuda_outputs.empty()) {
    files.push_back("kernels.cu");
    files.insert(files.end(), cuda_outputs.begin(), cuda_outputs.end());
  }
  return files;
}

std::vector<std::string> kernel_entry_files() { return {"kernel.o", "kernel.c"}; }

std::string entry_layout(const EntryMeta& meta) {
  if (meta.family == kKernelFamily) return missing_or_extra_files(meta, kernel_entry_files());
  if (meta.family == kPreparedFamily) return missing_or_extra_files(meta, {"prepared.safetensors"});
  if (meta.family == kModelFamily)
    return missing_or_extra_files(meta, {"graph.json", "constants.safetensors"});
  std::string device;
  for (const auto& [name, value] : meta.components) {
    if (name == "device") device = value;
  }
  if (device.rfind("cuda", 0) != 0) return missing_or_extra_files(meta, module_entry_files({}));
  // The device image is the emulator's library or a cubin with its PTX.
  const std::string emulated = missing_or_extra_files(meta, module_entry_files({"kernels.emu.so"}));
  if (emulated.empty()) return "";
  const std::string gpu =
      missing_or_extra_files(meta, module_entry_files({"kernels.cubin", "kernels.ptx"}));
  return gpu.empty() ? "" : gpu;
}

void install_entry_layout() { set_entry_layout_rule(&entry_layout); }

}  // namespace kiln
