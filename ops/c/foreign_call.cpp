#include "ops/c/foreign_call.h"

#include <algorithm>

#include "util/escape.h"
#include "util/strings.h"

namespace kiln {
namespace {

std::string field(const Sub& sub) { return sub.state + "->" + sub.prefix + "op"; }

}  // namespace

std::string foreign_state_field(const std::string& prefix) { return "void *" + prefix + "op;"; }

std::string foreign_bind_code(const std::string& spec, const Sub& sub) {
  return field(sub) + " = KILN_SUPPORT->op_bind(ctx, " + c_string_literal(spec) + ");\nif (!" +
         field(sub) + ") {\n  kiln_status = 1;\n  goto kiln_cleanup;\n}\n";
}

std::string foreign_call_code(const CodeNames& names, const Sub& sub) {
  auto list = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("0") : join(v, ", ");
  };
  return "{\n"
         "  kiln_tensor *kiln_lib_in[" +
         std::to_string(std::max<size_t>(1, names.inputs.size())) + "] = {" + list(names.inputs) +
         "};\n"
         "  kiln_tensor *kiln_lib_out[" +
         std::to_string(std::max<size_t>(1, names.outputs.size())) + "] = {" + list(names.outputs) +
         "};\n"
         "  if (KILN_SUPPORT->op_run(ctx, " +
         field(sub) + ", kiln_lib_in, " + std::to_string(names.inputs.size()) + ", kiln_lib_out, " +
         std::to_string(names.outputs.size()) +
         ")) {\n"
         "    kiln_status = 1;\n"
         "    goto kiln_cleanup;\n"
         "  }\n"
         "}\n";
}

std::string foreign_release_code(const Sub& sub) {
  return "if (" + field(sub) + ") KILN_SUPPORT->op_release(" + field(sub) + ");\n" + field(sub) +
         " = 0;\n";
}

}  // namespace kiln
