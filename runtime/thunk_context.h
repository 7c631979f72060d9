#pragma once
// The host side of kiln_ctx: collects a thunk's failure message and its scratch memory.
#include <memory>
#include <string>
#include <vector>

#include "runtime/module_abi.h"
#include "runtime/storage.h"

namespace kiln {

class ThunkContext {
 public:
  ThunkContext();
  kiln_ctx* abi() { return &ctx_; }
  void set_part(int part, int n_parts) {
    ctx_.part = part;
    ctx_.n_parts = n_parts;
  }
  const std::string& message() const { return message_; }
  void reset();  // drops the message and releases the workspace

 private:
  static void fail(kiln_ctx* ctx, const char* fmt, ...);
  static void* workspace(kiln_ctx* ctx, size_t bytes);
  kiln_ctx ctx_{};
  std::string message_;
  std::vector<std::shared_ptr<Storage>> scratch_;
};

}  // namespace kiln
