// kiln report's data: the optimized graph, code per node with source-map origins, what each
// pass changed, the cache story and the profile; the page embeds it without breaking out
// of its <script>. (tests/report_browser.py opens the page in Chromium.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "compiler/report/report.h"
#include "frontend/model_loader.h"
#include "helpers.h"
#include "ops/builders.h"
#include "runtime/io/npy.h"

namespace kiln {
namespace {

using nlohmann::json;

TEST(Report, TheMlpsGraphCodePassesCacheAndProfile) {
  const std::string dir = std::string(KILN_EXAMPLES_DIR) + "/mlp";
  Graph g = load_model(dir + "/mlp.json");
  ReportOptions o;
  o.compile.cache_dir = testing::temp_dir("report-cache");
  o.inputs["x"] = read_npy(dir + "/input.npy");
  o.repeat = 3;
  const json d = json::parse(report_json(g, o));
  EXPECT_EQ(d.at("given").at("nodes").size(), 9u);
  const json& nodes = d.at("graph").at("nodes");
  ASSERT_EQ(nodes.size(), 4u) << "three fused layers and the softmax";
  for (const json& n : nodes) {
    const std::string id = std::to_string(n.at("id").get<int>());
    ASSERT_TRUE(d.at("code").at("nodes").contains(id)) << n.dump();
    for (const json& s : d.at("code").at("nodes").at(id)) {
      EXPECT_FALSE(s.at("fragment").get<std::string>().empty());
      EXPECT_GE(s.at("line").get<int>(), 1);
      EXPECT_LT(s.at("text").get<size_t>(), d.at("code").at("texts").size());
    }
  }
  EXPECT_EQ(nodes[0].at("kind"), "compute");
  EXPECT_EQ(nodes[3].at("kind"), "reduction");
  // Every edge's endpoints are described, with dtype and dims (-1: dynamic).
  const json& x = d.at("graph").at("vars").at(std::to_string(nodes[0].at("inputs")[0].get<int>()));
  EXPECT_EQ(x.at("dtype"), "float32");
  EXPECT_EQ(x.at("dims"), json::array({-1, 784}));
  // Passes chain their node counts from the given graph to the optimized one.
  const json& passes = d.at("passes");
  ASSERT_FALSE(passes.empty());
  EXPECT_EQ(passes.front().at("nodes_before"), 9);
  EXPECT_EQ(passes.back().at("nodes_after"), 4);
  bool fused = false;
  for (size_t i = 0; i < passes.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(passes[i].at("nodes_before"), passes[i - 1].at("nodes_after"));
    }
    for (const json& c : passes[i].at("changes")) fused = fused || c == "+3 with_epilogue";
  }
  EXPECT_TRUE(fused) << passes.dump();
  EXPECT_EQ(d.at("cache").at("status"), "miss");
  EXPECT_EQ(d.at("cache").at("tiers"),
            json::parse(R"J([["memory (this process)","miss"],["local disk","miss"],)J"
                        R"J(["remote","not configured"]])J"));
  EXPECT_EQ(d.at("cache").at("key").get<std::string>().size(), 64u);
  EXPECT_FALSE(d.at("cache").at("components").empty());
  const json& p = d.at("profile");
  EXPECT_EQ(p.at("runs"), 3);
  ASSERT_EQ(p.at("steps").size(), 4u);
  EXPECT_EQ(p.at("steps")[0].at("node"), nodes[0].at("id"));
  EXPECT_EQ(p.at("steps")[0].at("flops"), 2.0 * 4 * 784 * 256) << "fc1 on a (4, 784) input";
  // The same model again: a hit, and without inputs no profile.
  o.inputs.clear();
  const json again = json::parse(report_json(g, o));
  EXPECT_NE(again.at("cache").at("status"), "miss") << "a hit, or memo in this process";
  EXPECT_EQ(again.at("cache").at("tiers")[0][1], "hit") << "loaded in this process already";
  EXPECT_TRUE(again.at("profile").is_null());
}

// On CUDA (the emulator here) a node's code is its host thunk and its kernel from
// kernels.cu.
TEST(Report, CudaNodesShowTheirKernels) {
  ::setenv("KILN_CUDA_DEVICE", "emulator", 1);
  Graph g("report_cuda");
  Var x = input(g, "x", DType::kFloat32, {4, 33});
  g.set_outputs({softmax(x).var()});
  ReportOptions o;
  o.compile.cache_dir = testing::temp_dir("report-cache3");
  o.compile.device = "cuda";
  const json d = json::parse(report_json(g, o));
  ::unsetenv("KILN_CUDA_DEVICE");
  bool kernel = false, host = false;
  for (const json& n : d.at("graph").at("nodes")) {
    if (n.at("op") != "cuda:softmax") continue;
    for (const json& s : d.at("code").at("nodes").at(std::to_string(n.at("id").get<int>()))) {
      const std::string f = s.at("fragment");
      const std::string text = d.at("code").at("texts").at(s.at("text").get<size_t>());
      if (f.rfind("kernels.cu: ", 0) == 0)
        kernel = kernel || text.find("__global__") != std::string::npos;
      else
        host = host || text.find("KILN_LAUNCH") != std::string::npos;
    }
  }
  EXPECT_TRUE(kernel) << "the softmax kernel from kernels.cu";
  // Two identical softmaxes: the second launches the first's kernel, and says so.
  {
    ::setenv("KILN_CUDA_DEVICE", "emulator", 1);
    Graph h("report_cuda_shared");
    Var a = input(h, "a", DType::kFloat32, {4, 33});
    Var b = input(h, "b", DType::kFloat32, {4, 33});
    h.set_outputs({softmax(a).var(), softmax(b).var()});
    const json e = json::parse(report_json(h, o));
    ::unsetenv("KILN_CUDA_DEVICE");
    int with_kernel = 0;
    bool shared = false;
    for (const json& n : e.at("graph").at("nodes")) {
      if (n.at("op") != "cuda:softmax") continue;
      bool has = false;
      for (const json& s : e.at("code").at("nodes").at(std::to_string(n.at("id").get<int>()))) {
        const std::string f = s.at("fragment");
        has = has || f.rfind("kernels.cu: ", 0) == 0;
        shared = shared || f.find("the same kernel") != std::string::npos;
      }
      with_kernel += has;
    }
    EXPECT_EQ(with_kernel, 2) << "both softmax nodes show the kernel they launch";
    EXPECT_TRUE(shared);
  }
  EXPECT_TRUE(host) << "the host thunk that launches it";
  EXPECT_EQ(d.at("cache").at("device"), "kiln CUDA emulator on the CPU (not a GPU)");
  // With device inputs and outputs the profile's inputs go to the device first.
  ::setenv("KILN_CUDA_DEVICE", "emulator", 1);
  o.compile.device_io = true;
  std::mt19937 rng(4);
  o.inputs["x"] = testing::random_tensor(DType::kFloat32, {4, 33}, rng);
  const json io = json::parse(report_json(g, o));
  ::unsetenv("KILN_CUDA_DEVICE");
  ASSERT_FALSE(io.at("profile").is_null());
  EXPECT_EQ(io.at("profile").at("runs"), 10);
}

TEST(Report, ThePageEmbedsTheDataWithoutEndingItsScript) {
  Graph g("a</script><script>alert(1)</script>");
  Var x = input(g, "x</script>", DType::kFloat32, {3});
  g.set_outputs({exp(x).var()});
  ReportOptions o;
  o.compile.cache_dir = testing::temp_dir("report-cache2");
  const std::string page = report_html(g, o);
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_EQ(page.find("x</script>"), std::string::npos);
  EXPECT_EQ(page.find("<script src"), std::string::npos) << "nothing loaded from elsewhere";
  const std::string open = "<script id=\"kiln-data\" type=\"application/json\">";
  const size_t a = page.find(open) + open.size();
  const size_t b = page.find("</script>", a);
  const json d = json::parse(page.substr(a, b - a));
  EXPECT_EQ(d.at("model"), "a</script><script>alert(1)</script>");
}

}  // namespace
}  // namespace kiln
