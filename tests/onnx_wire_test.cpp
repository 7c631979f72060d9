// The wire walk that lifts initializers' raw_data out of an ONNX file (onnx_wire.h): what
// protobuf parses afterwards is the same model with the weights outside it, and any bytes
// the walk does not understand are left to protobuf, never half-read.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>
#include <sstream>
#include <string>

#include "frontend/onnx/onnx_wire.h"
#include "tests/onnx_builder.h"

namespace kiln {
namespace {

std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

std::string field(uint64_t number, const std::string& payload) {
  return varint(number << 3 | 2) + varint(payload.size()) + payload;
}

// Parses `bytes` the way kiln does (lifted, then the raw_data put back from the spans) and
// checks the result is exactly protobuf's own parse of the whole file.
void expect_same_as_protobuf(const std::string& bytes) {
  onnx::ModelProto whole;
  ASSERT_TRUE(whole.ParseFromString(bytes));
  const std::optional<LiftedModel> lifted = lift_initializer_data(bytes);
  ASSERT_TRUE(lifted);
  EXPECT_LT(lifted->rest.size(), bytes.size());
  onnx::ModelProto rest;
  ASSERT_TRUE(rest.ParseFromString(lifted->rest));
  ASSERT_EQ(static_cast<int>(lifted->raw.size()), rest.graph().initializer_size());
  for (int i = 0; i < rest.graph().initializer_size(); ++i) {
    onnx::TensorProto* t = rest.mutable_graph()->mutable_initializer(i);
    EXPECT_FALSE(t->has_raw_data()) << i;
    if (const auto& span = lifted->raw[static_cast<size_t>(i)])
      t->set_raw_data(bytes.substr(span->offset, span->length));
  }
  EXPECT_EQ(rest.SerializeAsString(), whole.SerializeAsString());
}

TEST(OnnxWire, LiftedModelIsProtobufsModelWithTheWeightsOutside) {
  testing::ModelBuilder b;
  b.input("x", {4});
  b.output("y", {4});
  b.initializer("w", {4}, {1.5f, -0.0f, 3, 4});
  b.ints_initializer("shape", {2, 2});  // no raw_data: int64_data stays in the message
  b.initializer("empty", {0}, {});
  b.node("Add", {"x", "w"}, {"y"});
  auto* constant = b.node("Constant", {}, {"c"});  // a tensor in an attribute is not lifted
  auto* a = constant->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->set_raw_data(std::string(4, '\x01'));
  b.m.set_producer_name("kiln test");
  const std::string bytes = b.bytes();
  expect_same_as_protobuf(bytes);
  const std::optional<LiftedModel> lifted = lift_initializer_data(bytes);
  ASSERT_EQ(lifted->raw.size(), 3u);
  ASSERT_TRUE(lifted->raw[0]);
  EXPECT_EQ(lifted->raw[0]->length, 16u);
  EXPECT_FALSE(lifted->raw[1]);
  ASSERT_TRUE(lifted->raw[2]);  // present and empty is not absent
  EXPECT_EQ(lifted->raw[2]->length, 0u);
  EXPECT_NE(lifted->rest.find(std::string(4, '\x01')), std::string::npos);
}

TEST(OnnxWire, RepeatedFieldsAndUnknownFieldsMergeAsProtobufMergesThem) {
  testing::ModelBuilder b;
  b.initializer("w", {2}, {1, 2});
  const std::string first = b.bytes();
  // A second graph field (protobuf merges it into the first: initializers append), holding
  // one tensor whose raw_data appears twice (the last wins) and an unknown field (99) that
  // must survive, plus an unknown top-level field (1000) between the graphs.
  const std::string tensor = field(8, "v") + varint(2 << 3) + varint(1) + field(9, "AAAA") +
                             field(99, "unknown") + field(9, "BBBBBBBB") + varint(1 << 3) +
                             varint(2);
  const std::string bytes =
      first + field(1000, "x") + field(7, field(5, tensor) + field(2, "renamed"));
  expect_same_as_protobuf(bytes);
  const std::optional<LiftedModel> lifted = lift_initializer_data(bytes);
  ASSERT_EQ(lifted->raw.size(), 2u);
  EXPECT_EQ(bytes.substr(lifted->raw[1]->offset, lifted->raw[1]->length), "BBBBBBBB");
  EXPECT_EQ(lifted->rest.find("AAAA"), std::string::npos);
}

TEST(OnnxWire, BytesTheWalkDoesNotTakeAreLeftToProtobuf) {
  testing::ModelBuilder b;
  b.input("x", {4});
  b.output("y", {4});
  b.initializer("w", {4}, {1, 2, 3, 4});
  b.node("Add", {"x", "w"}, {"y"});
  const std::string bytes = b.bytes();
  // Cut anywhere, the walk either refuses or leaves bytes protobuf refuses as well: it never
  // turns a bad file into a model.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    const std::string part = bytes.substr(0, cut);
    onnx::ModelProto whole;
    const bool whole_ok = whole.ParseFromString(part);
    const std::optional<LiftedModel> lifted = lift_initializer_data(part);
    if (!lifted) continue;
    onnx::ModelProto rest;
    EXPECT_EQ(rest.ParseFromString(lifted->rest), whole_ok) << "cut at " << cut;
  }
  // A group, a graph field of the wrong wire type, raw_data as a number, field number 0, a
  // length past the end, a varint of eleven bytes.
  EXPECT_FALSE(lift_initializer_data(bytes + varint(50 << 3 | 3) + varint(50 << 3 | 4)));
  EXPECT_FALSE(lift_initializer_data(varint(7 << 3) + varint(5) + bytes));
  EXPECT_FALSE(lift_initializer_data(field(7, field(5, varint(9 << 3) + varint(1)))));
  EXPECT_FALSE(lift_initializer_data(varint(0 << 3 | 2) + varint(0)));
  EXPECT_FALSE(lift_initializer_data(varint(7 << 3 | 2) + varint(100) + "short"));
  EXPECT_FALSE(lift_initializer_data(varint(1 << 3) + std::string(10, '\xff') + '\x01'));
  EXPECT_TRUE(lift_initializer_data(""));  // an empty message is well-formed
}

}  // namespace
}  // namespace kiln
