// libFuzzer target: the ONNX loader (protobuf parse, initializers, every op converter and
// the graph they build) on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frontend/onnx/onnx_model.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // External data may only resolve inside an empty folder (nothing to read there).
  return kiln::fuzz::run_reader(
      [&] { kiln::parse_onnx_model(bytes, "fuzz.onnx", "/nonexistent"); });
}
