// The ONNX frontend: weights stay parameters, load-time values, external data, and a clear
// error (never a crash) for truncated, corrupt, unsupported or inconsistent models.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>
#include <set>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "compiler/compile.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_tensor.h"
#include "ops/reference.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "tests/onnx_builder.h"

namespace kiln {
namespace {

const std::string kExamples = KILN_EXAMPLES_DIR;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

using testing::error_message;
using testing::ModelBuilder;
using testing::set_int;
using testing::set_string;

TEST(OnnxFrontend, InitializersAreParametersSoOneModuleServesAnyWeights) {
  const std::string path = kExamples + "/onnx/mlp/model.onnx";
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(read_file(path)));
  Graph original = parse_onnx_model(model.SerializeAsString(), "mlp", kExamples + "/onnx/mlp");
  // Change every weight: the new model must compile to the very same module.
  for (auto& init : *model.mutable_graph()->mutable_initializer()) {
    std::string raw = init.raw_data();
    for (size_t i = 0; i + 4 <= raw.size(); i += 4) {
      float v;
      std::memcpy(&v, raw.data() + i, 4);
      v = v * 0.5f + 0.01f;
      std::memcpy(raw.data() + i, &v, 4);
    }
    init.set_raw_data(raw);
  }
  Graph changed = parse_onnx_model(model.SerializeAsString(), "mlp", kExamples + "/onnx/mlp");
  Function a = compile(original), b = compile(changed);
  EXPECT_EQ(a.info().key, b.info().key);
  for (const Variable* c : original.constants()) EXPECT_TRUE(c->parameter) << c->name;
  EXPECT_EQ(generate_source(original), generate_source(changed));  // no weight is in the source
  Tensor x = read_npy(kExamples + "/onnx/mlp/x.npy");
  auto ya = a({x}), yb = b({x});
  EXPECT_FALSE(testing::tensors_close(ya[0], yb[0], 1e-3, 1e-6));
  EXPECT_TRUE(testing::tensors_close(yb[0], evaluate_reference(changed, {x})[0], 1e-4, 1e-6));
}

// Every node an ONNX node becomes carries its name, so labels, errors and kiln report say
// which node of the file it came from (BatchNormalization becomes several kiln nodes).
TEST(OnnxFrontend, NodesCarryTheirOnnxNodesNames) {
  Graph g = load_onnx_model(kExamples + "/onnx/resblock/model.onnx");
  const std::set<std::string> onnx_names{"/conv1/Conv",
                                         "/bn1/BatchNormalization",
                                         "/Relu",
                                         "/conv2/Conv",
                                         "/bn2/BatchNormalization",
                                         "/Add",
                                         "/Relu_1",
                                         "/down/Conv",
                                         "/ReduceMean"};
  std::set<std::string> seen;
  for (const auto& n : g.nodes()) {
    EXPECT_TRUE(onnx_names.count(n->name)) << n->label();
    seen.insert(n->name);
  }
  EXPECT_TRUE(seen.count("/bn1/BatchNormalization")) << "a node the normalization expanded into";
  EXPECT_NE(g.nodes()[0]->label().find("'/conv1/Conv'"), std::string::npos)
      << g.nodes()[0]->label();
}

TEST(OnnxFrontend, TruncatedOrCorruptFilesAreClearErrors) {
  const std::string bytes = read_file(kExamples + "/onnx/lenet/model.onnx");
  ASSERT_GT(bytes.size(), 1000u);
  int errors = 0;
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{40}, size_t{200}, bytes.size() / 3,
                     bytes.size() / 2, bytes.size() - 100, bytes.size() - 1}) {
    try {
      parse_onnx_model(bytes.substr(0, cut), "lenet.onnx", ".");
    } catch (const UserError& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("lenet.onnx"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(errors, 9);  // no truncation point yields a model
  std::string corrupt = bytes;
  for (size_t i = 10; i < corrupt.size(); i += 97)
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  EXPECT_THROW(parse_onnx_model(corrupt, "corrupt.onnx", "."), UserError);
  std::string m = error_message<UserError>([&] { parse_onnx_model("", "empty.onnx", "."); });
  EXPECT_NE(m.find("empty.onnx: the file is empty"), std::string::npos) << m;
  m = error_message<UserError>([&] { parse_onnx_model("not a model at all", "text.onnx", "."); });
  EXPECT_NE(m.find("text.onnx"), std::string::npos) << m;
}

TEST(OnnxFrontend, OneErrorListsEveryUnsupportedOpAndAttribute) {
  ModelBuilder b;
  b.input("x", {1, 3, 8, 8});
  b.node("Relu", {"x"}, {"r"}, "ok_relu");
  b.node("StringNormalizer", {"r"}, {"l"}, "norm1");
  {
    // A pool of strings: kiln has no string tensors.
    auto* pool = b.node("TfIdfVectorizer", {"l"}, {"t"}, "tfidf")->add_attribute();
    pool->set_name("pool_strings");
    pool->set_type(onnx::AttributeProto::STRINGS);
    pool->add_strings("a");
  }
  set_int(b.node("BatchNormalization", {"r", "r", "r", "r", "r"}, {"p"}, "bn1"), "spatial", 0);
  set_string(b.node("Pad", {"p"}, {"q"}, "pad1"), "mode", "mirror");
  set_int(b.node("Relu", {"q"}, {"y"}, "relu2"), "bogus", 3);
  b.node("Gelu", {"y"}, {"z"}, "custom")->set_domain("com.example");
  b.output("z", {1, 3, 8, 8});
  std::string m =
      error_message<UnsupportedError>([&] { parse_onnx_model(b.bytes(), "m.onnx", "."); });
  EXPECT_NE(m.find("m.onnx: the model uses 6 unsupported features (ops: StringNormalizer, "
                   "com.example.Gelu)"),
            std::string::npos)
      << m;
  for (const char* want :
       {"node 1 'norm1' (StringNormalizer): op StringNormalizer is not supported",
        "node 2 'tfidf' (TfIdfVectorizer): attribute pool_strings (string tensors are not "
        "supported)",
        "node 3 'bn1' (BatchNormalization): attribute spatial=0",
        "node 4 'pad1' (Pad): attribute mode=mirror", "node 5 'relu2' (Relu): attribute 'bogus'",
        "node 6 'custom' (com.example.Gelu)"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
  EXPECT_EQ(m.find("ok_relu"), std::string::npos);
}

// Compress by a constant condition: the kept slices by index; a condition true past the axis
// is an error naming the position.
TEST(OnnxFrontend, CompressKeepsTheSlicesItsConditionNames) {
  ModelBuilder b;
  b.input("x", {3, 4});
  b.ints_initializer("keep", {0, 1, 0, 1});
  b.node("Compress", {"x", "keep"}, {"y"}, "pick");
  set_int(b.g->mutable_node(0), "axis", 1);
  b.output("y", {3, 2});
  Graph g = parse_onnx_model(b.bytes(), "c.onnx", ".");
  const Tensor x = Tensor::from_doubles(DType::kFloat32, {3, 4},
                                        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor y = compile(g)({x}).at(0);
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_doubles(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  ModelBuilder c;
  c.input("x", {3, 4});
  c.ints_initializer("keep", {0, 0, 0, 0, 1});
  c.node("Compress", {"x", "keep"}, {"y"}, "pick");
  set_int(c.g->mutable_node(0), "axis", 1);
  c.output("y", {3, -1});
  const std::string m = error_message<UserError>([&] { parse_onnx_model(c.bytes(), "c.onnx", "."); });
  EXPECT_NE(m.find("node 0 'pick' (Compress): Compress's condition is true at 4, past the axis's 4 "
                   "entries"),
            std::string::npos)
      << m;
}

// Reshape with allowzero: a 0 is a dimension of size 0 (not a copy of the input's), so only
// an empty input fits; one with elements is a clear error naming the node.
TEST(OnnxFrontend, ReshapeAllowzeroMakesSizeZeroDimensions) {
  auto model = [](std::vector<int64_t> in_dims) {
    ModelBuilder b;
    b.input("x", in_dims);
    b.ints_initializer("shape", {3, 4, 0});
    b.node("Reshape", {"x", "shape"}, {"y"}, "rz");
    set_int(b.g->mutable_node(0), "allowzero", 1);
    b.output("y", {3, 4, 0});
    return b.bytes();
  };
  Graph g = parse_onnx_model(model({0, 3, 4}), "r.onnx", ".");
  const Tensor y = compile(g)({Tensor::zeros(DType::kFloat32, {0, 3, 4})}).at(0);
  EXPECT_EQ(y.shape(), (Shape{3, 4, 0}));
  const std::string m = error_message<UserError>([&] {
    Graph bad = parse_onnx_model(model({2, 3, 4}), "r.onnx", ".");
    compile(bad)({Tensor::zeros(DType::kFloat32, {2, 3, 4})});
  });
  EXPECT_NE(m.find("'rz' (Reshape)"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot reshape float32 (2, 3, 4) to (3, 4, 0)"), std::string::npos) << m;
}

// Einsum with a letter repeated in a term takes the diagonal: against hand-computed values
// for a batch of diagonals, a trace, a letter three times, and a diagonal feeding a product;
// sizes that differ under one letter are an error naming the term.
TEST(OnnxFrontend, EinsumDiagonalsAgainstHandValues) {
  auto run = [](const std::string& eq, std::vector<std::vector<int64_t>> dims,
                const std::vector<Tensor>& xs) {
    ModelBuilder b;
    std::vector<std::string> names;
    for (size_t k = 0; k < dims.size(); ++k) {
      names.push_back("x" + std::to_string(k));
      b.input(names.back(), dims[k]);
    }
    set_string(b.node("Einsum", names, {"y"}, "ein"), "equation", eq);
    b.output("y", {-1});
    Graph g = parse_onnx_model(b.bytes(), "e.onnx", ".");
    return compile(g)(xs).at(0).to_doubles();
  };
  std::vector<double> v(2 * 3 * 3);
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<double>(k);
  const Tensor x = Tensor::from_doubles(DType::kFloat32, {2, 3, 3}, v);
  EXPECT_EQ(run("bii->bi", {{2, 3, 3}}, {x}), (std::vector<double>{0, 4, 8, 9, 13, 17}));
  EXPECT_EQ(run("...ii->...i", {{2, 3, 3}}, {x}), (std::vector<double>{0, 4, 8, 9, 13, 17}));
  EXPECT_EQ(run("bii->b", {{2, 3, 3}}, {x}), (std::vector<double>{12, 39}));  // traces
  std::vector<double> c(8);
  for (size_t k = 0; k < c.size(); ++k) c[k] = static_cast<double>(k);
  const Tensor cube = Tensor::from_doubles(DType::kFloat32, {2, 2, 2}, c);
  EXPECT_EQ(run("iii->i", {{2, 2, 2}}, {cube}), (std::vector<double>{0, 7}));
  // diag(m) . w: m's diagonal (0, 4, 8) against w = (1, 2, 3) -> 0 + 8 + 24.
  const Tensor m = Tensor::from_doubles(DType::kFloat32, {3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor w = Tensor::from_doubles(DType::kFloat32, {3}, {1, 2, 3});
  EXPECT_EQ(run("ii,i->", {{3, 3}, {3}}, {m, w}), (std::vector<double>{32}));
  const std::string err = error_message<UserError>([&] {
    run("ii->i", {{2, 3}}, {Tensor::zeros(DType::kFloat32, {2, 3})});
  });
  EXPECT_NE(err.find("term 'ii' repeats 'i' over dimensions of 2 and 3"), std::string::npos) << err;
}

// Found by fuzz_onnx_loader: a target shape whose element count overflows 64 bits.
TEST(OnnxFrontend, ShapesTooLargeForSixtyFourBitsAreClearErrors) {
  ModelBuilder b;
  b.input("x", {4, 4});
  b.ints_initializer("target", {16, 576460752303423492});
  b.node("Reshape", {"x", "target"}, {"y"});
  b.output("y", {16, 1});
  const std::string m =
      error_message<UserError>([&] { parse_onnx_model(b.bytes(), "big.onnx", "."); });
  EXPECT_NE(m.find("big.onnx: node 0 (Reshape)"), std::string::npos) << m;
  EXPECT_NE(m.find("more elements than fit in 64 bits"), std::string::npos) << m;
  // A declared input no tensor can have: refused before any shape rule multiplies it.
  ModelBuilder c;
  c.input("x", {44731444445077520, 32773});
  c.node("Flatten", {"x"}, {"y"});
  c.output("y", {-1, -1});
  const std::string n =
      error_message<UserError>([&] { parse_onnx_model(c.bytes(), "flat.onnx", "."); });
  // Split sizes whose running sum overflows.
  ModelBuilder sp;
  sp.input("x", {4, 6});
  sp.ints_initializer("sizes", {64, 9223372036854775796});
  set_int(sp.node("Split", {"x", "sizes"}, {"a", "b"}), "axis", 1);
  sp.output("a", {4, -1});
  sp.output("b", {4, -1});
  const std::string q =
      error_message<UserError>([&] { parse_onnx_model(sp.bytes(), "split.onnx", "."); });
  EXPECT_NE(
      q.find("split.onnx: node 0 (Split): split size 9223372036854775796 is negative or too large"),
      std::string::npos)
      << q;
  EXPECT_NE(n.find("graph input 'x': float32 (44731444445077520, 32773) has more elements than "
                   "fit in 64 bits"),
            std::string::npos)
      << n;
}

// A shape input that is a graph input is named as one whose value the loader needs
// (frontend/model_function.h builds such models per value set).
TEST(OnnxFrontend, ShapeInputsMustBeKnownAtLoadTime) {
  ModelBuilder b;
  b.input("x", {-1, 6});
  b.input("shape", {2}, onnx::TensorProto::INT64);
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape_by_input");
  b.output("y", {-1, -1});
  std::string m =
      error_message<UnsupportedError>([&] { parse_onnx_model(b.bytes(), "m.onnx", "."); });
  EXPECT_NE(m.find("node 0 'reshape_by_input' (Reshape): input 1 'shape' (shape) is a graph "
                   "input whose value decides the graph"),
            std::string::npos)
      << m;
  try {
    parse_onnx_model(b.bytes(), "m.onnx", ".");
  } catch (const InputValueNeeded& e) {
    EXPECT_EQ(e.input(), "shape");
  }

  // Shape arithmetic on static dimensions is folded, Constant nodes are values: the
  // Reshape below gets (x.shape[0] * 2, 3) at load time.
  ModelBuilder c;
  c.input("x", {4, 6});
  c.node("Shape", {"x"}, {"s"});
  c.ints_initializer("zero", {0});
  c.node("Gather", {"s", "zero"}, {"n"});
  auto* k = c.node("Constant", {}, {"two"});
  auto* attr = k->add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  attr->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  attr->mutable_t()->add_dims(1);
  attr->mutable_t()->add_int64_data(2);
  c.node("Mul", {"n", "two"}, {"n2"});
  c.ints_initializer("three", {3});
  set_int(c.node("Concat", {"n2", "three"}, {"target"}), "axis", 0);
  c.node("Reshape", {"x", "target"}, {"y"});
  c.output("y", {8, 3});
  Graph g = parse_onnx_model(c.bytes(), "fold.onnx", ".");
  EXPECT_EQ(g.outputs()[0]->type.dims, (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(g.nodes().size(), 1u) << g.to_string();  // only the reshape runs
}

TEST(OnnxFrontend, ExternalDataIsReadFromTheModelsFolder) {
  const std::string dir = testing::temp_dir("onnx_external");
  std::vector<float> w{1, 2, 3, 4, 5, 6};
  std::string padding(16, 'z');  // the weight starts at offset 16
  write_file(dir + "/weights.bin",
             padding + std::string(reinterpret_cast<const char*>(w.data()), 24));
  auto make = [&](const std::string& location, const std::string& offset,
                  const std::string& length) {
    ModelBuilder b;
    b.input("x", {2, 3});
    auto* t = b.g->add_initializer();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(3);
    t->add_dims(2);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto [k, v] : {std::pair{"location", location}, {"offset", offset}, {"length", length}}) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    b.node("MatMul", {"x", "w"}, {"y"});
    b.output("y", {2, 2});
    return b.bytes();
  };
  Graph g = parse_onnx_model(make("weights.bin", "16", "24"), dir + "/m.onnx", dir);
  Tensor x = Tensor::from_doubles(DType::kFloat32, {2, 3}, {1, 0, 0, 0, 1, 1});
  auto y = compile(g)({x});
  EXPECT_EQ(y[0].to_doubles(), (std::vector<double>{1, 2, 8, 10}));
  std::string m = error_message<UserError>(
      [&] { parse_onnx_model(make("missing.bin", "0", "24"), "m.onnx", dir); });
  EXPECT_NE(m.find("initializer 0 'w': external data location: no such file"), std::string::npos)
      << m;
  EXPECT_NE(m.find("missing.bin"), std::string::npos) << m;
  m = error_message<UserError>(
      [&] { parse_onnx_model(make("weights.bin", "32", "24"), "m.onnx", dir); });
  EXPECT_NE(m.find("has 40 bytes; offset 32 length 24 runs past its end"), std::string::npos) << m;
  m = error_message<UserError>(
      [&] { parse_onnx_model(make("../etc/passwd", "0", "24"), "m.onnx", dir); });
  EXPECT_NE(m.find("must name a file inside the model's folder"), std::string::npos) << m;
  m = error_message<UserError>(
      [&] { parse_onnx_model(make("weights.bin", "0", "20"), "m.onnx", dir); });
  EXPECT_NE(m.find("external data has 20 bytes (offset 0 of "), std::string::npos) << m;
}

TEST(OnnxFrontend, InconsistentModelsNameTheNode) {
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.initializer("w", {4, 5}, std::vector<float>(20, 1.0f));
    b.node("MatMul", {"x", "w"}, {"y"}, "fc");
    b.output("y", {2, 5});
    std::string m = error_message<UserError>([&] { parse_onnx_model(b.bytes(), "m.onnx", "."); });
    EXPECT_NE(m.find("m.onnx: node 0 'fc' (MatMul)"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.initializer("w", {3, 5}, std::vector<float>(14, 1.0f));  // one value short
    b.node("MatMul", {"x", "w"}, {"y"});
    b.output("y", {2, 5});
    std::string m = error_message<UserError>([&] { parse_onnx_model(b.bytes(), "m.onnx", "."); });
    EXPECT_NE(m.find("initializer 0 'w': raw_data has 56 bytes, float32 (3, 5) needs 60"),
              std::string::npos)
        << m;
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.node("Relu", {"nowhere"}, {"y"}, "r");
    b.output("y", {2, 3});
    std::string m = error_message<UserError>([&] { parse_onnx_model(b.bytes(), "m.onnx", "."); });
    EXPECT_NE(m.find("node 0 'r' (Relu): input 0 'nowhere' is not produced by any earlier node"),
              std::string::npos)
        << m;
  }
  {
    ModelBuilder b(18);
    b.input("x", {2});
    b.node("Relu", {"x"}, {"y"});
    b.output("y", {2});
    std::string m =
        error_message<UnsupportedError>([&] { parse_onnx_model(b.bytes(), "m.onnx", "."); });
    EXPECT_NE(m.find("opset 18 is outside the supported 1..17"), std::string::npos) << m;
  }
}

TEST(OnnxFrontend, OutputsThatAreInputsOrConstantsAreCopiedOut) {
  ModelBuilder b;
  b.input("x", {3});
  b.node("Identity", {"x"}, {"y"});
  b.node("Shape", {"x"}, {"s"});
  b.output("y", {3});
  b.output("s", {1}, onnx::TensorProto::INT64);
  b.output("x", {3});
  Graph g = parse_onnx_model(b.bytes(), "m.onnx", ".");
  ASSERT_EQ(g.outputs().size(), 3u);
  EXPECT_EQ(g.outputs()[0]->name, "y");
  EXPECT_EQ(g.outputs()[1]->name, "s");
  Tensor x = Tensor::from_doubles(DType::kFloat32, {3}, {1, -2, 3});
  auto out = compile(g)({x});
  EXPECT_EQ(out[0].to_doubles(), x.to_doubles());
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{3}));
  EXPECT_EQ(out[2].to_doubles(), x.to_doubles());
}

// --- Regression tests for reader defects found by crafting inputs ---------------------------

onnx::TensorProto float_tensor(std::vector<int64_t> dims) {
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  return t;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TEST(OnnxHardening, DeclaredSizesAreCheckedBeforeAnythingIsAllocated) {
  // 2^28 floats (1 GiB) declared over 4 bytes of data: under a 256 MiB address-space limit the
  // error must still be the size mismatch, which it is only if nothing was allocated first.
  onnx::TensorProto big = float_tensor({int64_t{1} << 28});
  big.set_raw_data(std::string(4, '\0'));
  if (!kSanitized) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      rlimit lim{};
      ::getrlimit(RLIMIT_AS, &lim);
      rlim_t cur = 0;
      // Room for what is mapped already plus 256 MiB, not for the 1 GiB tensor.
      std::ifstream statm("/proc/self/statm");
      statm >> cur;
      lim.rlim_cur = cur * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (rlim_t{256} << 20);
      ::setrlimit(RLIMIT_AS, &lim);
      std::string msg;
      try {
        tensor_from_onnx(big, ".", "m.onnx: initializer 'w'");
        msg = "no error";
      } catch (const std::exception& e) {
        msg = e.what();
      }
      if (::write(fds[1], msg.data(), msg.size()) < 0) ::_exit(2);
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string msg;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
      msg.append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
    ::waitpid(pid, nullptr, 0);
    EXPECT_NE(msg.find("raw_data has 4 bytes"), std::string::npos) << msg;
  }
  // 2^36 floats: before the fix, std::bad_alloc surfaced as an internal error.
  onnx::TensorProto huge = float_tensor({int64_t{1} << 36});
  huge.set_raw_data(std::string(4, '\0'));
  const std::string huge_error =
      testing::error_of([&] { tensor_from_onnx(huge, ".", "m.onnx: initializer 'w'"); });
  EXPECT_NE(huge_error.find("raw_data has 4 bytes"), std::string::npos) << huge_error;
  EXPECT_NE(huge_error.find("needs 274877906944"), std::string::npos) << huge_error;
  onnx::TensorProto listed = float_tensor({int64_t{1} << 36});
  listed.add_float_data(1.0f);
  EXPECT_NE(testing::error_of([&] {
              tensor_from_onnx(listed, ".", "m.onnx");
            }).find("float_data holds 1 values"),
            std::string::npos);
  // Dimensions whose product wraps to one element.
  onnx::TensorProto wraps = float_tensor({274177, 67280421310721});
  wraps.set_raw_data(std::string(4, '\0'));
  EXPECT_NE(testing::error_of([&] {
              tensor_from_onnx(wraps, ".", "m.onnx");
            }).find("need more bytes than fit in 64 bits"),
            std::string::npos);
}

onnx::TensorProto external(const std::string& location, const std::string& offset = "",
                           const std::string& length = "") {
  onnx::TensorProto t = float_tensor({4});
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    if (v.empty()) return;
    auto* kv = t.add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  };
  add("location", location);
  add("offset", offset);
  add("length", length);
  return t;
}

TEST(OnnxHardening, ExternalDataStaysInsideTheModelsFolderAndItsBoundsCannotOverflow) {
  namespace fs = std::filesystem;
  const fs::path base = testing::temp_dir("onnx-external-escape");
  const fs::path model_dir = base / "model", secret = base / "secret.bin";
  fs::create_directories(model_dir);
  write_file(secret.string(), std::string(16, 's'));
  write_file((model_dir / "inside.bin").string(), std::string(16, '\0'));
  fs::create_symlink(secret, model_dir / "escape.bin");
  fs::create_symlink(model_dir / "inside.bin", model_dir / "alias.bin");
  std::string err =
      testing::error_of([&] { tensor_from_onnx(external("escape.bin"), model_dir, "m"); });
  EXPECT_NE(err.find("must name a file inside the model's folder"), std::string::npos) << err;
  EXPECT_NE(err.find(secret.string()), std::string::npos) << "names where it resolves: " << err;
  // A symlink that stays inside is fine.
  EXPECT_EQ(tensor_from_onnx(external("alias.bin"), model_dir, "m").numel(), 4);
  // offset + length past INT64_MAX.
  err = testing::error_of([&] {
    tensor_from_onnx(external("inside.bin", "9223372036854775000", "9223372036854775000"),
                     model_dir, "m");
  });
  EXPECT_NE(err.find("runs past its end"), std::string::npos) << err;
  err = testing::error_of(
      [&] { tensor_from_onnx(external("inside.bin", "4", "12x"), model_dir, "m"); });
  EXPECT_NE(err.find("is not a number"), std::string::npos) << err;
}

// Whether this process maps `file` now (/proc/self/maps lists every mapping with its file).
bool mapped_now(const std::string& file) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= file.size() &&
        line.compare(line.size() - file.size(), file.size(), file) == 0)
      return true;
  }
  return false;
}

TEST(OnnxFrontend, ExternalDataOnAlignedOffsetsIsMappedNotCopied) {
  const std::string dir = testing::temp_dir("onnx_external_map");
  // Three tensors: at 0 and at 4096 + 64 (mapped), and at 8200 (not a multiple of 64: copied).
  std::string bytes(8200 + 16, '\0');
  const std::vector<float> a{1.5f, -0.0f, std::numeric_limits<float>::infinity(), 4};
  const std::vector<float> b{-1, 2e-38f, 3, 7};
  const std::vector<float> c{9, 8, 7, 6};
  std::memcpy(bytes.data(), a.data(), 16);
  std::memcpy(bytes.data() + 4160, b.data(), 16);
  std::memcpy(bytes.data() + 8200, c.data(), 16);
  const std::string file = std::filesystem::canonical(dir).string() + "/weights.bin";
  write_file(file, bytes);
  const auto value = [&](const std::string& offset) {
    onnx::TensorProto t = external("weights.bin", offset, "16");
    return tensor_from_onnx(t, dir, "w");
  };
  {
    Tensor ta = value("0"), tb = value("4160");
    EXPECT_TRUE(mapped_now(file));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tb.data()) % 64, 0u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(std::memcmp(static_cast<const float*>(ta.data()) + i, &a[i], 4), 0) << i;
      EXPECT_EQ(std::memcmp(static_cast<const float*>(tb.data()) + i, &b[i], 4), 0) << i;
    }
  }
  EXPECT_FALSE(mapped_now(file)) << "the mapping goes with the last tensor that uses it";
  Tensor tc = value("8200");
  EXPECT_FALSE(mapped_now(file));
  EXPECT_EQ(tc.to_doubles(), (std::vector<double>{9, 8, 7, 6}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tc.data()) % 64, 0u);
}

// An initializer's raw_data inside the model file is copied once into its tensor, straight
// from the file's mapping, even where it lies 64-byte aligned: a view would keep the whole
// file mapped for the graph's life.
TEST(OnnxFrontend, InlineWeightsAreCopiedOnceAndTheFileIsNotKeptMapped) {
  const std::string dir = testing::temp_dir("onnx_inline_map");
  const std::string file = std::filesystem::canonical(dir).string() + "/model.onnx";
  std::vector<float> w(64), v(5), big(5u << 20);  // big: 20 MiB, copied across the cores
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) - 31.5f;
  w[3] = -0.0f;
  w[4] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000003);
  ModelBuilder b;
  b.input("x", {64});
  b.output("y", {64});
  b.initializer("w", {64}, w);
  b.initializer("v", {5}, v);
  b.initializer("big", {static_cast<int64_t>(big.size())}, big);
  b.node("Add", {"x", "w"}, {"y"});
  b.input("x5", {5});  // every weight used by a node, so every one stays a constant
  b.input("xb", {static_cast<int64_t>(big.size())});
  b.node("Mul", {"x5", "v"}, {"vo"});
  b.node("Mul", {"xb", "big"}, {"bo"});
  b.output("vo", {5});
  b.output("bo", {static_cast<int64_t>(big.size())});
  // Pad the doc string (serialized before the graph) until w's bytes start on 64 bytes.
  const std::string pattern(reinterpret_cast<const char*>(w.data()), 16);
  std::string bytes;
  for (int pad = 0; pad < 256; ++pad) {
    b.m.set_doc_string(std::string(static_cast<size_t>(pad), 'x'));
    bytes = b.bytes();
    if (bytes.find(pattern) % 64 == 0) break;
  }
  ASSERT_EQ(bytes.find(pattern) % 64, 0u);
  write_file(file, bytes);
  const auto values = [](const Graph& g) {
    std::map<std::string, std::vector<float>> out;
    for (const Variable* c : g.constants()) {
      const auto* p = static_cast<const float*>(c->value->data());
      out[c->name].assign(p, p + c->value->numel());
    }
    return out;
  };
  const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  {
    const Graph g = load_onnx_model(file);
    EXPECT_FALSE(mapped_now(file)) << "the mapping goes once the model is loaded";
    const auto got = values(g);
    const auto want = values(parse_onnx_model(bytes, "model.onnx", dir));  // protobuf's parse
    ASSERT_EQ(got.size(), 3u);
    EXPECT_TRUE(same_bits(got.at("w"), w));
    EXPECT_TRUE(same_bits(got.at("v"), v));
    EXPECT_TRUE(same_bits(got.at("big"), big));
    for (const auto& [name, vals] : want) EXPECT_TRUE(same_bits(got.at(name), vals)) << name;
    for (const Variable* c : g.constants())
      EXPECT_EQ(reinterpret_cast<uintptr_t>(c->value->data()) % 64, 0u) << c->name;
  }
  // A raw_data of the wrong size is named as before, through the mapped path.
  b.g->mutable_initializer(1)->mutable_raw_data()->resize(12);
  write_file(file, b.bytes());
  const std::string m = error_message<UserError>([&] { load_onnx_model(file); });
  EXPECT_NE(m.find("initializer 1 'v': raw_data has 12 bytes, float32 (5,) needs 20"),
            std::string::npos)
      << m;
  // Truncated files give protobuf's error, whichever way they are read.
  write_file(file, bytes.substr(0, bytes.size() / 2));
  const std::string cut = error_message<UserError>([&] { load_onnx_model(file); });
  EXPECT_NE(cut.find("not a valid ONNX model (the protobuf data is truncated or corrupt"),
            std::string::npos)
      << cut;
}

}  // namespace
}  // namespace kiln
