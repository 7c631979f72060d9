// Training-step time of the MLP and the small CNN of bench/train/run.py, from C++ (no Python
// in the loop), with each step's share of the time: where a training module spends it.
// Adam, batch 64, the cache wherever KILN_CACHE_DIR says. bench/train/run.py compares the
// same step against PyTorch; this one explains it.
// Usage: train_bench [--steps N] [--profile] [--model mlp|cnn] [--smoke]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/train/trainer.h"
#include "ops/builders.h"
#include "runtime/exec/profile_table.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kBatch = 64;

Tensor random_tensor(const Shape& shape, double scale, std::mt19937& rng) {
  std::normal_distribution<double> n(0, scale);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::vector<double> v(static_cast<size_t>(count));
  for (double& x : v) x = n(rng);
  return Tensor::from_doubles(DType::kFloat32, shape, v);
}

struct Model {
  Graph graph{"train"};
  Var loss;
  std::vector<std::pair<Variable*, Tensor>> params;
  std::map<std::string, Tensor> batch;
};

Var param(Model& m, const std::string& name, const Shape& shape, double scale, std::mt19937& rng) {
  Var v = input(m.graph, name, DType::kFloat32, shape);
  m.params.emplace_back(v.var(), random_tensor(shape, scale, rng));
  return v;
}

Model make(const std::string& name) {
  Model m;
  std::mt19937 rng(0);
  const Shape x_shape = name == "mlp" ? Shape{kBatch, 784} : Shape{kBatch, 1, 16, 16};
  Var x = input(m.graph, "x", DType::kFloat32, x_shape),
      y = input(m.graph, "y", DType::kFloat32, {kBatch, 10});
  Var logits;
  if (name == "mlp") {
    Var h =
        relu(matmul(x, param(m, "w1", {784, 256}, 0.05, rng)) + param(m, "b1", {256}, 0.05, rng));
    h = relu(matmul(h, param(m, "w2", {256, 128}, 0.05, rng)) + param(m, "b2", {128}, 0.05, rng));
    logits = matmul(h, param(m, "w3", {128, 10}, 0.05, rng)) + param(m, "b3", {10}, 0.05, rng);
  } else {
    const Attrs conv{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    const Attrs pool{{"kernel_shape", std::vector<int64_t>{2, 2}},
                     {"strides", std::vector<int64_t>{2, 2}}};
    Var h = apply(
        "conv", {x, param(m, "c1", {8, 1, 3, 3}, 0.3, rng), param(m, "c1b", {8}, 0.05, rng)}, conv);
    h = apply("max_pool", {relu(h)}, pool);
    h = apply("conv",
              {h, param(m, "c2", {16, 8, 3, 3}, 0.1, rng), param(m, "c2b", {16}, 0.05, rng)}, conv);
    h = apply("max_pool", {relu(h)}, pool);
    logits =
        matmul(flatten(h), param(m, "fc", {256, 10}, 0.05, rng)) + param(m, "fcb", {10}, 0.05, rng);
  }
  m.loss = -mean(sum(y * log_softmax(logits), {1}));
  m.batch["x"] = random_tensor(x_shape, 1.0, rng);
  Tensor onehot = Tensor::zeros(DType::kFloat32, {kBatch, 10});
  for (int64_t i = 0; i < kBatch; ++i) onehot.store(i * 10 + static_cast<int64_t>(rng() % 10), 1.0);
  m.batch["y"] = onehot;
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const std::string& name, int steps, bool profile) {
  Model m = make(name);
  const auto t0 = Clock::now();
  Trainer tr(std::move(m.graph), m.loss.var(), m.params, OptimizerOptions::parse("adam:lr=0.001"));
  const double compile_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i = 0; i < 5; ++i) tr.step(m.batch);
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t = Clock::now();
    tr.step(m.batch);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  std::printf("%-4s  %.3f ms/step (median of %d)  compile %.2f s\n", name.c_str(), median(ms),
              steps, compile_s);
  if (!profile) return;
  tr.function().set_profiling(true);
  for (int i = 0; i < steps; ++i) tr.step(m.batch);
  std::fputs(format_profile(tr.function().profile(), tr.function().run_profile()).c_str(), stdout);
  tr.function().set_profiling(false);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 200;
  bool profile = false;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--profile")) {
      profile = true;
    } else if (!std::strcmp(argv[i], "--smoke")) {  // ctest: a step of each model
      steps = 1;
    } else if (!std::strcmp(argv[i], "--model") && i + 1 < argc) {
      models.emplace_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: train_bench [--steps N] [--profile] [--model mlp|cnn] [--smoke]\n");
      return 2;
    }
  }
  if (models.empty()) models = {"mlp", "cnn"};
  for (const auto& name : models) bench(name, steps, profile);
}
