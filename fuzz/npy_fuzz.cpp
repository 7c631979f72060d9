// libFuzzer target: the .npy reader on arbitrary bytes; a tensor it accepts is written back
// and read again, which must give the same tensor.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "fuzz/fuzz_target.h"
#include "runtime/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    kiln::Tensor t = kiln::parse_npy(bytes, "fuzz.npy");
    kiln::Tensor again = kiln::parse_npy(kiln::to_npy(t), "again.npy");
    if (again.shape() != t.shape() || again.dtype() != t.dtype() ||
        std::memcmp(again.contiguous().data(), t.contiguous().data(), t.nbytes()) != 0) {
      std::abort();  // a round trip that changes the tensor
    }
  });
}
