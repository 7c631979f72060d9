// libFuzzer target: kiln's JSON graph loader on arbitrary text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frontend/json/json_model.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] { kiln::parse_json_model(text, "fuzz.json", "/nonexistent"); });
}
