#pragma once
// Compute functions that live outside a module (the precompiled ops of custom-op
// libraries, the host drivers of control flow), which generated code reaches through the
// support table: a node binds its op once when the module loads (op_bind, from a description
// kiln wrote into the module), calls it per run (op_run) and releases it at unload
// (op_release). The runtime only routes these calls; a binder, installed by whoever knows
// what the descriptions mean (the op-library loader, the control-flow op), builds the
// callable. Descriptions name their binder by their first bytes.
#include <functional>
#include <memory>
#include <string>

#include "runtime/module/module_abi.h"

namespace kiln {

class ForeignOp {
 public:
  virtual ~ForeignOp() = default;
  // Computes the outputs; on failure calls ctx->fail with a message and returns non-zero.
  // Never throws.
  virtual int run(kiln_ctx* ctx, kiln_tensor* const* in, int n_in, kiln_tensor* const* out,
                  int n_out) noexcept = 0;
};

// Builds the op a description names; throws Error with a message on failure.
using ForeignOpBinder = std::function<std::unique_ptr<ForeignOp>(const std::string& spec)>;

// Installs the binder of the descriptions starting with `prefix` (one per prefix; a second
// call replaces the first).
void set_foreign_op_binder(const std::string& prefix, ForeignOpBinder binder);

}  // namespace kiln

// The support table's entries that route to the binder are declared in runtime/support/support.h.
