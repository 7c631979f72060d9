#include "ops/cuda/op_code.h"

#include <functional>
#include <typeindex>

#include "ops/broadcast.h"
#include "ops/concat.h"
#include "ops/conv.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/movement.h"
#include "ops/cuda/random.h"
#include "ops/cuda/sampling.h"
#include "ops/cuda/transposed.h"
#include "ops/cuda/window.h"
#include "ops/elementwise.h"
#include "ops/epilogue.h"
#include "ops/expand.h"
#include "ops/fused_elementwise.h"
#include "ops/gather.h"
#include "ops/gemm.h"
#include "ops/library/library_op.h"
#include "ops/matmul.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/reshape.h"
#include "ops/slice.h"
#include "ops/softmax.h"
#include "ops/transpose.h"
#include "ops/window.h"
#include "util/error.h"

namespace kiln {
namespace {

// An entry from two functions of the op's own class. `emit` gets the epilogue (nullptr for
// none) when `epilogue` says the op's kernel can take one.
template <class OpT>
class Entry : public CudaOpCode {
 public:
  using Has = std::function<bool(const OpT&, const Node&)>;
  using Emit = std::function<DeviceCode(const OpT&, const Node&, const CodeNames&, const Sub&,
                                        const CudaEpilogue*)>;
  Entry(Has has, Emit emit, bool epilogue, bool host_rules = false)
      : has_(std::move(has)),
        emit_(std::move(emit)),
        epilogue_(epilogue),
        host_rules_(host_rules) {}
  // With host_rules, the host thunk gets the op's own C support code (its checks use it).
  std::string host_support(const COp& op) const override {
    return host_rules_ ? op.c_support_code() : "";
  }
  std::vector<std::string> host_headers(const COp& op) const override {
    return host_rules_ ? op.c_headers() : std::vector<std::string>{};
  }
  bool has_code(const COp& op, const Node& node) const override {
    return has_(static_cast<const OpT&>(op), node);
  }
  DeviceCode code(const COp& op, const Node& node, const CodeNames& names,
                  const Sub& sub) const override {
    return emit_(static_cast<const OpT&>(op), node, names, sub, nullptr);
  }
  bool has_epilogue(const COp& op, const Node& node) const override {
    return epilogue_ && has_code(op, node);
  }
  DeviceCode code_with(const COp& op, const Node& node, const CodeNames& names, const Sub& sub,
                       const CudaEpilogue& epi) const override {
    return emit_(static_cast<const OpT&>(op), node, names, sub, &epi);
  }

