// Random well-typed graphs — elementwise ops with broadcasting, reductions, matmul,
// reshape/transpose, softmax, repeated subexpressions and identities the simplifier
// removes — compiled with the rewrite passes and compared against the unoptimized graph's
// `perform` reference. Each graph runs with all passes, or with all but one (cycling), so
// every pass is also checked by its absence.
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <random>

#include "compiler/compile.h"
#include "ops/builders.h"
#include "ops/reference.h"
#include "rewrite/pipeline.h"
#include "tests/helpers.h"

namespace kiln {
namespace {

// What kind of graph to draw: the element type, whether the leading dimension is dynamic
// (one module then runs several batch sizes), and how large dimensions get (large ones split
// across workers).
struct Flavor {
  DType dtype = DType::kFloat32;
  bool dynamic_batch = false;
  int max_dim = 5;
};

class RandomGraph {
 public:
  RandomGraph(Graph& g, uint32_t seed, Flavor flavor = {}) : g_(g), rng_(seed), flavor_(flavor) {}

  // Builds the graph; returns its inputs' values. With a dynamic batch, `batches` more sets
  // of inputs (other leading sizes) are drawn too.
  std::vector<Tensor> build(int batches = 0, std::vector<std::vector<Tensor>>* more = nullptr) {
    Shape shape = random_shape();
    int n_inputs = 1 + pick(2);
    std::vector<Shape> shapes;
    for (int i = 0; i < n_inputs; ++i) {
      Shape s = i == 0 ? shape : broadcastable_to(shape);
      Shape declared = s;
      // A dimension that follows the batch is dynamic in every input that has it in full.
      if (flavor_.dynamic_batch && s.size() == shape.size() && !s.empty() && s[0] == shape[0])
        declared[0] = kDynamic;
      Var v = input(g_, "x" + std::to_string(i), flavor_.dtype, declared);
      values_.push_back(value(s));
      shapes.push_back(declared);
      pool_.push_back(v);
    }
    for (int b = 0; more && b < batches; ++b) {
      const int64_t batch = 1 + pick(2 * flavor_.max_dim);
      std::vector<Tensor> set;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Shape s = values_[i].shape();
        if (!shapes[i].empty() && shapes[i][0] == kDynamic) s[0] = batch;
        set.push_back(value(s));
      }
      more->push_back(std::move(set));
    }
    int steps = 4 + pick(9);
    for (int i = 0; i < steps; ++i) pool_.push_back(is_integer() ? int_step() : step());
    std::vector<Variable*> outs{pool_.back().var()};
    Var extra = pool_[static_cast<size_t>(pick(static_cast<int>(pool_.size())))];
    if (extra.var()->kind == VarKind::kNodeOutput && extra.var() != outs[0]) outs.push_back(extra);
    g_.set_outputs(outs);
    return values_;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  Var any() { return pool_[static_cast<size_t>(pick(static_cast<int>(pool_.size())))]; }

  bool is_integer() const { return !is_float(flavor_.dtype); }
  Tensor value(const Shape& s) {
    // Integers stay small, so no chain of steps overflows (C's signed overflow is undefined).
    return is_integer() ? testing::random_tensor(flavor_.dtype, s, rng_, -20, 20)
                        : testing::random_tensor(flavor_.dtype, s, rng_);
  }
  Shape random_shape() {
    Shape s;
    int rank = 1 + pick(3);
    for (int d = 0; d < rank; ++d) s.push_back(1 + pick(flavor_.max_dim));
    return s;
  }
  // A shape that broadcasts against `s`: some leading dims dropped, some dims set to 1.
  Shape broadcastable_to(const Shape& s) {
    Shape out(s.begin() + pick(static_cast<int>(s.size())), s.end());
    for (auto& d : out) {
      if (pick(3) == 0) d = 1;
    }
    return out;
  }
  Var constant_like(Shape s) {
    for (auto& d : s) d = d == kDynamic ? 1 : d;  // a constant broadcasts along the batch
    return constant(g_, is_integer() ? testing::random_tensor(flavor_.dtype, s, rng_, -3, 3)
                                     : testing::random_tensor(flavor_.dtype, s, rng_, -1, 1));
  }
  // Steps that integer types have: no transcendentals, no division, multiplication only by
  // small constants.
  Var int_step() {
    Var x = any();
    const int rank = x.rank();
    switch (pick(9)) {
      case 0:
        return x + partner(x);
      case 1:
        return x - partner(x);
      case 2: {
        Var p = partner(x);
        return maximum(x, p) - minimum(x, p);
      }
      case 3:
        return abs(x) + relu(-x);
      case 4:
        return x * constant_like({});
      case 5:
        if (rank == 0) return -x;
        return sum(x, {static_cast<int64_t>(pick(rank))}, pick(2) == 1);
      case 6:
        if (rank == 0) return x + x;
        return max(x, {static_cast<int64_t>(pick(rank))}, true) + x;
      case 7:
        if (rank < 2) return -x;
        return transpose(x) + constant_like({});  // reversed axes: a strided read
      default:
        return where(gt(x, partner(x)), x, -x);
    }
  }
  // A second operand for x: an existing value that broadcasts with it, or a new constant.
  // Dynamic dims broadcast only with themselves or 1: build-time inference cannot know that a
  // static 4 against a dynamic dim fails for batch sizes other than 4.
  static bool batch_safe(const TensorType& a, const TensorType& b) {
    for (size_t i = 1; i <= std::min(a.dims.size(), b.dims.size()); ++i) {
      int64_t p = a.dims[a.dims.size() - i], q = b.dims[b.dims.size() - i];
      if ((p == kDynamic) != (q == kDynamic) && p != 1 && q != 1) return false;
    }
    return true;
  }
  Var partner(Var x) {
    for (int tries = 0; tries < 4; ++tries) {
      Var y = any();
      if (!batch_safe(x.type(), y.type())) continue;
      try {
        Var probe = y + x;  // type inference decides; a failed probe adds no node
        (void)probe;
        return y;
      } catch (const UserError&) {
      }
    }
    const auto& dims = x.type().dims;
    return constant_like(broadcastable_to(Shape(dims.begin(), dims.end())));
  }

