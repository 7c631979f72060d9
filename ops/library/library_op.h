#pragma once
// An op from a custom-op library (include/kiln/op_library.h): a COp whose hooks call the
// library's C functions through its kiln_op_def, check what comes back, and name the
// library, op and hook in every error. An op with C fragments is stitched into the module
// like a built-in one; an op with only a compute function becomes a node that binds it when
// the module loads and calls it through the support table (runtime/exec/foreign_op.h).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/op_library.h"
#include "ops/cop.h"

namespace kiln {

// A loaded library (ops/library/op_library.h loads them); lives as long as the process.
struct OpLibrary {
  std::string name, version, path, sha256;
  int abi_major = 0, abi_minor = 0;
  std::vector<std::string> ops;  // in registration order
  std::string abi() const { return std::to_string(abi_major) + "." + std::to_string(abi_minor); }
};

// One registered op: its definition as kiln copied it (fields past what the library's
// minor version has are zero) and copies of its strings.
struct LibraryOpDef {
  std::shared_ptr<const OpLibrary> library;
  kiln_op_def def{};
  std::string name, onnx_domain, onnx_op_type, grad_op;
  bool has_onnx = false;

  std::string where() const;  // "op library 'L' op 'O'": the start of every error
  bool compute_form() const { return def.c_code == nullptr; }
  // What the op provides: "c" (fragments), "compute", "state", "perform", "cuda", "grad".
  std::vector<std::string> forms() const;
};

class LibraryOp : public COp {
 public:
  // Validates `attrs` with the library's check_attrs (an op without one takes none).
  LibraryOp(std::shared_ptr<const LibraryOpDef> def, const Attrs& attrs);
  const LibraryOpDef& def() const { return *def_; }

  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  std::vector<Shape> infer_run_shape(const std::vector<Shape>& inputs,
                                     const std::vector<DType>& dtypes) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return def_->def.cache_version; }

  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::string c_support_code_apply(const Node& node, const std::string& prefix) const override;
  std::string c_state_fields(const Node& node, const std::string& prefix) const override;
  std::string c_init_code_struct(const Node& node, const Sub& sub) const override;
  std::string c_cleanup_code_struct(const Node& node, const Sub& sub) const override;
  std::vector<std::string> c_headers() const override;

  // The text a code hook of the library returns for `node` (its name in errors: `hook`),
  // with the node's names and types at hand, checked as every hook's text is. A backend's
  // code for library ops (ops/cuda/op_code.cpp) calls the library through this.
  using TextHook = const char* (*)(const kiln_op_node*);
  std::string node_text(const char* hook, TextHook fn, const Node& node, const CodeNames& names,
                        const Sub& sub) const;

 private:
  std::shared_ptr<const LibraryOpDef> def_;
};

// The description a module binds a compute-form node from: the op, its library's identity,
// its attributes and its static types (written into the module as a C string).
struct BindSpec {
  std::string op, library, sha256;
  Attrs attrs;
  std::vector<TensorType> inputs, outputs;
};
std::string encode_bind_spec(const BindSpec& spec);
// How every encoded spec starts: the foreign-op binder's prefix (runtime/exec/foreign_op.h).
std::string bind_spec_prefix();
BindSpec decode_bind_spec(const std::string& text);  // throws UserError when malformed

// kiln_op_type from a kiln type (at most KILN_OP_MAX_DIMS dimensions) and back.
kiln_op_type to_op_type(const TensorType& t, const std::string& what);

// Runs forward (or perform) on tensors: the shared core of LibraryOp::perform and of the
// module's bound op (compiler/c/op_library_binding.h). `workspace` (may be empty) gives the
// run its scratch memory.
void run_library_op(const LibraryOpDef& d, const char* hook, const Attrs& attrs, void* state,
                    const std::vector<const kiln_op_tensor*>& inputs,
                    const std::vector<const kiln_op_tensor*>& outputs,
                    const std::function<void*(size_t)>& workspace);

// Calls create_state for a node of these types (nullptr when the op has none).
void* create_library_state(const LibraryOpDef& d, const Attrs& attrs,
                           const std::vector<TensorType>& inputs,
                           const std::vector<TensorType>& outputs);

}  // namespace kiln
