#include "compiler/export/export.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <optional>

#include "compiler/c/linker.h"
#include "compiler/c/toolchain.h"
#include "compiler/subprocess.h"
#include "runtime/io/safetensors.h"
#include "runtime/module/bundle_description.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace embedded {
extern const std::pair<std::string_view, std::string_view> bundle_headers[];
extern const int bundle_headers_count;
}  // namespace embedded

namespace {

namespace fs = std::filesystem;

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string identifier_from(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "model_" + out;
  return out;
}

// Every slot's shape for the given input shapes, running the steps' shape rules; nullopt
// with the reason when a rule rejects them.
std::optional<std::vector<Shape>> shapes_for(const Program& p, const std::vector<Shape>& inputs,
                                             std::string& why) {
  std::vector<Shape> shapes(p.slots.size());
  for (const auto& [slot, t] : p.params) shapes[static_cast<size_t>(slot)] = t.shape();
  for (size_t i = 0; i < p.input_slots.size(); ++i)
    shapes[static_cast<size_t>(p.input_slots[i])] = inputs[i];
  for (const StepSpec& step : p.steps) {
    std::vector<Shape> in;
    for (int s : step.inputs) in.push_back(shapes[static_cast<size_t>(s)]);
    try {
      std::vector<Shape> out = step.infer_shape(in);
      for (size_t o = 0; o < step.outputs.size(); ++o)
        shapes[static_cast<size_t>(step.outputs[o])] = out.at(o);
    } catch (const UserError& e) {
      why = step.label + ": " + e.what();
      return std::nullopt;
    }
  }
  return shapes;
}

struct DynDim {
  int input, dim;
};

// Output dimensions as rules over each step's inputs, found by running the shape rules on
// probe sizes: with every group of dynamic input dimensions set to distinct primes (three
// probes), a dimension that is constant stays a constant, and one that follows an input
// dimension (times a fixed ratio) becomes that rule. `groups` says which dynamic input
// dimensions had to be tied (equal) for the rules to accept the probes.
std::vector<std::vector<std::vector<DimRule>>> derive_rules(
    const Program& p, std::vector<std::vector<DynDim>>& ties) {
  std::vector<DynDim> dyn;
  for (size_t i = 0; i < p.input_slots.size(); ++i) {
    const auto& dims = p.slots[static_cast<size_t>(p.input_slots[i])].dims;
    for (size_t d = 0; d < dims.size(); ++d)
      if (dims[d] < 0) dyn.push_back({static_cast<int>(i), static_cast<int>(d)});
  }
  // group[k]: the tie group of dynamic dim k, for the three ways of grouping tried in turn.
  std::vector<std::vector<int>> groupings;
  std::vector<int> distinct(dyn.size());
  std::iota(distinct.begin(), distinct.end(), 0);
  groupings.push_back(distinct);
  std::vector<int> by_position(dyn.size());
  for (size_t k = 0; k < dyn.size(); ++k) by_position[k] = dyn[k].dim;
  groupings.push_back(by_position);
  groupings.push_back(std::vector<int>(dyn.size(), 0));
  static const int64_t kPrimes[] = {61,  67,  71,  73,  79,  83,  89,  97,  101, 103,
                                    107, 109, 113, 127, 131, 137, 139, 149, 151, 157,
                                    163, 167, 173, 179, 181, 191, 193, 197, 199, 211,
                                    223, 227, 229, 233, 239, 241, 251, 257, 263};
  constexpr int kProbes = 3;
  std::vector<std::vector<Shape>> probes;  // per probe, per slot
  std::vector<int> chosen;
  std::string why;
  for (const auto& grouping : groupings) {
    const int groups = dyn.empty() ? 0 : *std::max_element(grouping.begin(), grouping.end()) + 1;
    if (groups * kProbes > static_cast<int>(std::size(kPrimes))) continue;
    probes.clear();
    for (int k = 0; k < (dyn.empty() ? 1 : kProbes); ++k) {
      std::vector<Shape> inputs;
      for (int s : p.input_slots) inputs.push_back(p.slots[static_cast<size_t>(s)].dims);
      for (size_t j = 0; j < dyn.size(); ++j) {
        inputs[static_cast<size_t>(dyn[j].input)][static_cast<size_t>(dyn[j].dim)] =
            kPrimes[k * groups + grouping[j]];
      }
      auto shapes = shapes_for(p, inputs, why);
      if (!shapes) break;
      probes.push_back(std::move(*shapes));
    }
    if (probes.size() == (dyn.empty() ? 1u : static_cast<size_t>(kProbes))) {
      chosen = grouping;
      break;
    }
  }
  if (chosen.size() != dyn.size() || probes.empty()) {
    throw UserError(
        "cannot export: the model's shape rules reject every probe of its dynamic "
        "dimensions (" +
        why + ")");
  }
  ties.clear();
  for (int g = 0; g < static_cast<int>(dyn.size()); ++g) {
    std::vector<DynDim> members;
    for (size_t k = 0; k < dyn.size(); ++k)
      if (chosen[k] == g) members.push_back(dyn[k]);
    if (members.size() > 1) ties.push_back(members);
  }

  std::vector<std::vector<std::vector<DimRule>>> rules;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const StepSpec& step = p.steps[s];
    std::vector<std::vector<DimRule>> outs;
    for (int out : step.outputs) {
      const auto& spec = p.slots[static_cast<size_t>(out)];
      std::vector<DimRule> dims;
      for (size_t e = 0; e < probes[0][static_cast<size_t>(out)].size(); ++e) {
        auto value = [&](size_t k) { return probes[k][static_cast<size_t>(out)][e]; };
        bool constant = true;
        for (size_t k = 1; k < probes.size(); ++k) constant = constant && value(k) == value(0);
        DimRule rule;
        if (constant && (e >= spec.dims.size() || spec.dims[e] < 0 || spec.dims[e] == value(0))) {
          rule.value = value(0);
          dims.push_back(rule);
          continue;
        }
        // Exact pass-through first, then a fixed ratio.
        bool found = false;
        for (int pass = 0; pass < 2 && !found; ++pass) {
          for (size_t ii = 0; ii < step.inputs.size() && !found; ++ii) {
            const size_t in = static_cast<size_t>(step.inputs[ii]);
            for (size_t d = 0; d < probes[0][in].size() && !found; ++d) {
              const int64_t x0 = probes[0][in][d], y0 = value(0);
              if (x0 <= 0) continue;
              const int64_t g = std::gcd(x0, y0);
              const int64_t mul = y0 / g, div = x0 / g;
              if (pass == 0 && (mul != 1 || div != 1)) continue;
              bool fits = true;
              for (size_t k = 0; k < probes.size(); ++k)
                fits = fits && value(k) * div == probes[k][in][d] * mul;
              if (fits) {
                rule.input = static_cast<int>(ii);
                rule.dim = static_cast<int>(d);
                rule.mul = mul;
                rule.div = div;
                found = true;
              }
            }
          }
        }
        if (!found) {
          std::vector<std::string> seen;
          for (size_t k = 0; k < probes.size(); ++k) seen.push_back(std::to_string(value(k)));
          throw UserError("cannot export: " + step.label + ": dimension " + std::to_string(e) +
                          " of output '" + spec.name + "' (" + join(seen, ", ") +
                          " for the probe sizes) does not follow one dimension of the step's "
                          "inputs; an exported library handles dynamic dimensions that pass "
                          "through ops or scale with one input dimension");
        }
        dims.push_back(rule);
      }
      outs.push_back(std::move(dims));
    }
    rules.push_back(std::move(outs));
  }
  return rules;
}

