#include "ops/cuda/random.h"

#include <cstdio>

#include "ops/cuda/kernels.h"

namespace kiln {

bool cuda_random_supported(const RandomOp& op, const Node& node) {
  return !(op.kind() == RandomOp::kDropout && node.inputs.size() == 2);
}

DeviceCode cuda_random(const RandomOp& op, const Node& node, const CodeNames& names,
                       const Sub& sub) {
  const std::string T(dtype_c_type(node.outputs[0]->type.dtype));
  const bool has_x = !node.inputs.empty();
  const std::string XT = has_x ? std::string(dtype_c_type(node.inputs[0]->type.dtype)) : T;
  const std::string wide = node.outputs[0]->type.dtype == DType::kFloat64 ? "1" : "0";
  DeviceKernel k;
  k.name = sub.prefix + "random";
  k.params = {"int64_t", "uint64_t", "uint32_t", "uint32_t",    "double",
              "double",  "int64_t",  "void*",    "const void*", "void*"};
  k.code = cuda_device_rules("KILN_RNG_DEVICE_RULES", "KILN_RNG_FN", RandomOp::rules_c());
  // n elements (a multinomial's: rows * samples, `classes` per row of x).
  k.code += "__global__ void " + k.name +
            "(int64_t n, uint64_t seed, uint32_t stream, uint32_t run, double a, double b, "
            "int64_t classes, void *yv, const void *xv, void *maskv) {\n"
            "  " +
            T + " *__restrict__ y = (" + T +
            " *)yv;\n"
            "  const " +
            XT + " *__restrict__ x = (const " + XT +
            " *)xv;\n"
            "  (void)x; (void)a; (void)b; (void)classes; (void)maskv;\n" +
            cuda_grid_loop("i", "n");
  switch (op.kind()) {
    case RandomOp::kUniform:
      k.code += "    y[i] = (" + T +
                ")(a + (b - a) * kiln_rng_uniform(seed, stream, run, "
                "(uint64_t)i, " +
                wide + "));\n";
      break;
    case RandomOp::kNormal:
      k.code +=
          "    y[i] = (" + T + ")(a + b * kiln_rng_normal(seed, stream, run, (uint64_t)i));\n";
      break;
    case RandomOp::kBernoulli:
      k.code +=
          "    const double u = kiln_rng_uniform(seed, stream, run, (uint64_t)i, 0);\n"
          "    y[i] = (" +
          T + ")(u < (double)x[i] ? 1 : 0);\n";
      break;
    case RandomOp::kDropout:
      k.code +=
          "    const double u = kiln_rng_uniform(seed, stream, run, (uint64_t)i, 0);\n"
          "    const int keep = u >= a;\n"
          "    y[i] = (" +
          T +
          ")(keep && a < 1 ? (double)x[i] / (1 - a) : 0.0);\n"
          "    ((uint8_t *)maskv)[i] = (uint8_t)keep;\n";
      break;
    case RandomOp::kMultinomial:
      // The CPU's two rules over the row, without its weights buffer: the maximum and the
      // sum first, then the running sum, each weight computed again as the CPU computed it.
      k.code += "    const int64_t samples = " + std::to_string(op.sample_size()) +
                ";\n"
                "    const " +
                XT +
                " *row = x + (i / samples) * classes;\n"
                "    double m = 0, total = 0;\n"
                "    int bad = 0;\n"
                "    for (int64_t c = 0; c < classes; ++c) {\n"
                "      const double v = (double)row[c];\n"
                "      if (v != v) bad = 1;\n"
                "      if (c == 0 || v > m) m = v;\n"
                "    }\n"
                "    const int infinite = m - m != 0;\n"
                "    if (!bad && !(infinite && m < 0))\n"
                "      for (int64_t c = 0; c < classes; ++c) {\n"
                "        const double v = (double)row[c];\n"
                "        total += infinite ? (v == m ? 1.0 : 0.0) : exp(v - m);\n"
                "      }\n"
                "    int64_t pick = -1;\n"
                "    if (!bad && total > 0) {\n"
                "      const double target = kiln_rng_uniform(seed, stream, run, (uint64_t)i, 1) * "
                "total;\n"
                "      double sum = 0;\n"
                "      for (int64_t c = 0; c < classes; ++c) {\n"
                "        const double v = (double)row[c];\n"
                "        const double w = infinite ? (v == m ? 1.0 : 0.0) : exp(v - m);\n"
                "        if (!(w > 0)) continue;\n"
                "        sum += w;\n"
                "        pick = c;\n"
                "        if (sum > target) break;\n"
                "      }\n"
                "    }\n"
                "    y[i] = (" +
                T + ")pick;\n";
      break;
  }
  k.code += "  }\n}\n";
  DeviceCode c;
  c.kernels.push_back(k);
  const std::string& Y = names.outputs[0];
  char seed[32], a[40], b[40];
  std::snprintf(seed, sizeof seed, "%lluULL", static_cast<unsigned long long>(op.seed()));
  std::snprintf(a, sizeof a, "%.17g", op.a());
  std::snprintf(b, sizeof b, "%.17g", op.b());
  std::string h = "{\n";
  // One draw of the run counter per call, as on the CPU.
  h += "  uint32_t r_run = __atomic_fetch_add(&" + sub.state + "->" + sub.prefix +
       "run, 1u, __ATOMIC_RELAXED);\n";
  h += "  int64_t r_n = 1;\n";
  h += "  for (int d = 0; d < " + Y + "->ndim; ++d) r_n *= " + Y + "->shape[d];\n";
  h += "  uint64_t r_seed = " + std::string(seed) + ";\n";
  h += "  uint32_t r_stream = " + std::to_string(op.stream()) + "u;\n";
  h += "  double r_a = " + std::string(a) + ", r_b = " + b + ";\n";
  h += "  int64_t r_classes = " +
       (op.kind() == RandomOp::kMultinomial ? names.inputs[0] + "->shape[1]" : std::string("0")) +
       ";\n";
  h += "  void *r_y = " + Y +
       "->data, *r_x = " + (has_x ? names.inputs[0] + "->data" : std::string("0")) +
       ", *r_mask = " +
       (op.kind() == RandomOp::kDropout ? names.outputs[1] + "->data" : std::string("0")) + ";\n";
  h += "  if (r_n > 0) KILN_LAUNCH(" + k.name +
       ", kiln_cuda_blocks(r_n, 256, 4096), 1, 1, 256, 1, 1, 0, &r_n, &r_seed, &r_stream, "
       "&r_run, &r_a, &r_b, &r_classes, &r_y, &r_x, &r_mask);\n}\n";
  c.launch = h;
  return c;
}

}  // namespace kiln
