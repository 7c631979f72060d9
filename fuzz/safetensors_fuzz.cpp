// libFuzzer target: the safetensors reader (weights and inputs someone else wrote) on
// arbitrary bytes; a file it accepts must write and read back to the same tensors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fuzz/fuzz_target.h"
#include "runtime/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiln::fuzz::run_reader([&] {
    auto bytes = std::make_shared<kiln::Storage>(
        size ? std::malloc(size) : nullptr, size, [](void* p) { std::free(p); }, false);
    if (size) std::memcpy(bytes->data(), data, size);
    kiln::Safetensors s = kiln::parse_safetensors(bytes, "fuzz.safetensors");
    const std::string again = kiln::to_safetensors(s.tensors, s.metadata);
    auto copy = std::make_shared<kiln::Storage>(
        std::malloc(again.size()), again.size(), [](void* p) { std::free(p); }, false);
    std::memcpy(copy->data(), again.data(), again.size());
    kiln::Safetensors t = kiln::parse_safetensors(copy, "again.safetensors");
    if (t.tensors.size() != s.tensors.size() || t.metadata != s.metadata) std::abort();
    for (const auto& [name, tensor] : s.tensors) {
      const kiln::Tensor& u = t.at(name, "again");
      if (u.shape() != tensor.shape() || u.dtype() != tensor.dtype() ||
          std::memcmp(u.data(), tensor.data(), tensor.nbytes()) != 0)
        std::abort();
    }
  });
}
