// Training steps: optimizer updates against hand-computed steps, in-place updates that
// allocate nothing after the first call, and an MLP and a small CNN that learn seeded
// synthetic tasks within the test's seconds.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/compile.h"
#include "compiler/train/trainer.h"
#include "ops/builders.h"
#include "rewrite/autodiff/grad.h"
#include "runtime/storage.h"
#include "tests/helpers.h"

namespace kiln {
namespace {

using testing::error_of;

// loss = mean((x w + b - t)^2) for x (4, 3), w (3, 2), b (2), t (4, 2), in float64.
struct Linear {
  std::vector<double> x, t, w, b;
  Linear() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    for (int i = 0; i < 12; ++i) x.push_back(u(rng));
    for (int i = 0; i < 8; ++i) t.push_back(u(rng));
    for (int i = 0; i < 6; ++i) w.push_back(u(rng));
    for (int i = 0; i < 2; ++i) b.push_back(u(rng));
  }
  // Hand-derived gradient: d/dz mean(z^2) = 2 z / 8.
  void grads(std::vector<double>& gw, std::vector<double>& gb) const {
    gw.assign(6, 0);
    gb.assign(2, 0);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 2; ++j) {
        double z = b[j] - t[i * 2 + j];
        for (int k = 0; k < 3; ++k) z += x[i * 3 + k] * w[k * 2 + j];
        const double dz = 2 * z / 8;
        gb[j] += dz;
        for (int k = 0; k < 3; ++k) gw[k * 2 + j] += x[i * 3 + k] * dz;
      }
    }
  }
  Trainer trainer(const OptimizerOptions& o) const {
    Graph g("linear");
    Var xv = input(g, "x", DType::kFloat64, {4, 3});
    Var tv = input(g, "t", DType::kFloat64, {4, 2});
    Var wv = input(g, "w", DType::kFloat64, {3, 2});
    Var bv = input(g, "b", DType::kFloat64, {2});
    Var d = matmul(xv, wv) + bv - tv;
    Var loss = mean(d * d);
    return Trainer(std::move(g), loss.var(),
                   {{wv.var(), Tensor::from_doubles(DType::kFloat64, {3, 2}, w)},
                    {bv.var(), Tensor::from_doubles(DType::kFloat64, {2}, b)}},
                   o);
  }
  std::map<std::string, Tensor> batch() const {
    return {{"x", Tensor::from_doubles(DType::kFloat64, {4, 3}, x)},
            {"t", Tensor::from_doubles(DType::kFloat64, {4, 2}, t)}};
  }
};

void expect_values(const Tensor& got, const std::vector<double>& want, double tol) {
  const auto v = got.to_doubles();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], want[i], tol) << i;
}

TEST(Training, SgdWithMomentumMatchesHandComputedSteps) {
  Linear m;
  OptimizerOptions o = OptimizerOptions::parse("sgd:lr=0.1,momentum=0.9,weight_decay=0.01");
  Trainer tr = m.trainer(o);
  std::vector<double> vw(6, 0), vb(2, 0);
  for (int step = 0; step < 3; ++step) {
    tr.step(m.batch());
    std::vector<double> gw, gb;
    m.grads(gw, gb);
    for (int i = 0; i < 6; ++i) {
      vw[i] = 0.9 * vw[i] + gw[i] + 0.01 * m.w[i];
      m.w[i] -= 0.1 * vw[i];
    }
    for (int i = 0; i < 2; ++i) {
      vb[i] = 0.9 * vb[i] + gb[i] + 0.01 * m.b[i];
      m.b[i] -= 0.1 * vb[i];
    }
    expect_values(tr.parameter("w"), m.w, 1e-12);
    expect_values(tr.parameter("b"), m.b, 1e-12);
    expect_values(tr.parameter("w.momentum"), vw, 1e-12);
  }
}

TEST(Training, AdamMatchesHandComputedSteps) {
  Linear m;
  Trainer tr = m.trainer(OptimizerOptions::parse("adam:lr=0.05"));
  std::vector<double> mw(6, 0), vw(6, 0), mb(2, 0), vb(2, 0);
  for (int t = 1; t <= 4; ++t) {
    tr.step(m.batch());
    std::vector<double> gw, gb;
    m.grads(gw, gb);
    auto adam = [&](std::vector<double>& p, std::vector<double>& mm, std::vector<double>& vv,
                    const std::vector<double>& g) {
      for (size_t i = 0; i < p.size(); ++i) {
        mm[i] = 0.9 * mm[i] + 0.1 * g[i];
        vv[i] = 0.999 * vv[i] + 0.001 * g[i] * g[i];
        const double mhat = mm[i] / (1 - std::pow(0.9, t)), vhat = vv[i] / (1 - std::pow(0.999, t));
        p[i] -= 0.05 * mhat / (std::sqrt(vhat) + 1e-8);
      }
    };
    adam(m.w, mw, vw, gw);
    adam(m.b, mb, vb, gb);
    expect_values(tr.parameter("w"), m.w, 1e-12);
    expect_values(tr.parameter("b"), m.b, 1e-12);
    expect_values(tr.parameter("adam.step"), {double(t)}, 0);
  }
}

