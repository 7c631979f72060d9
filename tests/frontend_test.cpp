// kiln's JSON model format: loading, and an error naming the JSON path for each mistake.
#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/compile.h"
#include "frontend/json/json_model.h"
#include "frontend/model_loader.h"
#include "ops/reference.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

std::string load_error(const std::string& text) {
  try {
    parse_json_model(text, "m.json", std::filesystem::temp_directory_path());
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

const char* kGood = R"({
  "format": "kiln-graph", "version": 1, "name": "tiny",
  "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 3]}],
  "parameters": [{"name": "s", "value": 2.0}, {"name": "v", "value": [1, 2, 3], "dtype": "float32"}],
  "nodes": [
    {"op": "mul", "inputs": ["x", "s"], "outputs": ["a"]},
    {"op": "add", "inputs": ["a", "v"], "outputs": ["b"]},
    {"op": "softmax", "inputs": ["b"], "outputs": ["y"], "attrs": {"axis": 1}}
  ],
  "outputs": ["y"]
})";

TEST(JsonModel, LoadsAndRuns) {
  Graph g = parse_json_model(kGood, "m.json", ".");
  EXPECT_EQ(g.name(), "tiny");
  ASSERT_EQ(g.nodes().size(), 3u);
  Function f = compile(g);
  Tensor x = Tensor::from_doubles(DType::kFloat32, {2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_TRUE(testing::tensors_close(f({x})[0], evaluate_reference(g, {x})[0]));
}

// Found by fuzz_json_loader: an overflowing number is a clear error, not a foreign exception.
TEST(JsonModel, NumbersTooLargeForAnyTypeAreInvalidJson) {
  EXPECT_NE(load_error(R"({"format": "kiln-graph", "inputs": [5500000000000011E0021304699677]})")
                .find("invalid JSON: a number out of range"),
            std::string::npos);
}

TEST(JsonModel, ErrorsNameTheJsonPath) {
  auto with_node = [](const std::string& node) {
    std::string s = kGood;
    s.replace(
        s.find(R"({"op": "softmax")"),
        std::string(R"({"op": "softmax", "inputs": ["b"], "outputs": ["y"], "attrs": {"axis": 1}})")
            .size(),
        node);
    return s;
  };
  EXPECT_EQ(
      load_error(with_node(
          R"({"op": "softmax", "inputs": ["b"], "outputs": ["y"], "attrs": {"axis": "one"}})")),
      "m.json: nodes[2].attrs.axis: expected an integer, got a string");
  EXPECT_EQ(load_error(with_node(
                R"({"op": "softmax", "inputs": ["b"], "outputs": ["y"], "attrs": {"axsi": 1}})")),
            "m.json: nodes[2].attrs.axsi: unknown attribute (this op takes axis, safe)");
  EXPECT_EQ(load_error(with_node(R"({"op": "softmax", "inputs": ["q"], "outputs": ["y"]})")),
            "m.json: nodes[2].inputs[0]: unknown variable 'q' (defined nowhere before this node)");
  EXPECT_NE(load_error(with_node(R"({"op": "softmx", "inputs": ["b"], "outputs": ["y"]})"))
                .find("m.json: nodes[2].op: unknown op 'softmx'"),
            std::string::npos);
  EXPECT_EQ(load_error(with_node(R"({"op": "softmax", "inputs": ["b"]})")),
            "m.json: nodes[2].outputs: missing");
  EXPECT_EQ(load_error(with_node(R"({"op": "softmax", "inputs": ["b"], "outputs": ["a"]})")),
            "m.json: nodes[2].outputs[0]: name 'a' is already used");
  std::string shape_err =
      load_error(with_node(R"({"op": "matmul", "inputs": ["v", "s"], "outputs": ["y"]})"));
  EXPECT_NE(shape_err.find("m.json: nodes[2]: node 2 (matmul)"), std::string::npos) << shape_err;
  std::string syntax = load_error("{\"inputs\": [1, 2,, 3]}");
  EXPECT_NE(syntax.find("m.json: byte 17: invalid JSON"), std::string::npos) << syntax;
  std::string bad_dtype = kGood;
  bad_dtype.replace(bad_dtype.find("\"float32\""), 9, "\"float33\"");
  EXPECT_EQ(load_error(bad_dtype), "m.json: inputs[0].dtype: unknown dtype 'float33'");
  std::string bad_dim = kGood;
  bad_dim.replace(bad_dim.find("[null, 3]"), 9, "[null, -7]");
  EXPECT_NE(load_error(bad_dim).find("m.json: inputs[0].shape[1]: expected a dimension"),
            std::string::npos);
  std::string bad_out = kGood;
  bad_out.replace(bad_out.find("\"outputs\": [\"y\"]\n"), 16, "\"outputs\": [\"zz\"]");
  EXPECT_EQ(load_error(bad_out), "m.json: outputs[0]: unknown variable 'zz'");
  EXPECT_EQ(load_error("[]"), "m.json: (root): expected an object");
  EXPECT_EQ(load_error("{}"), "m.json: inputs: missing");
}

TEST(JsonModel, ParameterFilesResolveAndReportProblems) {
  std::string dir = testing::temp_dir("jsonparams");
  write_npy(dir + "/w.npy", Tensor::from_doubles(DType::kFloat32, {3}, {1, 2, 3}));
  write_file_atomic(dir + "/bad.npy", "not an npy file");
  auto model = [](const std::string& file) {
    return std::string(R"({"inputs": [{"name": "x", "dtype": "float32", "shape": [3]}],
      "parameters": [{"name": "w", "file": ")") +
           file + R"("}],
      "nodes": [{"op": "add", "inputs": ["x", "w"], "outputs": ["y"]}], "outputs": ["y"]})";
  };
  write_file_atomic(dir + "/ok.json", model("w.npy"));
  write_file_atomic(dir + "/missing.json", model("nope.npy"));
  write_file_atomic(dir + "/corrupt.json", model("bad.npy"));
  EXPECT_NO_THROW(load_model(dir + "/ok.json"));
  try {
    load_model(dir + "/missing.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("parameters[0].file: no such file"), std::string::npos)
        << e.what();
  }
  try {
    load_model(dir + "/corrupt.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("parameters[0].file: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.npy: byte 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_model(dir + "/model.onnx"), UserError);
  EXPECT_THROW(load_model(dir + "/w.npy"), UserError);
}

}  // namespace
}  // namespace kiln
