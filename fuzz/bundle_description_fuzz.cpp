// libFuzzer target: an exported library's program description (kiln export's
// description.json, read back by the library at create time) on arbitrary text; one it accepts
// must print and parse back to the same description.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_target.h"
#include "runtime/module/bundle_description.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    kiln::BundleDescription d = kiln::BundleDescription::parse(text, "fuzz/description.json");
    const std::string printed = d.to_json();
    if (kiln::BundleDescription::parse(printed, "again").to_json() != printed) std::abort();
  });
}
