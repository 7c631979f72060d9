#include "runtime/module/module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "runtime/device/device.h"
#include "runtime/exec/thunk_context.h"
#include "runtime/support/support.h"
#include "util/error.h"

namespace kiln {

std::shared_ptr<Module> Module::load(const std::filesystem::path& path) {
  std::shared_ptr<Module> m(new Module());
  m->path_ = path;
  m->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!m->handle_) {
    const char* err = ::dlerror();
    throw UserError("cannot load module '" + path.string() + "': " + (err ? err : "unknown"));
  }
  auto fn = reinterpret_cast<kiln_module_fn>(::dlsym(m->handle_, "kiln_module"));
  if (!fn) throw UserError("'" + path.string() + "' is not a kiln module (no kiln_module symbol)");
  m->start(fn);
  if (m->info_->n_kernels > 0) {
    // The device kernels sit beside the host module, in the image the device runs.
    Device& device = accelerator();
    std::vector<std::string> names;
    for (int i = 0; i < m->info_->n_kernels; ++i) names.emplace_back(m->info_->kernel_names[i]);
    m->kernels_ = device.load(path.parent_path() / device.image_name(), names);
  }
  return m;
}

std::shared_ptr<Module> Module::from_entry(kiln_module_fn entry, const std::string& name) {
  std::shared_ptr<Module> m(new Module());
  m->path_ = name;
  m->start(entry);
  if (m->info_->n_kernels > 0) throw UserError("module '" + name + "' launches device kernels");
  return m;
}

void Module::start(kiln_module_fn entry) {
  const std::string path = path_.string();
  info_ = entry(kiln_host_support());
  if (!info_ || info_->abi_version != KILN_ABI_VERSION) {
    throw UserError("module '" + path + "' has ABI version " +
                    std::to_string(info_ ? info_->abi_version : 0) + ", this kiln expects " +
                    std::to_string(KILN_ABI_VERSION) + "; recompile it");
  }
  if (info_->state_size) {
    state_ = std::calloc(1, info_->state_size);
    if (!state_) throw std::bad_alloc();
  }
  if (info_->state_init) {
    ThunkContext ctx;
    if (info_->state_init(state_, ctx.abi()) != 0) {
      throw UserError("module '" + path + "' failed to initialise: " + ctx.message());
    }
  }
  initialised_ = true;
}

Module::~Module() {
  if (initialised_ && info_->state_cleanup) info_->state_cleanup(state_);
  std::free(state_);
  if (handle_) ::dlclose(handle_);
}

}  // namespace kiln
