#include "runtime/exec/foreign_op.h"

#include <map>
#include <mutex>
#include <shared_mutex>

#include "runtime/support/support.h"

namespace kiln {
namespace {

std::shared_mutex g_mutex;

std::map<std::string, ForeignOpBinder>& binders() {
  static std::map<std::string, ForeignOpBinder> b;
  return b;
}

// The binder whose prefix starts `spec`, or null.
ForeignOpBinder binder_for(const std::string& spec) {
  std::shared_lock lock(g_mutex);
  for (const auto& [prefix, b] : binders())
    if (spec.compare(0, prefix.size(), prefix) == 0) return b;
  return nullptr;
}

}  // namespace

void set_foreign_op_binder(const std::string& prefix, ForeignOpBinder b) {
  std::unique_lock lock(g_mutex);
  binders()[prefix] = std::move(b);
}

}  // namespace kiln

// Called from generated C: nothing may escape as an exception.
extern "C" void* kiln_foreign_op_bind(kiln_ctx* ctx, const char* spec) {
  try {
    const std::string text = spec ? spec : "";
    kiln::ForeignOpBinder b = kiln::binder_for(text);
    if (!b) {
      ctx->fail(ctx,
                "this module calls an op kiln runs on the host (a custom-op library's, or a "
                "control-flow node's), and nothing in this process binds it (description '%.40s')",
                text.c_str());
      return nullptr;
    }
    return b(text).release();
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
