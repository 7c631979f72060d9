#include "runtime/exec/thunk_context.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "runtime/device/device.h"
#include "runtime/device/staged_copies.h"
#include "util/error.h"
#include "util/quantity.h"

namespace kiln {

namespace {
uint64_t workspace_limit() {
  const char* env = std::getenv("KILN_WORKSPACE_LIMIT");
  return env && *env ? parse_size(env, "KILN_WORKSPACE_LIMIT", 0) : UINT64_MAX;
}
}  // namespace

ThunkContext::ThunkContext() : scratch_limit_(workspace_limit()) {
  ctx_.fail = &ThunkContext::fail;
  ctx_.workspace = &ThunkContext::workspace;
  ctx_.launch = &ThunkContext::launch;
  ctx_.copy = &ThunkContext::copy;
  ctx_.impl = this;
  ctx_.part = 0;
  ctx_.n_parts = 1;
}

void ThunkContext::reset() {
  message_.clear();
  scratch_.clear();
  scratch_bytes_ = 0;
}

void ThunkContext::fail(kiln_ctx* ctx, const char* fmt, ...) {
  auto* self = static_cast<ThunkContext*>(ctx->impl);
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  if (!self->message_.empty()) self->message_ += "; ";
  self->message_ += buf;
}

void* ThunkContext::workspace(kiln_ctx* ctx, size_t bytes) {
  auto* self = static_cast<ThunkContext*>(ctx->impl);
  if (bytes > self->scratch_limit_ - self->scratch_bytes_) return nullptr;
  try {
    self->scratch_.push_back(allocate_storage(bytes));
    self->scratch_bytes_ += bytes;
    return self->scratch_.back()->data();
  } catch (...) {
    return nullptr;
  }
}

int ThunkContext::launch(kiln_ctx* ctx, int32_t kernel, const uint32_t dims[6], uint32_t shared,
                         void** args) {
  auto* self = static_cast<ThunkContext*>(ctx->impl);
  try {
    if (!self->kernels_) throw Error("this module has no device kernels");
    self->kernels_->launch(self->stream_ ? *self->stream_ : thread_stream(), kernel, dims, shared,
                           args);
    return 0;
  } catch (const std::exception& e) {
    fail(ctx, "%s", e.what());
    return 1;
  }
}

int ThunkContext::copy(kiln_ctx* ctx, void* dst, const void* src, size_t bytes, int32_t kind) {
  auto* self = static_cast<ThunkContext*>(ctx->impl);
  try {
    Device& device = accelerator();
    DeviceStream& stream = self->stream_ ? *self->stream_ : thread_stream();
    StagedCopies local;
    StagedCopies& copies = self->copies_ ? *self->copies_ : local;
    switch (kind) {
      case KILN_COPY_TO_DEVICE:
        copies.to_device(device, stream, dst, src, bytes);
        break;
      case KILN_COPY_TO_HOST:
        copies.to_host_now(device, stream, dst, src, bytes);
        break;
      case KILN_COPY_TO_HOST_ASYNC:
        copies.to_host_later(device, stream, dst, src, bytes);
        break;
      default:
        throw Error("ctx->copy: unknown copy kind " + std::to_string(kind));
    }
    if (&copies == &local && !local.empty()) {
      // Nobody finishes these after the step: complete them before returning.
      stream.synchronize();
      local.finish();
    }
    return 0;
  } catch (const std::exception& e) {
    fail(ctx, "%s", e.what());
    return 1;
  }
}

}  // namespace kiln