 private:
  Has has_;
  Emit emit_;
  bool epilogue_;
  bool host_rules_;
};

template <class OpT>
void add(DeviceCodeTable& t, typename Entry<OpT>::Has has, typename Entry<OpT>::Emit emit,
         bool epilogue = false, bool host_rules = false) {
  t.add(std::type_index(typeid(OpT)),
        std::make_unique<Entry<OpT>>(std::move(has), std::move(emit), epilogue, host_rules));
}

bool dtypes_ok(const COp&, const Node& node) { return cuda_dtypes_ok(node); }

// A strided copy of input 0 into the output through `strides` (C filling kiln_st[d], the
// input stride of output dimension d), from `src` (a C expression of a device address).
DeviceCode copy_code(const Node& node, const CodeNames& names, const Sub& sub,
                     const std::string& head, const std::string& src) {
  const std::string& out = names.outputs[0];
  DeviceCode c;
  c.kernels.push_back(cuda_copy_kernel(sub, node.inputs[0]->type.dtype));
  c.launch = "{\n" + head +
             cuda_copy_launch(c.kernels[0].name, node.outputs[0]->type.rank(), out + "->shape", src,
                              "kiln_st", out + "->data", out + "->strides") +
             "}\n";
  return c;
}

void add_movement(DeviceCodeTable& t) {
  add<Concat>(t, dtypes_ok,
              [](const Concat& op, const Node& node, const CodeNames& names, const Sub& sub,
                 const CudaEpilogue*) {
                const auto& ty = node.outputs[0]->type;
                const int rank = ty.rank();
                const std::string axis = std::to_string(normalize_axis(op.axis(), rank, "concat"));
                const std::string& out = names.outputs[0];
                DeviceCode c;
                c.kernels.push_back(cuda_copy_kernel(sub, ty.dtype));
                // One launch per input into its band of the output.
                std::string h = "{\n  int64_t kiln_start = 0;\n";
                for (const auto& in : names.inputs) {
                  h += cuda_copy_launch(
                      c.kernels[0].name, rank, in + "->shape", in + "->data", in + "->strides",
                      "(char *)" + out + "->data + kiln_start * " + out + "->strides[" + axis +
                          "] * " + std::to_string(dtype_size(ty.dtype)),
                      out + "->strides");
                  h += "  kiln_start += " + in + "->shape[" + axis + "];\n";
                }
                c.launch = h + "  (void)kiln_start;\n}\n";
                return c;
              });
  add<Expand>(t, dtypes_ok,
              [](const Expand&, const Node& node, const CodeNames& names, const Sub& sub,
                 const CudaEpilogue*) {
                const int in_rank = node.inputs[0]->type.rank();
                const int rank = node.outputs[0]->type.rank();
                const std::string& in = names.inputs[0];
                std::string h = "  int64_t kiln_st[KILN_CUDA_MAX_RANK];\n";
                for (int d = 0; d < rank; ++d) {
                  const int k = d - (rank - in_rank);
                  const std::string ds = std::to_string(d), ks = std::to_string(k);
                  h += k < 0 ? "  kiln_st[" + ds + "] = 0;\n"
                             : "  kiln_st[" + ds + "] = " + in + "->shape[" + ks +
                                   "] == 1 ? 0 : " + in + "->strides[" + ks + "];\n";
                }
                return copy_code(node, names, sub, h, in + "->data");
              });
  add<Transpose>(t, dtypes_ok,
                 [](const Transpose& op, const Node& node, const CodeNames& names, const Sub& sub,
                    const CudaEpilogue*) {
                   const int rank = node.inputs[0]->type.rank();
                   const auto p = op.perm_for(rank);
                   std::string h = "  int64_t kiln_st[KILN_CUDA_MAX_RANK];\n";
                   for (int d = 0; d < rank; ++d) {
                     h += "  kiln_st[" + std::to_string(d) + "] = " + names.inputs[0] +
                          "->strides[" + std::to_string(p[static_cast<size_t>(d)]) + "];\n";
                   }
                   return copy_code(node, names, sub, h, names.inputs[0] + "->data");
                 });
  add<Slice>(t, dtypes_ok,
             [](const Slice& op, const Node& node, const CodeNames& names, const Sub& sub,
                const CudaEpilogue*) {
               // A strided view of the input (offset and stride per sliced axis), copied out.
               return copy_code(node, names, sub, op.c_offsets(node, names.inputs, "kiln_"),
                                "(const char *)" + names.inputs[0] + "->data + kiln_off * " +
                                    std::to_string(dtype_size(node.inputs[0]->type.dtype)));
             });
  add<Gather>(t, dtypes_ok,
              [](const Gather& op, const Node& node, const CodeNames& names, const Sub& sub,
                 const CudaEpilogue*) {
                return cuda_gather(
                    node, names, sub,
                    normalize_axis(op.axis(), node.inputs[0]->type.rank(), "gather"));
              });
  // A reshape on the device is a view of its input (view_of): no kernel, no launch.
  auto view = [](const COp&, const Node&) { return true; };
  auto nothing = [](const COp&, const Node&, const CodeNames&, const Sub&, const CudaEpilogue*) {
    return DeviceCode{};
  };
  add<Reshape>(t, view, nothing);
  add<Flatten>(t, view, nothing);
}

void add_math(DeviceCodeTable& t) {
  add<Elementwise>(t, dtypes_ok,
                   [](const Elementwise& op, const Node& node, const CodeNames& names,
                      const Sub& sub, const CudaEpilogue*) {
                     return cuda_elementwise(node, names, sub, {}, op.node_expr(node),
                                             uses_math_prelude(op.def()));
                   });
  add<FusedElementwise>(
      t,
      [](const FusedElementwise&, const Node& node) {
        return cuda_dtypes_ok(node) && node.inputs.size() <= 12;
      },
      [](const FusedElementwise& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) {
        std::vector<DType> dts;
        for (const auto* v : node.inputs) dts.push_back(v->type.dtype);
        std::vector<std::string> lets;
        std::string expr;
        op.scalar_body(dts, lets, expr, "v");
        bool math = false;
        for (const auto& st : op.steps()) math = math || uses_math_prelude(st.op->def());
        return cuda_elementwise(node, names, sub, lets, expr, math);
      });
  add<Reduce>(t, dtypes_ok,
              [](const Reduce& op, const Node& node, const CodeNames& names, const Sub& sub,
                 const CudaEpilogue*) {
                return cuda_reduce(node, names, sub, op.kind(),
                                   op.reduced_mask(node.inputs[0]->type.rank()));
              });
  add<Softmax>(
      t,
      // A safe softmax (PyTorch's) runs on the CPU: the CUDA kernel has no zero-sum case.
      [](const Softmax& op, const Node& node) {
        return cuda_dtypes_ok(node) && is_float(node.outputs[0]->type.dtype) && !op.safe();
      },
      [](const Softmax& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) {
        const int axis = normalize_axis(op.axis(), node.inputs[0]->type.rank(), op.name());
        return cuda_softmax(node, names, sub, axis, op.log());
      });
  // Packed weights and operand views are CPU layouts: such nodes stay on the CPU.
  add<Gemm>(
      t,
      [](const Gemm& op, const Node& node) {
        return !op.packed() && cuda_dtypes_ok(node) && is_float(node.outputs[0]->type.dtype);
      },
      [](const Gemm& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue* epi) {
        return cuda_gemm(node, names, sub, op.trans_a(), op.trans_b(), op.alpha(), op.beta(), epi);
      },
      true);
  add<MatMul>(
      t,
      [](const MatMul& op, const Node& node) {
        return cuda_dtypes_ok(node) && is_float(node.outputs[0]->type.dtype) && op.plain();
      },
      [](const MatMul&, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue* epi) {
        return cuda_gemm(node, names, sub, false, false, 1.0, 0.0, epi);
      },
      true);
}

void add_windows(DeviceCodeTable& t) {
  add<Conv>(
      t,
      [](const Conv& op, const Node& node) {
        return !op.packed() && cuda_dtypes_ok(node) && is_float(node.outputs[0]->type.dtype) &&
               window_dims_static(node);
      },
      [](const Conv& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue* epi) {
        return cuda_conv(node, names, sub, window_c_init(op.node_geometry(node)), op.group(), epi);
      },
      true);
  // A max pool of bytes (a quantized model's) stays on the CPU: the kernel starts from -inf.
  add<Pool>(
      t,
      [](const Pool&, const Node& node) {
        return cuda_dtypes_ok(node) && is_float(node.inputs[0]->type.dtype) &&
               window_dims_static(node);
      },
      [](const Pool& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) {
        std::vector<int64_t> x = node.inputs[0]->type.dims;
        if (x[0] == kDynamic) x[0] = 1;  // the geometry ignores the batch
        return cuda_pool(node, names, sub, window_c_init(op.geometry(x)), op.is_max(),
                         op.count_include_pad());
      });
  // Transposed convolutions: the direct op and a lowered one's fold (its GEMM is a matmul).
  add<ConvTranspose>(
      t, [](const ConvTranspose&, const Node& node) { return cuda_dtypes_ok(node); },
      [](const ConvTranspose& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) { return cuda_conv_transpose(op, node, names, sub); });
  // A 3-D fold's cols have rank 9; its kernel indexes them itself (no kiln_cuda_nd), so the
  // rank bound of the shared kernels does not apply (its dtypes are float32 or float64).
  add<ConvTransposeFold>(
      t, [](const ConvTransposeFold&, const Node&) { return true; },
      [](const ConvTransposeFold& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) { return cuda_conv_transpose_fold(op, node, names, sub); });
  add<GridSample>(
      t, [](const GridSample&, const Node& node) { return cuda_dtypes_ok(node); },
      [](const GridSample& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) { return cuda_grid_sample(op, node, names, sub); });
  add<RoiAlign>(
      t, [](const RoiAlign&, const Node& node) { return cuda_dtypes_ok(node); },
      [](const RoiAlign& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) { return cuda_roi_align(op, node, names, sub); },
      false, true);
  add<RandomOp>(
      t,
      [](const RandomOp& op, const Node& node) {
        return cuda_dtypes_ok(node) && cuda_random_supported(op, node);
      },
      [](const RandomOp& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) { return cuda_random(op, node, names, sub); });
  add<Pad>(
      t,
      [](const Pad&, const Node& node) {
        return cuda_dtypes_ok(node) && node.inputs.size() == 1 && node.inputs[0]->type.rank() <= 8;
      },
      [](const Pad& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) { return cuda_pad(op, node, names, sub); });
}

// A fused GEMM / MatMul / Conv with its epilogue: the base op's kernel applies the program
// to each result before the store.
void add_epilogue(DeviceCodeTable& t) {
  auto base_code = [&t](const WithEpilogue& op) {
    return dynamic_cast<const CudaOpCode*>(t.find(op.base()));
  };
  add<WithEpilogue>(
      t,
      [base_code](const WithEpilogue& op, const Node& node) {
        const CudaOpCode* base = base_code(op);
        return base && cuda_dtypes_ok(node) &&
               node.inputs.size() - static_cast<size_t>(op.base_inputs()) <= 12 &&
               base->has_epilogue(op.base(), op.base_view(node));
      },
      [base_code](const WithEpilogue& op, const Node& node, const CodeNames& names, const Sub& sub,
                  const CudaEpilogue*) {
        CodeNames base_names;
        base_names.inputs.assign(names.inputs.begin(), names.inputs.begin() + op.base_inputs());
        base_names.outputs = names.outputs;
        const CudaEpilogue epi =
            make_cuda_epilogue(node, names, sub, op.base_inputs(), op.program());
        return base_code(op)->code_with(op.base(), op.base_view(node), base_names, sub, epi);
      });
}

// A library op's CUDA code: its cuda_kernel, cuda_kernel_params and cuda_launch hooks.
void add_library(DeviceCodeTable& t) {
  add<LibraryOp>(
      t,
      [](const LibraryOp& op, const Node&) {
        const kiln_op_def& d = op.def().def;
        return d.cuda_kernel && d.cuda_kernel_params && d.cuda_launch;
      },
      [](const LibraryOp& op, const Node& node, const CodeNames& names, const Sub& sub,
         const CudaEpilogue*) {
        const kiln_op_def& d = op.def().def;
        DeviceKernel k;
        k.name = sub.prefix + "kernel";
        k.code = op.node_text("cuda_kernel", d.cuda_kernel, node, names, sub);
        const std::string all =
            op.node_text("cuda_kernel_params", d.cuda_kernel_params, node, names, sub);
        std::vector<std::string> parts;
        std::string cur;
        for (char ch : all) {
          if (ch == ',') {
            parts.push_back(cur);
            cur.clear();
          } else {
            cur += ch;
          }
        }
        if (!cur.empty() || !parts.empty()) parts.push_back(cur);
        for (std::string p : parts) {
          while (!p.empty() && p.front() == ' ') p.erase(0, 1);
          while (!p.empty() && p.back() == ' ') p.pop_back();
          if (p.empty()) {
            throw UserError(op.def().where() + ": cuda_kernel_params: an empty parameter type");
          }
          k.params.push_back(p);
        }
        DeviceCode code;
        code.kernels.push_back(std::move(k));
        code.launch = op.node_text("cuda_launch", d.cuda_launch, node, names, sub);
        return code;
      });
}

}  // namespace

const DeviceCodeTable& cuda_op_code() {
  static const DeviceCodeTable* table = [] {
    auto* t =
        new DeviceCodeTable("cuda", {"kiln_index.h", "kiln_cuda_types.h", "kiln_cuda_host.h"});
    add_movement(*t);
    add_math(*t);
    add_windows(*t);
    add_epilogue(*t);
    add_library(*t);
    return t;
  }();
  return *table;
}

}  // namespace kiln