const char* dtype_macro(DType dt) {
  switch (dt) {
    case DType::kBool:
      return "BOOL";
    case DType::kInt8:
      return "INT8";
    case DType::kUInt8:
      return "UINT8";
    case DType::kInt32:
      return "INT32";
    case DType::kInt64:
      return "INT64";
    case DType::kFloat16:
      return "FLOAT16";
    case DType::kBFloat16:
      return "BFLOAT16";
    case DType::kFloat32:
      return "FLOAT32";
    case DType::kFloat64:
      return "FLOAT64";
    case DType::kInt16:
      return "INT16";
    case DType::kUInt16:
      return "UINT16";
    case DType::kUInt32:
      return "UINT32";
    case DType::kUInt64:
      return "UINT64";
  }
  return "?";
}

std::string signature_line(const SlotSpec& s) {
  std::string dims;
  for (size_t d = 0; d < s.dims.size(); ++d) {
    dims += (d ? ", " : "") + (s.dims[d] < 0 ? std::string("?") : std::to_string(s.dims[d]));
  }
  return s.name + ": " + std::string(dtype_name(s.dtype)) + " (" + dims + ")";
}

std::string header_text(const std::string& n, const BundleDescription& d, bool embedded) {
  std::string N = n;
  std::transform(N.begin(), N.end(), N.begin(), [](unsigned char c) { return std::toupper(c); });
  std::string h;
  // Model names go into comments only through c_comment_text: a name holding "*/" must
  // not put code into every program that includes the header.
  h += "/* " + n + ".h: the C API of model '" + c_comment_text(d.name) +
       "', exported by kiln.\n *\n";
  for (int s : d.input_slots)
    h += " * input   " + c_comment_text(signature_line(d.slots[static_cast<size_t>(s)])) + "\n";
  for (int s : d.output_slots)
    h += " * output  " + c_comment_text(signature_line(d.slots[static_cast<size_t>(s)])) + "\n";
  h += " * (? is a dimension given at run time)\n *\n";
  h += " * Weights: " +
       std::string(embedded ? "embedded in lib" + n + ".so"
                            : n + ".safetensors beside lib" + n + ".so") +
       ".\n */\n";
  h += "#ifndef KILN_EXPORT_" + N + "_H\n#define KILN_EXPORT_" + N +
       "_H\n#include <stddef.h>\n#include <stdint.h>\n\n";
  h += "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
  h += "#define " + n + "_MAX_DIMS 16\n";
  for (DType dt : {DType::kBool, DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
                   DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64,
                   DType::kInt16, DType::kUInt16, DType::kUInt32, DType::kUInt64}) {
    h += "#define " + n + "_" + dtype_macro(dt) + " " + std::to_string(static_cast<int>(dt)) + "\n";
  }
  h += "#define " + n + "_NUM_INPUTS " + std::to_string(d.input_slots.size()) + "\n";
  h += "#define " + n + "_NUM_OUTPUTS " + std::to_string(d.output_slots.size()) + "\n\n";
  h += "/* Row-major, contiguous. Outputs are allocated by the library: release each with\n"
       " * " +
       n + "_free_output. */\n";
  h += "typedef struct " + n + "_tensor {\n  void *data;\n  int64_t shape[" + n +
       "_MAX_DIMS];\n  int32_t ndim;\n  int32_t dtype; /* " + n + "_FLOAT32, ... */\n} " + n +
       "_tensor;\n\n";
  h += "typedef struct " + n + "_model " + n + "_model;\n\n";
  h += "/* Loads the model. weights_path: NULL for the " +
       std::string(embedded ? "embedded weights" : n + ".safetensors beside the library") +
       ", or a .safetensors file exported\n * with this model. NULL on failure: see " + n +
       "_last_error. */\n";
  h += n + "_model *" + n + "_create(const char *weights_path);\n";
  h += "/* Runs the model: 0 on success, else non-zero and " + n +
       "_last_error says why (a wrong\n"
       " * input count, dtype or shape names the input). Safe to call from several threads. */\n";
  h += "int " + n + "_run(" + n + "_model *model, const " + n +
       "_tensor *inputs, size_t n_inputs,\n"
       "    " +
       std::string(n.size() + 5, ' ') + n + "_tensor *outputs, size_t n_outputs);\n";
  h += "void " + n + "_free_output(" + n + "_tensor *output);\n";
  h += "void " + n + "_destroy(" + n + "_model *model);\n";
  h += "/* The calling thread's last error (\"\" after a success). */\nconst char *" + n +
       "_last_error(void);\n\n";
  h += "/* The signature: names, dtypes (" + n +
       "_FLOAT32, ...) and dimensions (-1: dynamic).\n"
       " * *_shape writes up to " +
       n + "_MAX_DIMS dimensions and returns the rank; -1 for a bad index. */\n";
  for (const char* io : {"input", "output"}) {
    h += "const char *" + n + "_" + io + "_name(size_t index);\n";
    h += "int32_t " + n + "_" + io + "_dtype(size_t index);\n";
    h += "int32_t " + n + "_" + io + "_shape(size_t index, int64_t *dims);\n";
  }
  h += "\n#ifdef __cplusplus\n}\n#endif\n#endif\n";
  return h;
}

