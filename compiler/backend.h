#pragma once
// A device kiln compiles for. The host backend ("cpu") runs every node's C; a device backend
// ("cuda") places the nodes it has code for on its device (its ops' code table), links their
// kernels into a unit of their own beside the module, builds that unit with its toolchain,
// keys it with its toolchain's components, and moves tensors to and from its device.
// compile(), the module plan, the linker, the cache's entry rule, the CLI and Python ask the
// registry (backend_list.cpp holds it); none of them compares device names.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cache/entry_meta.h"
#include "compiler/c/toolchain.h"
#include "compiler/diagnostics.h"
#include "ctemplate/code_writer.h"
#include "graph/graph.h"
#include "ops/device_code.h"
#include "runtime/tensor.h"

namespace kiln {

// A placed node's kernels for the device unit: those it defines, and those whose code an
// earlier node's kernel already holds (its name, that kernel's symbol).
struct PlacedKernels {
  int id;
  std::vector<DeviceKernel> kernels;
  std::vector<std::pair<std::string, std::string>> shared;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The name in messages ("CUDA").
  virtual std::string title() const { return name(); }
  // The ops' code for this device; nullptr for the host, where nothing is placed.
  virtual const DeviceCodeTable* op_code() const { return nullptr; }
  bool is_host() const { return op_code() == nullptr; }

  // What of the device's toolchain enters the cache key (compiler version, architecture).
  virtual KeyComponents key_components() const { return {}; }
  // The device unit's file name in a module entry ("kernels.cu").
  virtual std::string unit_name() const { return ""; }
  // Writes the device unit: the placed nodes' kernels with the device preludes they need.
  virtual void link_unit(CodeWriter& w, const Graph& graph, const std::string& key,
                         size_t launch_sites, const std::vector<PlacedKernels>& kernels,
                         const std::vector<std::string>& preludes) const {}
  // The files build_unit writes beside the unit for this process's device (the image first).
  virtual std::vector<std::string> image_files() const { return {}; }
  // Every set of image files an entry of this backend may hold (a cubin and its PTX, or the
  // emulator's library): the cache's entry rule accepts exactly one of them.
  virtual std::vector<std::vector<std::string>> image_layouts() const { return {}; }
  // Compiles dir/<unit_name> into dir/<image_files>.
  virtual CompileOutcome build_unit(const std::filesystem::path& dir) const { return {}; }
  // The unit's diagnostics, each mapped through its source map to its node and fragment line.
  virtual std::vector<Diagnostic> unit_diagnostics(const std::string& log,
                                                   const CodeWriter& unit) const {
    return {};
  }
  // The target the unit is built for ("sm_90", "emulator"), for messages.
  virtual std::string target() const { return ""; }
  // The device this process runs the backend's modules on, in words (`-v`, CompileInfo).
  virtual std::string describe_device() const { return ""; }
  // Tensors moved to and from the device (a function compiled with device_io).
  virtual Tensor to_device(const Tensor& host) const { return host; }
  virtual Tensor to_host(const Tensor& device) const { return device; }
};

// The backend named `name`; a UserError naming the backends kiln has otherwise.
const Backend& backend_named(std::string_view name);
const Backend* find_backend(std::string_view name);
std::vector<std::string> backend_names();
// The backend whose placed ops are named "<backend>:<op>", or nullptr for any other name.
const Backend* backend_of_placed(std::string_view op_name);

// Every backend, the host first (backend_list.cpp: the one place a backend is added).
const std::vector<const Backend*>& all_backends();

}  // namespace kiln
