// kiln's random numbers (ops/random.h): Philox4x32-10 against Random123's known answers, the
// draws' distributions (moments and a Kolmogorov-Smirnov bound over a million values), one
// seed giving the same numbers whoever computes them (perform, a module, another module with
// more threads), fresh numbers on each call of a module, dropout's gradient through its own
// mask, and a training step with dropout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "compiler/compile.h"
#include "compiler/tiered_function.h"
#include "compiler/train/trainer.h"
#include "ops/builders.h"
#include "ops/random.h"
#include "ops/reference.h"
#include "ops/registry.h"
#include "rewrite/autodiff/grad.h"
#include "runtime/engine/engine.h"
#include "tests/helpers.h"
#include "util/error.h"

namespace kiln {
namespace {

TEST(Philox, MatchesRandom123sKnownAnswers) {
  struct Kat {
    uint32_t c[4], k[2], want[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    philox4x32_10(k.c, k.k, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.want[i]) << "word " << i;
  }
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.load(i);
  return v;
}

// The Kolmogorov-Smirnov distance of a sample from a distribution function.
double ks_distance(std::vector<double> v, const std::function<double(double)>& cdf) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double d = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double f = cdf(v[i]);
    d = std::max({d, f - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - f});
  }
  return d;
}

Tensor draw(const std::string& op, Attrs props, std::vector<Tensor> inputs = {},
            const std::vector<TensorType>& types = {}) {
  Graph g(op);
  std::vector<Var> ins;
  for (size_t i = 0; i < types.size(); ++i)
    ins.push_back(input(g, "in" + std::to_string(i), types[i].dtype, types[i].dims));
  g.set_outputs({apply_in(g, op, ins, props)});
  return compile(g)(inputs).at(0);
}

// A million draws: the mean within 5 standard errors, the variance within 2%, and the KS
// distance under 1.95 / sqrt(n) (a 0.1% level), for uniform (both widths), normal and
// Bernoulli draws.
TEST(Random, DrawsFollowTheirDistributions) {
  const int64_t n = 1 << 20;
  const double bound = 1.95 / std::sqrt(static_cast<double>(n));
  for (const char* dt : {"float32", "float64"}) {
    const auto u = values(draw("random_uniform", {{"shape", std::vector<int64_t>{1024, 1024}},
                                                  {"low", -1.0},
                                                  {"high", 3.0},
                                                  {"seed", int64_t{7}},
                                                  {"dtype", std::string(dt)}}));
    const double mean = std::accumulate(u.begin(), u.end(), 0.0) / static_cast<double>(n);
    double var = 0;
    for (double x : u) var += (x - mean) * (x - mean);
    var /= static_cast<double>(n);
    EXPECT_NEAR(mean, 1.0, 5 * std::sqrt(16.0 / 12 / static_cast<double>(n))) << dt;
    EXPECT_NEAR(var, 16.0 / 12, 0.02 * 16.0 / 12) << dt;
    EXPECT_GE(*std::min_element(u.begin(), u.end()), -1.0);
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 3.0);
    EXPECT_LT(ks_distance(u, [](double x) { return std::clamp((x + 1) / 4, 0.0, 1.0); }), bound)
        << dt;
  }
  const auto z = values(draw(
      "random_normal",
      {{"shape", std::vector<int64_t>{n}}, {"mean", 2.0}, {"scale", 0.5}, {"seed", int64_t{9}}}));
  const double zmean = std::accumulate(z.begin(), z.end(), 0.0) / static_cast<double>(n);
  double zvar = 0;
  for (double x : z) zvar += (x - zmean) * (x - zmean);
  zvar /= static_cast<double>(n);
  EXPECT_NEAR(zmean, 2.0, 5 * 0.5 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(zvar, 0.25, 0.02 * 0.25);
  EXPECT_LT(
      ks_distance(z, [](double x) { return 0.5 * std::erfc(-(x - 2.0) / 0.5 / std::sqrt(2.0)); }),
      bound);
  // Bernoulli with p 0.3 everywhere, and p outside [0, 1] and NaN at the edges.
  Tensor p = Tensor::from_doubles(DType::kFloat32, {n}, std::vector<double>(n, 0.3));
  p.store(0, 1.5);
  p.store(1, -0.5);
  p.store(2, std::nan(""));
  const auto b = values(draw("bernoulli", {{"seed", int64_t{3}}, {"dtype", std::string("float32")}},
                             {p}, {TensorType{DType::kFloat32, {n}}}));
  EXPECT_EQ(b[0], 1.0);
  EXPECT_EQ(b[1], 0.0);
  EXPECT_EQ(b[2], 0.0);
  const double ones = std::accumulate(b.begin() + 3, b.end(), 0.0) / static_cast<double>(n - 3);
  EXPECT_NEAR(ones, 0.3, 5 * std::sqrt(0.21 / static_cast<double>(n)));
}

// Multinomial: each row's class frequencies against softmax(logits) by a chi-square bound
// (0.1% level) over 200000 samples; -inf logits never drawn, a +inf logit always, a NaN row
// and an all -inf row -1; the module agrees with perform (run 0), and a second call draws
// again. The probabilities here are computed independently, in long double.
TEST(Random, MultinomialDrawsFollowTheSoftmaxOfItsRows) {
  const int64_t samples = 200000;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> rows{{0.0, 1.0, 2.0, -1.0, 0.5},
                                              {-3.0, -inf, 0.0, -3.0, 1.5},
                                              {1.0, inf, 2.0, -inf, 0.0},
                                              {0.0, std::nan(""), 1.0, 2.0, 3.0},
                                              {-inf, -inf, -inf, -inf, -inf}};
  std::vector<double> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const Tensor x = Tensor::from_doubles(DType::kFloat32, {5, 5}, flat);
  Graph g("multinomial");
  Var in = input(g, "x", DType::kFloat32, {5, 5});
  g.set_outputs(
      {apply("multinomial", {in},
             {{"seed", int64_t{11}}, {"dtype", std::string("int64")}, {"sample_size", samples}})});
  Function f = compile(g);
  const Tensor y = f({x}).at(0);
  ASSERT_EQ(y.shape(), (Shape{5, samples}));
  EXPECT_EQ(values(y), values(evaluate_reference(g, {x}).at(0)));
  for (size_t r = 0; r < 2; ++r) {
    long double total = 0;
    for (double v : rows[r]) total += std::exp(static_cast<long double>(v));
    std::vector<double> counts(5, 0);
    for (int64_t k = 0; k < samples; ++k)
      counts[static_cast<size_t>(y.load_int(static_cast<int64_t>(r) * samples + k))] += 1;
    double chi2 = 0;
    int cells = 0;
    for (size_t c = 0; c < 5; ++c) {
      const double p = static_cast<double>(std::exp(static_cast<long double>(rows[r][c])) / total);
      if (p == 0) {
        EXPECT_EQ(counts[c], 0) << "row " << r << " class " << c;
        continue;
      }
      chi2 += (counts[c] - samples * p) * (counts[c] - samples * p) / (samples * p);
      ++cells;
    }
    // The 0.1% points of chi-square with 4 and 3 degrees of freedom.
    EXPECT_LT(chi2, cells == 5 ? 18.47 : 16.27) << "row " << r;
  }
  for (int64_t k = 0; k < samples; ++k) {
    ASSERT_EQ(y.load_int(2 * samples + k), 1);
    ASSERT_EQ(y.load_int(3 * samples + k), -1);
    ASSERT_EQ(y.load_int(4 * samples + k), -1);
  }
  EXPECT_NE(values(f({x}).at(0)), values(y));
  EXPECT_TRUE(testing::has(testing::error_of([&] {
                             apply("multinomial", {in}, {{"dtype", std::string("float32")}});
                           }),
                           "must be int32 or int64"));
}

// A seed's numbers depend on (seed, stream, run, element) alone: perform (run 0), a module's
// first call, and another module (one more output, so a module of its own, with its own run
// counter) run by three workers with parts of a few elements agree bit for bit; the module's
// second call draws again; another stream or seed draws apart.
TEST(Random, OneSeedGivesTheSameNumbersEverywhereAndEachCallDrawsAgain) {
  auto build = [](Graph& g, bool extra) {
    Var x = input(g, "x", DType::kFloat32, {64, 33});
    auto outs = apply_multi("dropout_train", {x}, {{"seed", int64_t{42}}, {"ratio", 0.25}});
    Var u = apply("random_uniform", {x}, {{"seed", int64_t{42}}, {"stream", int64_t{1}}});
    Var z = apply("random_normal", {x}, {{"seed", int64_t{42}}, {"stream", int64_t{2}}});
    std::vector<Variable*> all{outs[0].var(), outs[1].var(), u.var(), z.var()};
    if (extra) all.push_back((x * 2.0).var());
    g.set_outputs(all);
    return x;
  };
  Graph g("random_draws"), h("random_draws_split");
  Var x = build(g, false);
  build(h, true);
  std::mt19937 rng(1);
  const std::vector<Tensor> in{testing::random_tensor(DType::kFloat32, {64, 33}, rng)};
  const auto want = evaluate_reference(g, in);
  Function whole = compile(g);
  CompileOptions split;
  static Engine* engine = make_engine(EngineKind::kThreaded, 3).release();
  split.engine = engine;
  split.split_grain = 4;
  Function parted = compile(h, split);
  const auto first = whole(in);
  const auto other = parted(in);
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(values(first[k]), values(want[k])) << "output " << k;
    EXPECT_EQ(values(other[k]), values(want[k])) << "output " << k;
  }
  // The mask and the kept values agree: y = x / 0.75 where kept.
  for (int64_t i = 0; i < first[0].numel(); ++i) {
    EXPECT_FLOAT_EQ(first[0].load(i), first[1].load(i) != 0 ? in[0].load(i) / 0.75F : 0.0F);
  }
  const auto second = whole(in);
  EXPECT_NE(values(second[2]), values(first[2]));
  EXPECT_NE(values(second[1]), values(first[1]));
  EXPECT_NE(values(first[2]), values(first[3]));  // streams 1 and 2 of one seed
  EXPECT_TRUE(testing::has(testing::error_of([&] {
                             apply("dropout_train", {x}, {{"ratio", 1.5}});
                           }),
                           "must be in [0, 1]"));
  EXPECT_TRUE(testing::has(testing::error_of([&] {
                             apply_in(g, "random_uniform", {},
                                      {{"shape", std::vector<int64_t>{2}},
                                       {"dtype", std::string("int32")}});
                           }),
                           "must be float32 or float64"));
}