std::string glue_text(const std::string& n, const BundleDescription& d, const std::string& id,
                      bool embedded, bool links_blas) {
  check_internal(embedded::bundle_headers_count == 1, "bundle ABI header not embedded");
  std::string g;
  g += "/* lib" + n + ".so: the C API over kiln's runtime (generated by kiln export). */\n";
  g += std::string(embedded::bundle_headers[0].second) + "\n";
  g += "#define API __attribute__((visibility(\"default\")))\n";
  g += "typedef struct " + n + "_model " + n + "_model;\n";
  g += "typedef kiln_bundle_tensor " + n + "_tensor;\n";
  g += "extern const void *kiln_module(const void *support);\n";
  g += "extern const char kiln_export_description[], kiln_export_description_end[];\n";
  if (embedded) g += "extern const char kiln_export_weights[], kiln_export_weights_end[];\n";
  g += "static const kiln_bundle_image image = {\n  " + c_string_literal(n) + ", " +
       c_string_literal(id) + ",\n  kiln_export_description, 0,\n";
  g += embedded ? "  kiln_export_weights, 0, 0,\n"
                : "  0, 0, " + c_string_literal(n + ".safetensors") + ",\n";
  g += "  kiln_module, (const void *)&image};\n";
  g += "API " + n + "_model *" + n +
       "_create(const char *weights_path) {\n"
       "  kiln_bundle_image im = image;\n"
       "  im.description_size = (size_t)(kiln_export_description_end - kiln_export_description);\n";
  if (embedded)
    g += "  im.weights_size = (size_t)(kiln_export_weights_end - kiln_export_weights);\n";
  g += "  return (" + n + "_model *)kiln_bundle_create(&im, weights_path);\n}\n";
  g += "API int " + n + "_run(" + n + "_model *m, const " + n + "_tensor *in, size_t n_in, " + n +
       "_tensor *out, size_t n_out) {\n  return kiln_bundle_run(m, in, n_in, out, n_out);\n}\n";
  g += "API void " + n + "_free_output(" + n + "_tensor *t) { kiln_bundle_free_output(t); }\n";
  g += "API void " + n + "_destroy(" + n + "_model *m) { kiln_bundle_destroy(m); }\n";
  g += "API const char *" + n + "_last_error(void) { return kiln_bundle_error(); }\n";
  for (const char* io : {"input", "output"}) {
    const auto& slots = std::string(io) == "input" ? d.input_slots : d.output_slots;
    std::string names, dtypes, ranks, dims;
    for (int s : slots) {
      const SlotSpec& spec = d.slots[static_cast<size_t>(s)];
      names += c_string_literal(spec.name) + ", ";
      dtypes += std::to_string(static_cast<int>(spec.dtype)) + ", ";
      ranks += std::to_string(spec.dims.size()) + ", ";
      dims += "{";
      for (int64_t x : spec.dims) dims += std::to_string(x) + ", ";
      dims += "0}, ";
    }
    const std::string count = std::to_string(slots.size());
    g += "static const char *const " + std::string(io) + "_names[] = {" + names + "0};\n";
    g += "static const int32_t " + std::string(io) + "_dtypes[] = {" + dtypes + "0};\n";
    g += "static const int32_t " + std::string(io) + "_ranks[] = {" + ranks + "0};\n";
    g += "static const int64_t " + std::string(io) + "_dims[][17] = {" + dims + "{0}};\n";
    g += "API const char *" + n + "_" + io + "_name(size_t i) { return i < " + count + " ? " + io +
         "_names[i] : 0; }\n";
    g += "API int32_t " + n + "_" + io + "_dtype(size_t i) { return i < " + count + " ? " + io +
         "_dtypes[i] : -1; }\n";
    g += "API int32_t " + n + "_" + io + "_shape(size_t i, int64_t *dims) {\n  if (i >= " + count +
         ") return -1;\n  for (int32_t k = 0; dims && k < " + io +
         "_ranks[i]; ++k) dims[k] = " + io + "_dims[i][k];\n  return " + io + "_ranks[i];\n}\n";
  }
  if (!links_blas) {
    // kiln's GEMM table entries refer to OpenBLAS; this model never calls them.
    g += "#include <stdio.h>\n#include <stdlib.h>\n";
    for (const char* f : {"cblas_sgemm", "cblas_dgemm"}) {
      g += "void " + std::string(f) + "(void) {\n  fputs(\"lib" + n + ".so: " + f +
           " called, but the library was exported without OpenBLAS\\n\", stderr);\n  abort();\n}\n";
    }
  }
  return g;
}

