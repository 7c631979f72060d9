#pragma once
// Where a module meets a custom-op library's compute function: the runtime's foreign-op
// binder (runtime/exec/foreign_op.h) for compute-form library ops. A module's node binds its op
// when the module loads, from the description LibraryOp wrote into it, checking that the
// loaded library is the one the module was built against.
namespace kiln {

// Installs the binder; idempotent and cheap (compile() calls it before loading a module).
void install_op_library_binder();

}  // namespace kiln
