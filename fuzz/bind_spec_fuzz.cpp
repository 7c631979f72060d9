// libFuzzer target: the op-library binding spec a module carries for each custom-op node
// (read back when the module loads) on arbitrary text; a spec it accepts must encode and
// decode to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_target.h"
#include "ops/library/library_op.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    kiln::BindSpec spec = kiln::decode_bind_spec(text);
    const std::string encoded = kiln::encode_bind_spec(spec);
    if (kiln::encode_bind_spec(kiln::decode_bind_spec(encoded)) != encoded) std::abort();
  });
}