std::string blobs_text(const fs::path& description, const std::optional<fs::path>& weights) {
  auto incbin = [](const std::string& symbol, const fs::path& file, int align) {
    return "  .balign " + std::to_string(align) + "\n  .globl " + symbol + "\n  .hidden " + symbol +
           "\n" + symbol + ":\n  .incbin " + asm_string_literal(file.string()) + "\n  .globl " +
           symbol + "_end\n  .hidden " + symbol + "_end\n" + symbol + "_end:\n  .byte 0\n";
  };
  std::string s = "  .section .rodata.kiln_export,\"a\"\n";
  s += incbin("kiln_export_description", description, 8);
  if (weights) s += incbin("kiln_export_weights", *weights, 64);
  s += "  .section .note.GNU-stack,\"\",@progbits\n";
  return s;
}

std::string readme_text(const std::string& n, const BundleDescription& d, const ExportResult& r,
                        const std::string& cpu, int ties) {
  std::string t;
  // A text file read in a terminal: names shown with terminal_text on one line each.
  auto line = [](const SlotSpec& spec) { return terminal_line(signature_line(spec)); };
  t += "Model '" + terminal_line(d.name) + "', exported by kiln as lib" + n + ".so\n\n";
  t += "Inputs:\n";
  for (int s : d.input_slots) t += "  " + line(d.slots[static_cast<size_t>(s)]) + "\n";
  t += "Outputs:\n";
  for (int s : d.output_slots) t += "  " + line(d.slots[static_cast<size_t>(s)]) + "\n";
  t += "(? is a dimension given at run time";
  t += ties ? "; dynamic dimensions at the same position in different inputs must be equal)\n"
            : ")\n";
  t += "\nFiles:\n  " + n + ".h            the C API (C11 and C++)\n  lib" + n +
       ".so        the model, kiln's runtime" + (r.weights.empty() ? " and the weights" : "") +
       "\n";
  if (!r.weights.empty())
    t += "  " + n + ".safetensors  the weights, read from beside the library\n";
  t += "\nBuild: cc app.c -I. -L. -l" + n + " -Wl,-rpath,'$ORIGIN'\n";
  t += "Needs: libstdc++" + std::string(r.links_blas ? ", libopenblas" : "") + " and a CPU like " +
       cpu + " (the code is compiled for it).\n";
  t += "Threads: KILN_ENGINE_WORKERS sets how many run the model (default: the cores).\n";
  return t;
}

