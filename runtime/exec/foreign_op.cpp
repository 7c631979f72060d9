#include "runtime/exec/foreign_op.h"

#include <mutex>
#include <shared_mutex>

#include "runtime/support/support.h"

namespace kiln {
namespace {

std::shared_mutex g_mutex;

ForeignOpBinder& binder() {
  static ForeignOpBinder b;
  return b;
}

}  // namespace

void set_foreign_op_binder(ForeignOpBinder b) {
  std::unique_lock lock(g_mutex);
  binder() = std::move(b);
}

}  // namespace kiln

// Called from generated C: nothing may escape as an exception.
extern "C" void* kiln_foreign_op_bind(kiln_ctx* ctx, const char* spec) {
  try {
    kiln::ForeignOpBinder b;
    {
      std::shared_lock lock(kiln::g_mutex);
      b = kiln::binder();
    }
    if (!b) {
      ctx->fail(ctx,
                "this module calls an op from a custom-op library, and no op library is "
                "loaded in this process");
      return nullptr;
    }
    return b(spec ? spec : "").release();
  } catch (const std::exception& e) {
    ctx->fail(ctx, "%s", e.what());
  } catch (...) {
    ctx->fail(ctx, "binding a custom op failed with an unknown exception");
  }
  return nullptr;
}

extern "C" int kiln_foreign_op_run(kiln_ctx* ctx, void* op, kiln_tensor* const* in, int32_t n_in,
                                   kiln_tensor* const* out, int32_t n_out) {
  if (!op) {
    ctx->fail(ctx, "custom op called before it was bound");
    return 1;
  }
  return static_cast<kiln::ForeignOp*>(op)->run(ctx, in, n_in, out, n_out);
}

extern "C" void kiln_foreign_op_release(void* op) { delete static_cast<kiln::ForeignOp*>(op); }
