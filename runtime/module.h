#pragma once
// A loaded native module: dlopen + the kiln_module() table + its state struct.
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/module_abi.h"

namespace kiln {

class KernelImage;

class Module {
 public:
  // Loads `path`, checks the ABI version and runs the module's state initialisation.
  static std::shared_ptr<Module> load(const std::filesystem::path& path);
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
  void* handle_ = nullptr;
  const kiln_module_info* info_ = nullptr;
  void* state_ = nullptr;
  std::shared_ptr<KernelImage> kernels_;
  bool initialised_ = false;
  std::filesystem::path path_;
};

}  // namespace kiln