fs::path self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : p;
}

}  // namespace

std::vector<fs::path> export_archives() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("KILN_EXPORT_LIBDIR"); env && *env) dirs.emplace_back(env);
  if (fs::path exe = self_exe(); !exe.empty())
    dirs.push_back(exe.parent_path() / KILN_LIBDIR_FROM_BIN);
  for (const auto& dir : dirs) {
    if (fs::exists(dir / "libkiln_runtime.a") && fs::exists(dir / "libkiln_util.a")) {
      return {dir / "libkiln_runtime.a", dir / "libkiln_util.a"};
    }
  }
  if (fs::exists(KILN_BUILD_RUNTIME_ARCHIVE) && fs::exists(KILN_BUILD_UTIL_ARCHIVE)) {
    return {KILN_BUILD_RUNTIME_ARCHIVE, KILN_BUILD_UTIL_ARCHIVE};
  }
  throw UserError(
      "kiln export needs kiln's runtime archives (libkiln_runtime.a, libkiln_util.a): "
      "not found in " +
      (dirs.empty() ? std::string("KILN_EXPORT_LIBDIR") : dirs.back().string()) +
      " nor in the build tree; set KILN_EXPORT_LIBDIR to their folder");
}

ExportResult export_model(const Graph& graph, const ExportOptions& options) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Instrumented archives need the sanitizer's runtime in every program that loads them.
  throw UserError(
      "kiln export: this kiln is built with a sanitizer; its runtime archives cannot "
      "go into an exported library (use a release build)");
