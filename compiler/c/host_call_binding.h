#pragma once
// Where a module meets a host_call node's function (ops/host_call.h): the runtime's
// foreign-op binder (runtime/exec/foreign_op.h) for the descriptions host_call nodes write.
// The bound op views the run's buffers as tensors, calls the function and copies its results
// into the node's outputs.
namespace kiln {

// Installs the binder; idempotent and cheap (compile() calls it before loading a module).
void install_host_call_binder();

}  // namespace kiln
