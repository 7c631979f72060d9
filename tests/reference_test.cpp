// Kiln's compiled ops against numpy, an independent reference: tests/reference/make_cases.py
// writes the cases (inputs full of NaN, +-inf, -0.0, .5 ties, denormals and the largest
// finite values, in sizes below and above every vector width, rows of 16+ with the extreme
// value in the tail, operands broadcast along rows and columns) and numpy's outputs. Each
// case compiles once (dynamic dims) with a small split grain, so the larger runs split across
// workers, and runs every size with contiguous inputs and again with strided views.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "frontend/json/json_model.h"
#include "runtime/io/npy.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path cases_dir() {
  const char* dir = std::getenv("KILN_REFERENCE_CASES");
  return dir && *dir ? fs::path(dir) : fs::path(KILN_REFERENCE_CASES);
}

const json& all_cases() {
  static const json cases = [] {
    const fs::path index = cases_dir() / "cases.json";
    if (!fs::exists(index)) return json::array();
    return json::parse(read_file(index));
  }();
  return cases;
}

// Distance in units in the last place between two finite values of `dtype`.
uint64_t ulps(double a, double b, DType dtype) {
  auto ordered = [](int64_t bits) { return bits < 0 ? INT64_MIN - bits : bits; };
  if (dtype == DType::kFloat32) {
    float fa = static_cast<float>(a), fb = static_cast<float>(b);
    int32_t ia, ib;
    std::memcpy(&ia, &fa, 4);
    std::memcpy(&ib, &fb, 4);
    int64_t oa = ia < 0 ? INT32_MIN - static_cast<int64_t>(ia) : ia;
    int64_t ob = ib < 0 ? INT32_MIN - static_cast<int64_t>(ib) : ib;
    return static_cast<uint64_t>(oa > ob ? oa - ob : ob - oa);
  }
  int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  int64_t oa = ordered(ia), ob = ordered(ib);
  return oa > ob ? static_cast<uint64_t>(oa) - static_cast<uint64_t>(ob)
                 : static_cast<uint64_t>(ob) - static_cast<uint64_t>(oa);
}

// "" when `got` matches numpy's `want`, else the first element that does not.
std::string mismatch(const Tensor& got, const Tensor& want, const Tensor& input, const json& c,
                     double atol) {
  if (got.shape() != want.shape()) return "shape " + got.describe() + ", numpy " + want.describe();
  if (got.dtype() != want.dtype()) return "dtype " + got.describe() + ", numpy " + want.describe();
  const uint64_t max_ulp = c.at("ulp").get<uint64_t>();
  const bool zero_sign = c.at("zero_sign").get<bool>();
  for (int64_t i = 0; i < want.numel(); ++i) {
    std::string why;
    if (!is_float(want.dtype())) {
      if (got.load_int(i) != want.load_int(i)) why = "differs";
    } else {
      const double g = got.load(i), w = want.load(i);
      if (std::isnan(w) || std::isnan(g)) {
        if (std::isnan(w) != std::isnan(g)) why = "NaN on one side only";
      } else if (std::isinf(w) || std::isinf(g)) {
        if (g != w) why = "infinities differ";
      } else if (w == 0 && g == 0) {
        if (zero_sign && std::signbit(w) != std::signbit(g)) why = "the sign of zero differs";
      } else if (!(atol > 0 && std::fabs(g - w) <= atol) && ulps(g, w, want.dtype()) > max_ulp) {
        why = std::to_string(ulps(g, w, want.dtype())) + " ulp apart (bound " +
              std::to_string(max_ulp) + ")";
      }
    }
    if (why.empty()) continue;
    char buf[256];
    const double x = input.numel() == want.numel() ? input.load(i) : NAN;
    std::snprintf(buf, sizeof buf, "element %lld of %s: kiln %.17g, numpy %.17g (input %.17g): ",
                  static_cast<long long>(i), want.describe().c_str(), got.load(i), want.load(i), x);
    return buf + why;
  }
  return "";
}

