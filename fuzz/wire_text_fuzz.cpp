// libFuzzer target: the wire text reader (graph/wire_text.h) that module plans and op
// bindings share, on arbitrary text read as a section, attributes, tensor types, reals and a
// word; what it accepts must write back to text that reads back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_target.h"
#include "graph/wire_text.h"

namespace {

constexpr const char* kMagic = "kiln-wire-fuzz 1\n";

std::string round(const std::string& text) {
  kiln::WireReader r(text, kMagic, "fuzz");
  kiln::WireWriter w(kMagic);
  r.expect("values");
  w.section("values");
  w.attrs(r.attrs());
  const size_t n = r.count("types", 64);
  w.num(static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) w.type(r.type(16));
  w.real(r.real("real"));
  w.ints(r.ints("ints", 1000));
  w.word(r.word("word"));
  r.finish();
  return w.take();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    const std::string printed = round(text);
    if (round(printed) != printed) std::abort();
  });
}