  Var step() {
    Var x = any();
    const int rank = x.rank();
    switch (pick(17)) {
      case 0:
        return tanh(x) * sigmoid(x);
      case 1:
        return exp(-abs(x)) + 0.5;
      case 2:
        return log(abs(x) + 1.0);  // positive argument
      case 3:
        return gelu(x) - softplus(x);
      case 4:
        return erf(x) / (abs(partner(x)) + 1.0);
      case 5: {
        // One partner for both: two could each broadcast with x but not with each other.
        Var p = partner(x);
        return maximum(x, p) - minimum(x, p);
      }
      case 6:
        return x * partner(x) + x;
      case 7:
        return -(-(x * 1.0 + 0.0));  // identities for the simplifier
      case 8:
        return exp(x * 0.5) + exp(x * 0.5);  // a repeated subexpression
      case 9:
      case 16: {
        if (rank == 0) return relu(x);
        int64_t axis = pick(rank);
        // Reductions of elementwise values (the reduction pass's pattern): one axis, two
        // axes, or all; producers with broadcast operands and repeated reads.
        std::vector<int64_t> axes{axis};
        if (rank > 1 && pick(2)) axes.push_back((axis + 1 + pick(rank - 1)) % rank);
        if (pick(6) == 0) axes.clear();
        const bool keep = pick(2) == 1;
        switch (pick(6)) {
          case 0:
            return sum(x * x, axes, keep);
          case 1:
            return mean(tanh(x), axes, keep);
          case 2:
            return max(x + 1.0, axes, keep);
          case 3:
            return sum(exp(x - partner(x)), axes, keep);
          case 4:
            return min(abs(x * partner(x)) + 0.5, axes, keep);
          default:
            return prod(sigmoid(x) + 0.5, axes, keep);
        }
      }
      case 10: {
        if (rank == 0) return x * 2.0;
        return softmax(x * 2.0, -1);
      }
      case 11: {
        if (rank < 2) return x - 1.0;
        std::vector<int64_t> perm;
        for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
        Var t = transpose(x, perm);  // reversed: read back through a second transpose
        return pick(2) ? relu(transpose(t, perm) + 0.25) : t * 2.0;
      }
      case 12: {
        if (rank == 0) return sigmoid(x);
        return reshape(x, {-1}) * 3.0;
      }
      case 13:
      case 14: {
        // matmul or gemm + bias + activation: the epilogue pass's pattern; a gemm over a
        // constant at least 16 wide is the pack pass's.
        if (rank != 2 || x.type().dims[1] == kDynamic) return cos(x);
        const int64_t k = x.type().dims[1], n = pick(2) ? 1 + pick(6) : 16 + pick(40);
        Var y;
        switch (pick(3)) {
          case 0:
            y = matmul(x, constant_like({k, n}));
            break;
          case 1:
            y = gemm(x, constant_like({k, n}), 0.5);
            break;
          default:
            y = gemm(x, constant_like({n, k}), 1.0, false, true);
        }
        y = y + constant_like({n});
        return pick(2) ? relu(y) : tanh(y);
      }
      default:
        return where(gt(x, partner(x)), x, sin(x));
    }
  }

