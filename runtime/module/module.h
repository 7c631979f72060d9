#pragma once
// A loaded native module: dlopen + the kiln_module() table + its state struct.
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/module/module_abi.h"

namespace kiln {

class KernelImage;

class Module {
 public:
  // Loads `path`, checks the ABI version and runs the module's state initialisation.
  static std::shared_ptr<Module> load(const std::filesystem::path& path);
  // A module linked into this process (an exported library): its entry point called the
  // same way; `name` stands for the path in errors. CPU modules only.
  static std::shared_ptr<Module> from_entry(kiln_module_fn entry, const std::string& name);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const kiln_module_info& info() const { return *info_; }
  void* state() const { return state_; }
  const std::filesystem::path& path() const { return path_; }
  // The module's device kernels (nullptr when it has none).
  KernelImage* kernels() const { return kernels_.get(); }

 private:
  Module() = default;
  void start(kiln_module_fn entry);  // the entry's table, ABI check, state init
  void* handle_ = nullptr;
  const kiln_module_info* info_ = nullptr;
  void* state_ = nullptr;
  std::shared_ptr<KernelImage> kernels_;
  bool initialised_ = false;
  std::filesystem::path path_;
};

}  // namespace kiln
