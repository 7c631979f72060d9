#pragma once
// The host side of kiln_ctx: collects a thunk's failure message and its scratch memory.
// KILN_WORKSPACE_LIMIT (a size: "64M") caps the scratch memory of one call: a request beyond
// it fails the call as an allocation failure would (naming what it was for).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/module/module_abi.h"
#include "runtime/storage.h"

namespace kiln {

class DeviceStream;
class KernelImage;
class StagedCopies;

class ThunkContext {
 public:
  ThunkContext();
  kiln_ctx* abi() { return &ctx_; }
  void set_part(int part, int n_parts) {
    ctx_.part = part;
    ctx_.n_parts = n_parts;
  }
  // The kernels ctx->launch starts (a module's device kernels).
  void set_kernels(KernelImage* kernels) { kernels_ = kernels; }
  // Where a device thunk's launches and copies go (thread_stream() when unset), and what
  // holds its staged copies until the step completes (synchronous copies when unset).
  void set_device(DeviceStream* stream, StagedCopies* copies) {
    stream_ = stream;
    copies_ = copies;
  }
  const std::string& message() const { return message_; }
  void reset();  // drops the message and releases the workspace

 private:
  static void fail(kiln_ctx* ctx, const char* fmt, ...);
  static void* workspace(kiln_ctx* ctx, size_t bytes);
  static int launch(kiln_ctx* ctx, int32_t kernel, const uint32_t dims[6], uint32_t shared,
                    void** args);
  static int copy(kiln_ctx* ctx, void* dst, const void* src, size_t bytes, int32_t kind);
  KernelImage* kernels_ = nullptr;
  DeviceStream* stream_ = nullptr;
  StagedCopies* copies_ = nullptr;
  kiln_ctx ctx_{};
  std::string message_;
  std::vector<std::shared_ptr<Storage>> scratch_;
  uint64_t scratch_bytes_ = 0;  // this call's workspace so far
  uint64_t scratch_limit_;      // KILN_WORKSPACE_LIMIT, or no limit
};

}  // namespace kiln
