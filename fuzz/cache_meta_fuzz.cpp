// libFuzzer target: the cache's meta.json parser (what a shared or remote cache hands over)
// on arbitrary text; an entry it accepts must print and parse back to the same entry.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cache/entry_meta.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    kiln::EntryMeta m = kiln::EntryMeta::parse(text, "fuzz/meta.json");
    const std::string printed = m.to_json();
    if (kiln::EntryMeta::parse(printed, "again/meta.json").to_json() != printed) std::abort();
  });
}