// A one-node model: inputs x0.. with dynamic dims (a broadcast operand keeps its 1).
Graph model_of(const json& c) {
  json m = {{"format", "kiln-graph"}, {"version", 1}, {"name", c.at("name")}};
  json inputs = json::array(), names = json::array();
  const size_t n = c.at("runs").at(0).at("inputs").size();
  const std::string pattern = c.at("pattern");
  for (size_t k = 0; k < n; ++k) {
    json shape = {nullptr, nullptr};
    if (k > 0 && pattern == "row") shape = {1, nullptr};
    if (k > 0 && pattern == "col") shape = {nullptr, 1};
    if (c.contains("shapes") && !c.at("shapes").is_null()) shape = c.at("shapes").at(k);
    // Input dtypes come from the files: where's condition is bool, a cast's source is the
    // case's dtype.
    const Tensor first =
        read_npy(cases_dir() / c.at("runs").at(0).at("inputs").at(k).get<std::string>());
    inputs.push_back({{"name", "x" + std::to_string(k)},
                      {"dtype", std::string(dtype_name(first.dtype()))},
                      {"shape", shape}});
    names.push_back("x" + std::to_string(k));
  }
  m["inputs"] = inputs;
  m["nodes"] = json::array(
      {{{"op", c.at("op")}, {"attrs", c.at("attrs")}, {"inputs", names}, {"outputs", {"y"}}}});
  m["outputs"] = {"y"};
  return parse_json_model(m.dump(), c.at("name").get<std::string>() + ".json", cases_dir());
}

void check_category(const std::string& category) {
  const json& cases = all_cases();
  ASSERT_FALSE(cases.empty()) << "no reference cases in " << cases_dir()
                              << " (the reference_cases_generate test writes them)";
  int checked = 0;
  for (const json& c : cases) {
    if (c.at("category") != category) continue;
    SCOPED_TRACE(c.at("name").get<std::string>());
    CompileOptions options;
    options.split_grain = 256;  // runs of 512+ elements split across workers
    Function f = compile(model_of(c), options);
    int64_t largest = 0;
    for (const json& run : c.at("runs")) {
      std::vector<Tensor> inputs;
      for (const auto& file : run.at("inputs"))
        inputs.push_back(read_npy(cases_dir() / file.get<std::string>()));
      const Tensor want = read_npy(cases_dir() / run.at("output").get<std::string>());
      const double atol = run.at("atol").get<double>();
      largest = std::max(largest, want.numel());
      std::string diff = mismatch(f(inputs).at(0), want, inputs[0], c, atol);
      EXPECT_EQ(diff, "") << "contiguous inputs";
      // The same values through strided views.
      std::vector<Tensor> strided;
      for (const Tensor& t : inputs) strided.push_back(testing::non_contiguous(t));
      diff = mismatch(f(strided).at(0), want, inputs[0], c, atol);
      EXPECT_EQ(diff, "") << "strided inputs";
      ++checked;
    }
    if (c.at("split").get<bool>() && largest >= 4 * options.split_grain) {
      EXPECT_GT(f.stats().split_calls, 0) << "the large runs never split across workers";
    }
  }
  EXPECT_GT(checked, 0) << "no case of category " << category;
}

TEST(Reference, UnaryOpsMatchNumpy) { check_category("unary"); }
TEST(Reference, BinaryOpsMatchNumpyBroadcastingIncluded) { check_category("binary"); }
TEST(Reference, ComparisonsMatchNumpy) { check_category("compare"); }
TEST(Reference, ReductionsAndSoftmaxMatchNumpy) { check_category("reduce"); }
TEST(Reference, IntegerOpsMatchNumpyExactly) { check_category("integer"); }
TEST(Reference, WhereLogicalOpsAndCastsMatchNumpy) { check_category("misc"); }
TEST(Reference, MatmulGemmConvolutionAndPoolingMatchNumpy) { check_category("linalg"); }

}  // namespace
}  // namespace kiln
