// libFuzzer target: a cache entry's `plan` (the program a hit runs, read from a cache folder
// or a remote entry) on arbitrary text; a plan it accepts must serialize and parse back to
// the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "compiler/module_plan.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    auto plan = kiln::ModulePlan::parse(text, "fuzz/plan");
    const std::string printed = plan->serialize();
    if (kiln::ModulePlan::parse(printed, "again/plan")->serialize() != printed) std::abort();
  });
}