  Graph& g_;
  std::mt19937 rng_;
  Flavor flavor_;
  std::vector<Var> pool_;
  std::vector<Tensor> values_;
};

TEST(RandomGraphs, OptimizedModulesMatchTheUnoptimizedReference) {
  constexpr int kGraphs = 240;
  const auto& passes = all_passes();
  std::vector<std::function<std::string()>> jobs;
  for (int i = 0; i < kGraphs; ++i) {
    jobs.emplace_back([i, &passes]() -> std::string {
      Graph g("random" + std::to_string(i));
      std::vector<Tensor> inputs = RandomGraph(g, static_cast<uint32_t>(1000 + i)).build();
      // Graph i runs with every pass, or without pass (i % (n + 1)) - 1.
      size_t off = static_cast<size_t>(i) % (passes.size() + 1);
      CompileOptions options;
      options.passes = off == 0 ? "" : "-" + std::string(passes[off - 1].name);
      auto want = evaluate_reference(g, inputs);
      auto got = compile(g, options)(inputs);
      std::string failures;
      for (size_t k = 0; k < want.size(); ++k) {
        auto r = testing::tensors_close(got[k], want[k], 2e-4, 2e-5);
        if (!r) {
          failures += "graph " + std::to_string(i) + " (passes '" + *options.passes + "') output " +
                      std::to_string(k) + ": " + r.message() + "\n" + g.to_string() +
                      "optimized:\n" + optimized_graph(g, options).to_string();
        }
      }
      return failures;
    });
  }
  // Two at a time: compiles of distinct graphs may run in parallel.
  std::vector<std::string> results(jobs.size());
  std::vector<std::future<void>> running;
  for (size_t i = 0; i < jobs.size(); i += 2) {
    auto a = std::async(std::launch::async, [&, i] { results[i] = jobs[i](); });
    if (i + 1 < jobs.size()) results[i + 1] = jobs[i + 1]();
    a.get();
  }
  int failed = 0, fused = 0;
  for (const auto& r : results) {
    if (!r.empty() && failed++ < 5) ADD_FAILURE() << r;
  }
  EXPECT_EQ(failed, 0) << failed << " of " << kGraphs << " graphs differ";
  // The generator must actually exercise fusion and epilogues, or the test proves little.
  for (int i = 0; i < 20; ++i) {
    Graph g("probe" + std::to_string(i));
    RandomGraph(g, static_cast<uint32_t>(1000 + i)).build();
    Graph o = optimize(g, std::string(""));
    for (const auto& n : o.nodes()) {
      fused += n->op->name() == "fused_elementwise" || n->op->name() == "with_epilogue";
    }
  }
  EXPECT_GT(fused, 10);
}

// Float64 and integer graphs, graphs whose batch dimension is dynamic (one module, several
// batch sizes), and large graphs split across workers, each against the reference.
TEST(RandomGraphs, Float64IntegerDynamicAndSplitGraphsMatchTheReference) {
  struct Kind {
    const char* name;
    Flavor flavor;
    int graphs;
  };
  const Kind kinds[] = {{"float64", {DType::kFloat64, false, 5}, 16},
                        {"int32", {DType::kInt32, false, 5}, 10},
                        {"int64", {DType::kInt64, true, 6}, 10},
                        {"dynamic float32", {DType::kFloat32, true, 6}, 16},
                        {"split float32", {DType::kFloat32, false, 48}, 12},
                        {"split float64", {DType::kFloat64, true, 40}, 8}};
  int64_t split_calls = 0, dynamic_runs = 0;
  uint32_t seed = 5000;
  for (const Kind& kind : kinds) {
    for (int i = 0; i < kind.graphs; ++i, ++seed) {
      Graph g(std::string("random-") + kind.name + "-" + std::to_string(i));
      std::vector<std::vector<Tensor>> more;
      std::vector<std::vector<Tensor>> sets{
          RandomGraph(g, seed, kind.flavor).build(kind.flavor.dynamic_batch ? 2 : 0, &more)};
      sets.insert(sets.end(), more.begin(), more.end());
      CompileOptions options;
      options.split_grain = 64;  // large graphs split; small ones stay whole
      Function f = compile(g, options);
      for (const auto& inputs : sets) {
        auto want = evaluate_reference(g, inputs);
        auto got = f(inputs);
        ASSERT_EQ(got.size(), want.size());
        for (size_t k = 0; k < want.size(); ++k) {
          auto r = is_float(kind.flavor.dtype) ? testing::tensors_close(got[k], want[k], 2e-4, 2e-5)
                                               : testing::tensors_close(got[k], want[k], 0, 0);
          EXPECT_TRUE(r) << kind.name << " graph " << i << " (seed " << seed << ") output " << k
                         << " on " << inputs[0].describe() << ": " << r.message() << "\n"
                         << g.to_string();
        }
      }
      dynamic_runs += static_cast<int64_t>(sets.size()) - 1;
      split_calls += f.stats().split_calls;
    }
  }
  // The flavors must reach what they are for.
  EXPECT_GT(dynamic_runs, 20) << "dynamic graphs ran few other batch sizes";
  EXPECT_GT(split_calls, 0) << "no large graph split across workers";
}

}  // namespace
}  // namespace kiln
