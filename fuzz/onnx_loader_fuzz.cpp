// libFuzzer target: the ONNX loader (protobuf parse, initializers, every op converter and
// the graph they build) on arbitrary bytes, and the wire walk that lifts weights out of a
// model file checked against protobuf's own parse of the same bytes.
#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_wire.h"
#include "fuzz/fuzz_target.h"

namespace {

[[noreturn]] void differs(const char* what) {
  std::fprintf(stderr, "the lifted parse differs from protobuf's: %s\n", what);
  std::abort();
}

// Whatever the walk accepts must parse, with the weights put back, to exactly protobuf's
// model, and never where protobuf refuses the bytes.
void check_lift(const std::string& bytes) {
  const std::optional<kiln::LiftedModel> lifted = kiln::lift_initializer_data(bytes);
  if (!lifted) return;
  onnx::ModelProto rest;
  onnx::ModelProto whole;
  const bool rest_ok = rest.ParseFromString(lifted->rest);
  if (rest_ok != whole.ParseFromString(bytes)) differs("one parse fails, the other not");
  if (!rest_ok) return;
  if (lifted->raw.size() != static_cast<size_t>(rest.graph().initializer_size()))
    differs("initializer count");
  for (int i = 0; i < rest.graph().initializer_size(); ++i) {
    if (const auto& span = lifted->raw[static_cast<size_t>(i)]) {
      if (span->offset > bytes.size() || span->length > bytes.size() - span->offset)
        differs("a span past the end");
      rest.mutable_graph()->mutable_initializer(i)->set_raw_data(
          bytes.substr(span->offset, span->length));
    }
  }
  if (rest.SerializeAsString() != whole.SerializeAsString()) differs("the models");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  check_lift(bytes);
  // External data may only resolve inside an empty folder (nothing to read there).
  return kiln::fuzz::run_reader(
      [&] { kiln::parse_onnx_model(bytes, "fuzz.onnx", "/nonexistent"); });
}