#endif
  ExportResult r;
  r.name = options.name.empty() ? identifier_from(graph.name()) : options.name;
  if (!is_identifier(r.name)) {
    throw UserError("--name '" + r.name +
                    "' is not a C identifier (letters, digits and _, not "
                    "starting with a digit)");
  }
  if (options.out_dir.empty()) throw UserError("kiln export: no output folder");
  const std::vector<fs::path> archives = export_archives();
  StandaloneModule sm = standalone_module(graph, options.compile);
  const std::string code = sm.linked->code.str();
  if (code.find("KILN_SUPPORT->op_bind(") != std::string::npos) {
    throw UserError(
        "cannot export: the model uses a precompiled compute function of an op library "
        "(kiln_op_def.forward); an exported library carries only generated C code");
  }
  r.links_blas = code.find("(KILN_SUPPORT->gemm_f32)") != std::string::npos ||
                 code.find("(KILN_SUPPORT->gemm_f64)") != std::string::npos;

  // The program as data.
  const Program& p = sm.program;
  BundleDescription d;
  d.name = graph.name();
  d.slots = p.slots;
  d.input_slots = p.input_slots;
  d.output_slots = p.output_slots;
  std::vector<std::vector<DynDim>> ties;
  auto rules = derive_rules(p, ties);
  for (const auto& group : ties) {
    d.ties.emplace_back();
    for (const auto& t : group) d.ties.back().emplace_back(t.input, t.dim);
  }
  for (const auto& slot : p.input_slots)
    for (int64_t x : p.slots[static_cast<size_t>(slot)].dims) r.dynamic_dims += x < 0;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const StepSpec& st = p.steps[s];
    d.steps.push_back({st.thunk, st.inputs, st.outputs, st.label, std::move(rules[s])});
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [slot, t] : p.params) {
    std::string tensor = p.slots[static_cast<size_t>(slot)].name;
    for (const auto& [n, u] : tensors)
      if (n == tensor) tensor += "#" + std::to_string(slot);
    d.params.emplace_back(slot, tensor);
    tensors.emplace_back(tensor, t.contiguous());
  }
  const std::string description = d.to_json();
  Sha256 h;
  h.update(description);
  for (const auto& [n, t] : tensors) {
    h.update(n);
    h.update(t.data(), t.nbytes());
  }
  const std::string id = h.hex_digest();
  const std::string weights = to_safetensors(tensors, {{"kiln.bundle", id}, {"kiln.name", r.name}});

  // Build in a private folder, then move the finished files into place.
  make_dirs(options.out_dir, 0777);
  std::string templ = (options.out_dir / ".kiln-export-XXXXXX").string();
  if (!::mkdtemp(templ.data()))
    throw UserError("cannot create a build folder in '" + options.out_dir.string() + "'");
  const fs::path work = templ;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (debug_level() < 2) fs::remove_all(dir, ec);
    }
  } cleanup{work};
  write_file_atomic(work / "description.json", description);
  write_file_atomic(work / "weights.safetensors", weights);
  write_file_atomic(work / "module.c", code);
  write_file_atomic(work / "glue.c", glue_text(r.name, d, id, options.embed_weights, r.links_blas));
  write_file_atomic(
      work / "blobs.s",
      blobs_text(work / "description.json",
                 options.embed_weights ? std::optional<fs::path>(work / "weights.safetensors")
                                       : std::nullopt));
  const Toolchain& tc = Toolchain::get(options.compile.toolchain);
  auto must = [&](const CompileOutcome& o, const std::string& what) {
    if (!o.ok) throw UserError("kiln export: " + what + " failed:\n" + o.log);
  };
  must(tc.compile_object(work / "module.c", work / "module.o", sm.linked->compile_args),
       "compiling the module");
  must(tc.compile_object(work / "glue.c", work / "glue.o", {}), "compiling the C API");
  must(tc.assemble(work / "blobs.s", work / "blobs.o"), "assembling the description and weights");
  write_file_atomic(work / "exports.map", "{\n  global: " + r.name + "_*;\n  local: *;\n};\n");
  const fs::path lib = work / ("lib" + r.name + ".so");
  std::vector<std::string> argv{tc.cc(),
                                "-shared",
                                "-o",
                                lib.string(),
                                "-Wl,-soname,lib" + r.name + ".so",
                                "-Wl,--version-script=" + (work / "exports.map").string(),
                                "-Wl,--exclude-libs,ALL",
                                "-Wl,--no-undefined",
                                "-Wl,--gc-sections",
                                "-Wl,--strip-debug",
                                (work / "module.o").string(),
                                (work / "glue.o").string(),
                                (work / "blobs.o").string()};
  for (const auto& a : archives) argv.push_back(a.string());
  for (const auto& l : sm.linked->libraries) argv.push_back("-l" + l);
  if (r.links_blas) argv.push_back("-lopenblas");
  for (const char* l : {"-lstdc++", "-lm", "-ldl", "-lpthread"}) argv.emplace_back(l);
  if (debug_level() >= 2) log_line("export link: " + join(argv, " "));
  ProcessResult link = run_process(argv);
  if (link.exit_code != 0)
    throw UserError("kiln export: linking lib" + r.name + ".so failed:\n" + link.err);

  r.library = options.out_dir / ("lib" + r.name + ".so");
  r.header = options.out_dir / (r.name + ".h");
  r.readme = options.out_dir / "README.txt";
  fs::rename(lib, r.library);
  if (!options.embed_weights) {
    r.weights = options.out_dir / (r.name + ".safetensors");
    fs::rename(work / "weights.safetensors", r.weights);
  } else {
    std::error_code ec;
    fs::remove(options.out_dir / (r.name + ".safetensors"), ec);  // a stale file-mode export's
  }
  write_file_atomic(r.header, header_text(r.name, d, options.embed_weights));
  write_file_atomic(r.readme, readme_text(r.name, d, r, tc.cpu(), static_cast<int>(ties.size())));
  r.library_bytes = fs::file_size(r.library);
  return r;
}

}  // namespace kiln
