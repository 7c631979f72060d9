#pragma once
// Reading an ONNX file without copying its weights twice. libprotobuf copies every
// initializer's raw_data into a string, and kiln then copies that into aligned tensor
// storage: two fresh copies of every weight, a third of a transformer's cold compile. This
// walk of the protobuf wire format takes the top-level graph's initializers' raw_data out of
// the bytes protobuf parses and records where each lies in the file instead, so a weight is
// copied once, from the file's mapping into its tensor.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct RawDataSpan {
  uint64_t offset = 0;  // in the walked bytes (the file)
  uint64_t length = 0;
};

struct LiftedModel {
  // The ModelProto's bytes without the graph initializers' raw_data fields; every other
  // field, known or not, is kept byte for byte.
  std::string rest;
  // Per initializer of the parsed graph, in order: where its raw_data lies (the last one,
  // as protobuf keeps), or nullopt when it has none.
  std::vector<std::optional<RawDataSpan>> raw;
};

// nullopt when the bytes are not a well-formed protobuf message, or hold something this walk
// does not rewrite (a group, a graph or initializer field of the wrong wire type): the caller
// then parses the file as it is and reports what libprotobuf finds.
std::optional<LiftedModel> lift_initializer_data(std::string_view model);

}  // namespace kiln
