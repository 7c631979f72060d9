#include "ops/cuda/epilogue.h"

#include <algorithm>

#include "ctemplate/template.h"
#include "ops/c/elementwise_loop.h"
#include "ops/fused_elementwise.h"

namespace kiln {

std::string CudaEpilogue::apply(const std::string& value, const std::string& index) const {
  return name + "(" + value + ", " + index + ", &epi" + operands + ")";
}

std::string cuda_store(const CudaEpilogue* epi, const std::string& value,
                       const std::string& index) {
  return epi ? epi->apply(value, index) : value;
}

CudaEpilogue make_cuda_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                int first_extra, const FusedElementwise& program) {
  CudaEpilogue e;
  const TensorType& out = node.outputs[0]->type;
  const std::string OT(dtype_c_type(out.dtype));
  e.name = sub.prefix + "epilogue";
  e.params = {"kiln_cuda_nd"};
  e.signature = ", const __grid_constant__ kiln_cuda_nd epi";
  e.launch_args = ", &kiln_epi";
  std::string fn_params = OT + " e0, int64_t o, const kiln_cuda_nd *nd";
  std::string loads, host_ops;
  TemplateValues v{{"0", "e0"}};
  std::vector<DType> dts{out.dtype};
  int nops = 0;
  for (size_t k = static_cast<size_t>(first_extra); k < node.inputs.size(); ++k) {
    const std::string I = std::to_string(k - static_cast<size_t>(first_extra) + 1);
    dts.push_back(node.inputs[k]->type.dtype);
    const LoopOperand lo = loop_operand(node.inputs[k], names.inputs[k], out);
    if (lo.literal) {
      v[I] = *lo.literal;
      continue;
    }
    const std::string T(dtype_c_type(node.inputs[k]->type.dtype));
    e.params.push_back("const " + T + "*");
    e.signature += ", const " + T + " *__restrict__ e" + I;
    fn_params += ", const " + T + " *__restrict__ e" + I;
    e.operands += ", e" + I;
    e.launch_args += ", &kiln_e" + I;
    loads += "  const " + T + " a" + I + " = e" + I + "[kiln_cuda_offset(nd, " +
             std::to_string(nops++) + ", o)];\n";
    v[I] = "a" + I;
    host_ops += (host_ops.empty() ? "" : ", ") + names.inputs[k];
    e.host += "void *kiln_e" + I + " = " + names.inputs[k] + "->data;\n";
  }
  std::vector<std::string> lets;
  std::string expr;
  program.scalar_body(dts, lets, expr, "p");
  std::string body = loads;
  for (const auto& l : lets) body += "  " + render_template(l, v, "cuda epilogue") + "\n";
  e.function = "KILN_NOINLINE " + OT + " " + e.name + "(" + fn_params + ") {\n" + body +
               "  (void)nd;\n  return (" + OT + ")(" + render_template(expr, v, "cuda epilogue") +
               ");\n}\n";
  e.host = "kiln_cuda_nd kiln_epi;\n" +
           (nops ? "const kiln_tensor *kiln_epi_ops[] = {" + host_ops + "};\n"
                 : "const kiln_tensor *const *kiln_epi_ops = 0;\n") +
           "if (kiln_cuda_nd_init(&kiln_epi, " + names.outputs[0] + ", kiln_epi_ops, " +
           std::to_string(nops) + ")) " + sub.fail +
           "(\"rank %d: above the CUDA kernels' limit (8)\", (int)" + names.outputs[0] +
           "->ndim);\n" + e.host;
  const auto p = program.c_preludes();
  if (std::find(p.begin(), p.end(), "kiln_math.h") != p.end())
    e.preludes = {"kiln_scalar.h", "kiln_math.h"};
  else
    e.preludes = {"kiln_scalar.h"};
  return e;
}

}  // namespace kiln
