#pragma once
// A node computed outside its module (runtime/exec/foreign_op.h) in generated C: the state
// field holding the bound op, its binding when the module loads, the call per run, and its
// release at unload. Custom-op libraries' compute functions and control flow's host drivers
// both go this way.
#include <string>

#include "ops/cop.h"

namespace kiln {

std::string foreign_state_field(const std::string& prefix);
// Binds the op `spec` describes (a module fails to load when nothing binds it).
std::string foreign_bind_code(const std::string& spec, const Sub& sub);
std::string foreign_call_code(const CodeNames& names, const Sub& sub);
std::string foreign_release_code(const Sub& sub);

}  // namespace kiln
