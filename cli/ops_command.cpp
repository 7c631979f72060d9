// kiln ops: the ops kiln can build, built-in and from op libraries.
#include <cstdio>

#include "cli/commands.h"
#include "ops/library/op_library.h"
#include "ops/registry.h"
#include "util/strings.h"

namespace kiln::cli {

namespace {

int run(const CommandLine& line) {
  if (!line.positional().empty()) {
    throw UsageError{"kiln ops: unexpected argument '" + line.positional()[0] + "'"};
  }
  std::vector<std::string> builtin;
  for (const auto& name : OpRegistry::instance().names()) {
    if (!find_library_op(name)) builtin.push_back(name);
  }
  std::printf("built-in ops (%zu): %s\n", builtin.size(), join(builtin, ", ").c_str());
  for (const auto& lib : loaded_op_libraries()) {
    std::printf("\nop library %s%s%s\n  file     %s\n  sha256   %s\n  abi      %s\n",
                lib->name.c_str(), lib->version.empty() ? "" : " ", lib->version.c_str(),
                lib->path.c_str(), lib->sha256.c_str(), lib->abi().c_str());
    std::printf("  %-28s %-28s %-8s %s\n", "OP", "ONNX", "VERSION", "FORMS");
    for (const auto& name : lib->ops) {
      auto d = find_library_op(name);
      if (!d) continue;
      const std::string onnx =
          d->has_onnx ? (d->onnx_domain.empty() ? "" : d->onnx_domain + ":") + d->onnx_op_type
                      : "-";
      std::printf("  %-28s %-28s %-8d %s\n", name.c_str(), onnx.c_str(), d->def.cache_version,
                  join(d->forms(), ", ").c_str());
    }
  }
  return 0;
}

}  // namespace

const Command& ops_command() {
  static const Command c{
      "ops",
      "[--op-library PATH ...]",
      "list the ops kiln knows: built-in, and those of loaded op libraries with their\n"
      "ONNX names and forms",
      "Lists the ops kiln can build: the built-in ones, then for every loaded op library\n"
      "(--op-library, KILN_OP_LIBRARIES) its name, version, ABI, file and SHA-256, and each of\n"
      "its ops with the ONNX domain and type it loads from, its cache_version and its forms:\n"
      "c (C fragments stitched into the module), compute (a precompiled function the module\n"
      "calls), state (set up once per module), perform (a reference), cuda, grad.\n",
      {},
      "",
      run};
  return c;
}

}  // namespace kiln::cli