TEST(Training, StepsUpdateInPlaceAndAllocateNothingAfterTheFirst) {
  Linear m;
  Trainer tr = m.trainer(OptimizerOptions::parse("sgd:lr=0.1,momentum=0.5"));
  // w, b and b's momentum are written by their own elementwise steps. w's momentum comes
  // from the matmul whose epilogue adds the old momentum after the product is stored, so
  // its buffer cannot be the output: that one is copied.
  EXPECT_EQ(tr.function().info().updates_in_place, 3);
  EXPECT_EQ(tr.function().info().updates_copied, 1);
  const void* w_data = tr.parameter("w").data();
  const auto batch = m.batch();
  const double first = tr.step(batch);
  tr.step(batch);
  const size_t allocations = pool_stats().allocations;
  double last = 0;
  for (int i = 0; i < 20; ++i) last = tr.step(batch);
  EXPECT_EQ(pool_stats().allocations, allocations);
  EXPECT_EQ(tr.parameter("w").data(), w_data);
  EXPECT_LT(last, first);
}

TEST(Training, UpdatesTheEngineCannotOrderAreCopiedAfterTheRun) {
  // The new value of s is read by a matmul that also needs the old one: no step may write
  // s's buffer while the old value is still to be read, so the update is copied.
  Graph g("swap");
  Var s = input(g, "s", DType::kFloat32, {2, 2});
  Var s1 = s * 2.0;
  Var out = sum(matmul(s, s1));
  g.set_outputs({out.var()});
  g.add_update(s.var(), matmul(s1, s).var());
  Function f = compile(g);
  EXPECT_EQ(f.info().updates_copied, 1);
  Tensor sv = Tensor::from_doubles(DType::kFloat32, {2, 2}, {1, 2, 3, 4});
  auto r = f({sv});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].load(0), 2 * (7 + 10 + 15 + 22));  // sum(s @ 2s) with the old s
  // 2 s @ s = 2 [[7, 10], [15, 22]].
  EXPECT_EQ(sv.to_doubles(), (std::vector<double>{14, 20, 30, 44}));
}

TEST(Training, UpdateErrorsNameTheState) {
  Graph g("bad");
  Var s = input(g, "s", DType::kFloat32, {3});
  Var c = scalar(g, DType::kFloat32, 1.0);
  EXPECT_NE(error_of([&] { g.add_update((s + c).var(), s.var()); }).find("only a graph input"), std::string::npos);
  EXPECT_NE(error_of([&] { g.add_update(s.var(), sum(s).var()); }).find("the types differ"), std::string::npos);
  g.add_update(s.var(), (s + c).var());
  EXPECT_NE(error_of([&] { g.add_update(s.var(), s.var()); }).find("already updated"), std::string::npos);
  g.set_outputs({sum(s).var()});
  Function f = compile(g);
  Tensor big = Tensor::zeros(DType::kFloat32, {6});
  ASSERT_EQ(f.info().updates_in_place, 1);
  const std::string e = error_of([&] { f({big.slice(0, 0, 6, 2)}); });
  EXPECT_NE(e.find("input 's' is updated in place and must be contiguous"), std::string::npos) << e;
}

TEST(Training, BadOptimizerSpecsAndBatchesAreNamed) {
  EXPECT_NE(error_of([] { OptimizerOptions::parse("rmsprop"); }).find("optimizer 'rmsprop': expected sgd or adam"),
            std::string::npos);
  EXPECT_NE(error_of([] { OptimizerOptions::parse("sgd:lr=fast"); }).find("'lr=fast' is not NAME=NUMBER"),
            std::string::npos);
  EXPECT_NE(error_of([] { OptimizerOptions::parse("adam:gamma=0.5"); }).find("unknown setting 'gamma'"),
            std::string::npos);
  Linear m;
  Trainer tr = m.trainer(OptimizerOptions::parse("sgd"));
  auto batch = m.batch();
  batch.erase("t");
  EXPECT_NE(error_of([&] { tr.step(batch); }).find("the batch has no input 't'"), std::string::npos);
  batch = m.batch();
  batch["z"] = batch["t"];
  EXPECT_NE(error_of([&] { tr.step(batch); }).find("no data input 'z'"), std::string::npos);
  // A parameter is the trainer's own: a batch cannot replace it.
  batch = m.batch();
  batch["w"] = tr.parameter("w");
  EXPECT_NE(error_of([&] { tr.step(batch); }).find("no data input 'w'"), std::string::npos);
}

TEST(Training, AnUpdatedInputMayNotShareItsBufferWithAnother) {
  Graph g("shared");
  Var s = input(g, "s", DType::kFloat32, {3});
  Var x = input(g, "x", DType::kFloat32, {3});
  g.add_update(s.var(), (s + x).var());
  g.set_outputs({sum(x).var()});
  Function f = compile(g);
  Tensor a = Tensor::zeros(DType::kFloat32, {3});
  const std::string e = error_of([&] { f({a, a}); });
  EXPECT_NE(e.find("input 's' is updated by the run and shares its buffer with input 'x'"), std::string::npos) << e;
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{0, 0, 0}));  // nothing was written
}

