#include "runtime/device/caller_stream.h"

namespace kiln {
namespace {

thread_local DeviceStream* caller_stream = nullptr;

}  // namespace

CallerStream::CallerStream(uintptr_t native)
    : stream_(accelerator().adopt_stream(native)), previous_(caller_stream) {
  caller_stream = stream_.get();
}

CallerStream::~CallerStream() { caller_stream = previous_; }

DeviceStream* CallerStream::current() { return caller_stream; }

}  // namespace kiln
