#include "compiler/c/op_library_binding.h"

#include <cstddef>
#include <mutex>

#include "ops/library/op_library.h"
#include "runtime/exec/foreign_op.h"
#include "util/error.h"

namespace kiln {
namespace {

// The module passes its kiln_tensor pointers straight to the library's forward.
static_assert(sizeof(kiln_op_tensor) == sizeof(kiln_tensor) &&
                  offsetof(kiln_op_tensor, data) == offsetof(kiln_tensor, data) &&
                  offsetof(kiln_op_tensor, shape) == offsetof(kiln_tensor, shape) &&
                  offsetof(kiln_op_tensor, strides) == offsetof(kiln_tensor, strides) &&
                  offsetof(kiln_op_tensor, ndim) == offsetof(kiln_tensor, ndim) &&
                  offsetof(kiln_op_tensor, dtype) == offsetof(kiln_tensor, dtype),
              "kiln_op_tensor must match kiln_tensor");

// A compute-form node bound by a loaded module: its op, attributes and state.
class BoundOp : public ForeignOp {
 public:
  BoundOp(std::shared_ptr<const LibraryOpDef> def, BindSpec spec)
      : def_(std::move(def)), spec_(std::move(spec)) {
    state_ = create_library_state(*def_, spec_.attrs, spec_.inputs, spec_.outputs);
  }
  ~BoundOp() override {
    if (state_ && def_->def.destroy_state) {
      try {
        def_->def.destroy_state(def_->def.op_data, state_);
      } catch (...) {
      }
    }
  }
  int run(kiln_ctx* ctx, kiln_tensor* const* in, int n_in, kiln_tensor* const* out,
          int n_out) noexcept override {
    try {
      if (n_in != static_cast<int>(spec_.inputs.size()) ||
          n_out != static_cast<int>(spec_.outputs.size())) {
        throw UserError(def_->where() + ": called with " + std::to_string(n_in) + " inputs and " +
                        std::to_string(n_out) + " outputs; bound for " +
                        std::to_string(spec_.inputs.size()) + " and " +
                        std::to_string(spec_.outputs.size()));
      }
      std::vector<const kiln_op_tensor*> ins, outs;
      for (int i = 0; i < n_in; ++i) ins.push_back(reinterpret_cast<const kiln_op_tensor*>(in[i]));
      for (int i = 0; i < n_out; ++i)
        outs.push_back(reinterpret_cast<const kiln_op_tensor*>(out[i]));
      run_library_op(*def_, "forward", spec_.attrs, state_, ins, outs,
                     [ctx](size_t bytes) { return ctx->workspace(ctx, bytes); });
      return 0;
    } catch (const std::exception& e) {
      ctx->fail(ctx, "%s", e.what());
    } catch (...) {
      ctx->fail(ctx, "%s: forward failed", def_->where().c_str());
    }
    return 1;
  }

 private:
  std::shared_ptr<const LibraryOpDef> def_;
  BindSpec spec_;
  void* state_ = nullptr;
};

std::unique_ptr<ForeignOp> bind(const std::string& text) {
  BindSpec spec = decode_bind_spec(text);
  auto def = find_library_op(spec.op);
  const std::string want = "op '" + spec.op + "' of op library '" + spec.library + "'";
  if (!def) {
    throw UserError("this module calls " + want +
                    ", which is not loaded (load it with --op-library or KILN_OP_LIBRARIES)");
  }
  if (def->library->name != spec.library || def->library->sha256 != spec.sha256) {
    throw UserError("this module was built against " + want + " (sha256 " +
                    spec.sha256.substr(0, 16) + "); the loaded op comes from op library '" +
                    def->library->name + "' (" + def->library->path + ", sha256 " +
                    def->library->sha256.substr(0, 16) + ")");
  }
  return std::make_unique<BoundOp>(std::move(def), std::move(spec));
}

}  // namespace

void install_op_library_binder() {
  static std::once_flag once;
  std::call_once(once, [] { set_foreign_op_binder(bind_spec_prefix(), bind); });
}

}  // namespace kiln