// Two gaussian blobs per class in 2-D, labels one-hot.
void blobs(std::vector<double>& x, std::vector<double>& y, int n, std::mt19937& rng) {
  std::normal_distribution<double> noise(0, 0.35);
  const double centers[4][2] = {{1, 1}, {-1, -1}, {1, -1}, {-1, 1}};
  for (int i = 0; i < n; ++i) {
    const int c = i % 4, label = c < 2 ? 0 : 1;  // XOR-like: not linearly separable
    x.push_back(centers[c][0] + noise(rng));
    x.push_back(centers[c][1] + noise(rng));
    y.push_back(label == 0);
    y.push_back(label == 1);
  }
}

Var cross_entropy(Var logits, Var onehot) { return -mean(sum(onehot * log_softmax(logits), {1})); }

Tensor init(Shape shape, double scale, std::mt19937& rng) {
  return testing::random_tensor(DType::kFloat32, shape, rng, -scale, scale);
}

TEST(Training, MlpLearnsASyntheticClassification) {
  std::mt19937 rng(11);
  std::vector<double> xs, ys;
  blobs(xs, ys, 128, rng);
  Graph g("mlp_train");
  Var x = input(g, "x", DType::kFloat32, {128, 2}), y = input(g, "y", DType::kFloat32, {128, 2});
  Var w1 = input(g, "w1", DType::kFloat32, {2, 16}), b1 = input(g, "b1", DType::kFloat32, {16});
  Var w2 = input(g, "w2", DType::kFloat32, {16, 2}), b2 = input(g, "b2", DType::kFloat32, {2});
  Var loss = cross_entropy(matmul(tanh(matmul(x, w1) + b1), w2) + b2, y);
  Trainer tr(std::move(g), loss.var(),
             {{w1.var(), init({2, 16}, 1, rng)}, {b1.var(), init({16}, 0.1, rng)},
              {w2.var(), init({16, 2}, 0.5, rng)}, {b2.var(), init({2}, 0.1, rng)}},
             OptimizerOptions::parse("adam:lr=0.05"));
  std::map<std::string, Tensor> batch{{"x", Tensor::from_doubles(DType::kFloat32, {128, 2}, xs)},
                                      {"y", Tensor::from_doubles(DType::kFloat32, {128, 2}, ys)}};
  const double first = tr.step(batch);
  double loss_now = first;
  for (int i = 0; i < 300 && loss_now > 0.05; ++i) loss_now = tr.step(batch);
  EXPECT_GT(first, 0.5);
  EXPECT_LT(loss_now, 0.05);
}

TEST(Training, SmallCnnLearnsBarOrientation) {
  // 8x8 images holding a horizontal (class 0) or vertical (class 1) bar, with noise.
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0, 0.2);
  const int n = 32;
  std::vector<double> xs, ys;
  for (int i = 0; i < n; ++i) {
    const int cls = i % 2, at = 1 + static_cast<int>(rng() % 6);
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 8; ++c) xs.push_back(((cls ? c : r) == at ? 1.0 : 0.0) + noise(rng));
    }
    ys.push_back(cls == 0);
    ys.push_back(cls == 1);
  }
  Graph g("cnn_train");
  Var x = input(g, "x", DType::kFloat32, {n, 1, 8, 8}), y = input(g, "y", DType::kFloat32, {n, 2});
  Var k = input(g, "k", DType::kFloat32, {4, 1, 3, 3}), kb = input(g, "kb", DType::kFloat32, {4});
  Var w = input(g, "w", DType::kFloat32, {64, 2}), b = input(g, "b", DType::kFloat32, {2});
  Var h = relu(apply("conv", {x, k, kb}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  h = apply("max_pool", {h}, {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  Var loss = cross_entropy(matmul(flatten(h), w) + b, y);
  Trainer tr(std::move(g), loss.var(),
             {{k.var(), init({4, 1, 3, 3}, 0.5, rng)}, {kb.var(), init({4}, 0.1, rng)},
              {w.var(), init({64, 2}, 0.2, rng)}, {b.var(), init({2}, 0.1, rng)}},
             OptimizerOptions::parse("adam:lr=0.03"));
  std::map<std::string, Tensor> batch{{"x", Tensor::from_doubles(DType::kFloat32, {n, 1, 8, 8}, xs)},
                                      {"y", Tensor::from_doubles(DType::kFloat32, {n, 2}, ys)}};
  const double first = tr.step(batch);
  double loss_now = first;
  for (int i = 0; i < 200 && loss_now > 0.05; ++i) loss_now = tr.step(batch);
  EXPECT_GT(first, 0.3);
  EXPECT_LT(loss_now, 0.05);
}

}  // namespace
}  // namespace kiln