// Dropout's gradient goes through its own mask: dX = dY / (1 - ratio) where kept, 0 elsewhere,
// and a training step with dropout lowers the loss.
TEST(Random, DropoutGradientFollowsItsMaskAndTrainsAModel) {
  Graph g("dropout_grad");
  Var x = input(g, "x", DType::kFloat64, {8, 16});
  Var r = input(g, "r", DType::kFloat64, {8, 16});
  auto outs = apply_multi("dropout_train", {x}, {{"seed", int64_t{5}}, {"ratio", 0.4}});
  Var cost = sum(outs[0] * r);
  auto grads = grad(g, cost.var(), {x.var()});
  g.set_outputs({outs[1], grads[0]});
  std::mt19937 rng(2);
  const Tensor xv = testing::random_tensor(DType::kFloat64, {8, 16}, rng);
  const Tensor rv = testing::random_tensor(DType::kFloat64, {8, 16}, rng);
  const auto got = compile(g)({xv, rv});
  int64_t kept = 0;
  for (int64_t i = 0; i < xv.numel(); ++i) {
    const bool keep = got[0].load(i) != 0;
    kept += keep;
    EXPECT_DOUBLE_EQ(got[1].load(i), keep ? rv.load(i) / 0.6 : 0.0);
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, xv.numel());

  // A linear layer with dropout on its input, fitted to y = 2 x: the loss falls.
  Graph t("train_dropout");
  Var xs = input(t, "x", DType::kFloat32, {32, 8});
  Var ys = input(t, "y", DType::kFloat32, {32, 1});
  Var w = input(t, "w", DType::kFloat32, {8, 1});
  Var dropped = apply_multi("dropout_train", {xs}, {{"seed", int64_t{11}}, {"ratio", 0.1}})[0];
  Var diff = matmul(dropped, w) - ys;
  Var loss = sum(diff * diff) * (1.0 / 32);
  OptimizerOptions opt;
  opt.lr = 0.05;
  Trainer trainer(std::move(t), loss.var(), {{w.var(), Tensor::zeros(DType::kFloat32, {8, 1})}},
                  opt);
  const Tensor xb = testing::random_tensor(DType::kFloat32, {32, 8}, rng);
  Tensor yb = Tensor::zeros(DType::kFloat32, {32, 1});
  for (int64_t i = 0; i < 32; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 8; ++j) s += 2 * xb.load(i * 8 + j);
    yb.store(i, s);
  }
  const double before = trainer.step({{"x", xb}, {"y", yb}});
  double after = before;
  for (int s = 0; s < 60; ++s) after = trainer.step({{"x", xb}, {"y", yb}});
  EXPECT_LT(after, 0.2 * before);
}

// A graph that draws random numbers starts compiled: the generic tier runs `perform`, which has
// no run counter, so its calls would all repeat the first draw.
TEST(Random, AGraphThatDrawsHasNoGenericTier) {
  Graph g("random_tiered");
  Var x = input(g, "x", DType::kFloat32, {16});
  g.set_outputs({apply("random_uniform", {x}, {{"seed", int64_t{21}}})});
  CompileOptions options;
  options.generic_start = true;
  TieredFunction f(g, options);
  EXPECT_FALSE(f.started_generic());
  const Tensor xv = Tensor::zeros(DType::kFloat32, {16});
  const auto a = f.run({{"x", xv}}), b = f.run({{"x", xv}});
  EXPECT_NE(values(a.at(0)), values(b.at(0)));
}

}  // namespace
}  // namespace kiln
