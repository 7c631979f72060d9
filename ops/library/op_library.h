#pragma once
// Loading custom-op libraries (include/kiln/op_library.h): dlopen, the ABI version check,
// the library's init, a check of every op it registers, and registration under the ops'
// names (and ONNX domain + op type). A library loads whole or not at all.
#include <memory>
#include <string>
#include <vector>

#include "ops/library/library_op.h"

namespace kiln {

// Loads the library at `path` and registers its ops; loading the same file again returns
// the same record. Throws UserError naming the file: missing, not a shared library, no
// entry point, an ABI version kiln does not accept, an op missing a required function or
// named like one already registered (naming both libraries).
std::shared_ptr<const OpLibrary> load_op_library(const std::string& path);

// Loads every library in $KILN_OP_LIBRARIES (colon-separated paths), once per process; a
// failure names the variable and throws again on every call.
void load_env_op_libraries();

std::vector<std::shared_ptr<const OpLibrary>> loaded_op_libraries();
// The library op registered under `name`, or null.
std::shared_ptr<const LibraryOpDef> find_library_op(const std::string& name);
// The library op that ONNX nodes of this domain ("" or "ai.onnx": the default) and type
// load as, or null.
std::shared_ptr<const LibraryOpDef> find_library_onnx_op(const std::string& domain,
                                                         const std::string& op_type);

}  // namespace kiln
