#include "runtime/thunk_context.h"

#include <cstdarg>
#include <cstdio>

namespace kiln {

ThunkContext::ThunkContext() {
  ctx_.fail = &ThunkContext::fail;
  ctx_.workspace = &ThunkContext::workspace;
  ctx_.impl = this;
  ctx_.part = 0;
  ctx_.n_parts = 1;
}

void ThunkContext::reset() {
  message_.clear();
  scratch_.clear();
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
  try {
    self->scratch_.push_back(allocate_storage(bytes));
    return self->scratch_.back()->data();
  } catch (...) {
    return nullptr;
  }
}

}  // namespace kiln
