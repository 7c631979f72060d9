// The C linker, the toolchain and compile errors mapped back to nodes.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <thread>

#include "compiler/c/linker.h"
#include "compiler/compile.h"
#include "compiler/compile_error.h"
#include "compiler/graph_key.h"
#include "compiler/c/toolchain.h"
#include "ops/builders.h"
#include "ops/cop.h"
#include "ops/gather.h"
#include "ops/reference.h"
#include "ops/registry.h"
#include "runtime/engine/engine.h"
#include "runtime/storage.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

// An op whose C fragment does not compile (line 3 uses an undeclared identifier).
class BrokenOp : public COp {
 public:
  BrokenOp() : COp("broken_test_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {in[0]};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const override {
    copy_into(in[0], out[0]);
  }
  std::string c_code(const Node&, const CodeNames& names, const Sub&) const override {
    return "float ok = 1.0f;\n(void)ok;\nundefined_symbol_xyz += 1;\n";
  }
};

// An op using every state hook: a per-node counter set up at load time.
class CounterOp : public COp {
 public:
  CounterOp() : COp("counter_test_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {TensorType{DType::kInt64, {}}};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>&) const override { return {Shape{}}; }
  void perform(const std::vector<Tensor>&, std::vector<Tensor>&) const override {}
  std::string c_state_fields(const Node&, const std::string& prefix) const override {
    return "int64_t " + prefix + "calls;\nint64_t *" + prefix + "scratch;";
  }
  std::string c_init_code_struct(const Node&, const Sub& sub) const override {
    return "state->" + sub.prefix + "calls = 100;\nstate->" + sub.prefix +
           "scratch = (int64_t *)malloc(sizeof(int64_t));\nif (!state->" + sub.prefix +
           "scratch) " + sub.fail + "(\"out of memory\");\n";
  }
  std::string c_cleanup_code_struct(const Node&, const Sub& sub) const override {
    return "free(state->" + sub.prefix + "scratch);\n";
  }
  std::vector<std::string> c_headers() const override { return {"<stdlib.h>"}; }
  std::string c_code(const Node&, const CodeNames& names, const Sub& sub) const override {
    return "*(int64_t *)" + names.outputs[0] + "->data = ++state->" + sub.prefix + "calls;\n";
  }
};

// An op whose thunk always fails at run time through the module ABI's fail().
class FailingOp : public COp {
 public:
  FailingOp() : COp("failing_test_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {in[0]};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const override {
    copy_into(in[0], out[0]);
  }
  std::string c_code(const Node&, const CodeNames& names, const Sub& sub) const override {
    return sub.fail + "(\"refusing %d elements\", (int)" + names.inputs[0] + "->shape[0]);\n";
  }
};

TEST(Compiler, ThunkFailureThroughTheEngineNamesTheNodeAndLeavesTheEngineUsable) {
  Graph g("failing");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  Node* bad = g.add_node(std::make_shared<FailingOp>(), {exp(x)});
  g.set_outputs({relu(Var(&g, bad->outputs[0])), neg(x)});  // a failing and a healthy branch
  Function f = compile(g);
  // Small inputs run the steps in order in the caller; large ones push them one by one.
  for (int64_t n : {int64_t{3}, int64_t{1} << 17}) {
    Tensor t = Tensor::zeros(DType::kFloat32, {n});
    for (int call = 0; call < 2; ++call) {
      std::string msg = testing::error_of([&] { f({t}); });
      EXPECT_NE(msg.find("node 1 (failing_test_op)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("refusing " + std::to_string(n) + " elements"), std::string::npos) << msg;
    }
  }
  Tensor t = Tensor::from_doubles(DType::kFloat32, {3}, {1, 2, 3});
  Graph ok("healthy");
  Var y = input(ok, "y", DType::kFloat32, {3});
  ok.set_outputs({y * y});
  EXPECT_TRUE(testing::tensors_close(compile(ok)({t})[0],
                                     Tensor::from_doubles(DType::kFloat32, {3}, {1, 4, 9})));
}

// Two of these, on sides 0 and 1, meet only if they run at the same time: each raises its
// flag and waits (bounded) for the other's. Output: 1 if it saw the other side, else 0.
class RendezvousOp : public COp {
 public:
  explicit RendezvousOp(int side)
      : COp("rendezvous_test_op", {{"side", int64_t{side}}}), side_(side) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>&) const override {
    return {TensorType{DType::kInt32, {}}};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>&) const override { return {Shape{}}; }
  void perform(const std::vector<Tensor>&, std::vector<Tensor>& out) const override {
    out[0].store_int(0, 1);
  }
  // Shared by the two nodes' kernels, which are separate units: one weak definition.
  std::string c_support_code() const override {
    return "__attribute__((weak, visibility(\"hidden\"))) int kiln_rendezvous[2];";
  }
  std::string c_code(const Node&, const CodeNames& names, const Sub&) const override {
    std::string me = std::to_string(side_), other = std::to_string(1 - side_);
    return "__atomic_store_n(&kiln_rendezvous[" + me +
           "], 1, __ATOMIC_SEQ_CST);\n"
           "int seen = 0;\n"
           "for (long i = 0; i < 3000000000L && !seen; ++i) seen = "
           "__atomic_load_n(&kiln_rendezvous[" +
           other +
           "], __ATOMIC_SEQ_CST);\n"
           "*(int32_t *)" +
           names.outputs[0] + "->data = seen;\n";
  }

 private:
  int side_;
};

TEST(Compiler, IndependentBranchesRunAtTheSameTime) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: nothing can overlap";
  Graph g("branches");
  Var x = input(g, "x", DType::kFloat32, {int64_t{1} << 16});  // enough work to go parallel
  // Each side reads a temporary of its own branch. In step order the second branch's
  // temporaries outlive the first's, so a planner reusing bytes by step order alone would
  // give them the same memory and thereby order one branch after the other. Most of the
  // work is in concats, which do not split: branches of split steps run in order instead.
  Node* a = g.add_node(std::make_shared<RendezvousOp>(0), {concat({x, x}, 0)});
  Node* b = g.add_node(std::make_shared<RendezvousOp>(1), {concat({neg(x), x}, 0)});
  g.set_outputs({a->outputs[0], b->outputs[0]});
  Function f = compile(g);
  auto out = f({Tensor::zeros(DType::kFloat32, {int64_t{1} << 16})});
  EXPECT_EQ(out[0].load_int(0), 1) << "branch 0 never saw branch 1 running";
  EXPECT_EQ(out[1].load_int(0), 1) << "branch 1 never saw branch 0 running";
  EXPECT_EQ(f.stats().stepwise_runs, 1);
}

// Branches whose work is mostly in steps that split over the workers run in order: each
// step has the cores already, and pushing every step through the engine cost a third of
// ShuffleNetV2's run. The same program with an unsplittable step of most of the work goes
// step by step.
TEST(Compiler, BranchesOfSplitStepsRunInOrder) {
  Graph g("split_branches");
  Var x = input(g, "x", DType::kFloat32, {int64_t{1} << 16});
  g.set_outputs({exp(x), tanh(neg(x))});
  Function f = compile(g);
  Tensor in = Tensor::zeros(DType::kFloat32, {int64_t{1} << 16});
  f({in});
  EXPECT_EQ(f.stats().runs, 1);
  EXPECT_EQ(f.stats().stepwise_runs, 0);
  Graph h("unsplit_branches");
  Var y = input(h, "y", DType::kFloat32, {int64_t{1} << 16});
  h.set_outputs({exp(y), concat({neg(y), y, y}, 0)});
  Function fh = compile(h);
  fh({in});
  EXPECT_EQ(fh.stats().stepwise_runs, std::thread::hardware_concurrency() > 1 ? 1 : 0);
}

// A weight counts toward a step's work only where the step splits: a Gather reads a few
// rows of its table, so a large embedding table must not make a program of split steps
// look branch-bound (BERT-mini's steps each paid ~3 us through the engine). The same table
// as a graph input still counts.
TEST(Compiler, AGathersLargeWeightTableDoesNotPushStepsOneByOne) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: nothing can overlap";
  std::mt19937 rng(5);
  const Tensor table = testing::random_tensor(DType::kFloat32, {4096, 256}, rng);
  Tensor idx = Tensor::zeros(DType::kInt64, {512});
  for (int64_t i = 0; i < 512; ++i) idx.store_int(i, (i * 37) % 4096);
  auto branches = [](Graph& g, Var t, Var ids) {
    Node* gather = g.add_node(std::make_shared<Gather>(Attrs{{"axis", int64_t{0}}}), {t, ids});
    Var rows(&g, gather->outputs[0]);
    g.set_outputs({exp(rows), tanh(neg(rows))});
  };
  Graph g("weight_table");
  branches(g, constant(g, table, "table"), input(g, "ids", DType::kInt64, {512}));
  Function f = compile(g);
  auto out = f({idx});
  const double want = std::exp(table.load(111 * 256 + 7));  // row 3 is table row 111
  EXPECT_NEAR(out[0].load(256 * 3 + 7), want, 1e-6 * want);
  EXPECT_EQ(f.stats().runs, 1);
  EXPECT_EQ(f.stats().stepwise_runs, 0);
  Graph h("input_table");
  Var table_in = input(h, "table", DType::kFloat32, {4096, 256});  // inputs in this order
  branches(h, table_in, input(h, "ids", DType::kInt64, {512}));
  Function fh = compile(h);
  fh({table, idx});
  EXPECT_EQ(fh.stats().stepwise_runs, 1);
}

// A splittable op whose parts 0 and 1 meet only if they run at the same time (as
// RendezvousOp's sides do); out[p] is 1 if part p saw the other, and parts >= 2 write 1.
class SplitRendezvousOp : public COp {
 public:
  SplitRendezvousOp() : COp("split_rendezvous_test_op", {}) {}
  std::vector<TensorType> infer_type(const std::vector<TensorType>& in) const override {
    return {TensorType{DType::kInt32, in[0].dims}};
  }
  std::vector<Shape> infer_shape(const std::vector<Shape>& in) const override { return {in[0]}; }
  void perform(const std::vector<Tensor>&, std::vector<Tensor>&) const override {}
  bool c_splittable(const Node&) const override { return true; }
  std::string c_support_code() const override { return "static int kiln_split_flags[2];"; }
  std::string c_code(const Node&, const CodeNames& names, const Sub& sub) const override {
    const std::string c = sub.ctx;
    return "int32_t *o = (int32_t *)" + names.outputs[0] + "->data;\n"
           "const int p = " + c + "->part;\n"
           "int seen = 1;\n"
           "if (p < 2) {\n"
           "  __atomic_store_n(&kiln_split_flags[p], 1, __ATOMIC_SEQ_CST);\n"
           "  seen = 0;\n"
           "  for (long i = 0; i < 3000000000L && !seen; ++i)\n"
           "    seen = __atomic_load_n(&kiln_split_flags[1 - p], __ATOMIC_SEQ_CST);\n"
           "}\n"
           "o[p] = seen;\n";
  }
};

TEST(Executor, PartsOfASplitThunkRunAtTheSameTime) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: nothing can overlap";
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions options;
  options.engine = engine.get();
  options.split_grain = 4;
  Graph g("split_parts");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({g.add_node(std::make_shared<SplitRendezvousOp>(), {x})->outputs[0]});
  Function f = compile(g, options);
  auto out = f({Tensor::zeros(DType::kFloat32, {64})});
  // 2 workers, 64 elements of grain 4: one part per worker.
  EXPECT_EQ(f.stats().split_calls, 1);
  EXPECT_EQ(f.stats().parts, 2);
  EXPECT_EQ(out[0].load_int(0), 1) << "part 0 never saw part 1 running";
  EXPECT_EQ(out[0].load_int(1), 1) << "part 1 never saw part 0 running";
}

TEST(Executor, SplitsOnlyLargeSplittableCallsAndNeverAFullReduction) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions options;
  options.engine = engine.get();
  Graph g("split_sizes");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, kDynamic});
  g.set_outputs({exp(x), apply("reduce_sum", {x}, {{"axes", std::vector<int64_t>{1}}}),
                 apply("reduce_sum", {x}, {{"keepdims", int64_t{0}}})});
  Function f = compile(g, options);
  std::mt19937 rng(3);
  Tensor small = testing::random_tensor(DType::kFloat32, {10, 100}, rng);
  f({small});
  EXPECT_EQ(f.stats().split_calls, 0) << "1000 elements are below the grain";
  // 512 x 512 = 4 grains: exp and the row sum split (one part per worker), the total does not.
  Tensor big = testing::random_tensor(DType::kFloat32, {512, 512}, rng);
  auto out = f({big});
  EXPECT_EQ(f.stats().split_calls, 2);
  EXPECT_EQ(f.stats().parts, 4);
  auto want = evaluate_reference(g, {big});
  for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(testing::tensors_close(out[k], want[k], 1e-4, 1e-3));
  // 384 x 512 = 3 grains: 3 parts would leave one of the 2 workers two of them; each call
  // takes 2.
  Tensor three = testing::random_tensor(DType::kFloat32, {384, 512}, rng);
  out = f({three});
  EXPECT_EQ(f.stats().split_calls, 4);
  EXPECT_EQ(f.stats().parts, 8);
  want = evaluate_reference(g, {three});
  for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(testing::tensors_close(out[k], want[k], 1e-4, 1e-3));
}

// A CPU reshape of a temporary binds its bytes (nothing copied), so the temporary must stay
// alive while the view is read: here d is born after the reshapes, and would take a's bytes
// if a died at its last direct reader. A reshape of an input (possibly strided), of an
// output, or into an output copies. Serial and parallel (split) runs, with poisoned buffers.
TEST(Executor, CpuReshapesOfTemporariesAreViewsThatKeepTheirBytesAlive) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  for (Engine* e : {static_cast<Engine*>(nullptr), engine.get()}) {
    CompileOptions options;
    options.engine = e;
    options.split_grain = 4;
    options.poison_buffers = true;
    options.passes = "none";  // no fusion: each op is a step with a buffer of its own
    Graph g("cpu_views");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 12});
    Var a = exp(x);
    Var c = reshape(reshape(a, {-1, 3, 4}), {-1, 12});  // a view of a view of a
    Var d = mul(x, constant(g, Tensor::scalar(DType::kFloat32, 3.0)));
    Var r = relu(x);  // an output: a reshape of it copies
    g.set_outputs({add(c, d), reshape(x, {-1}), r, neg(reshape(r, {2, -1})), flatten(exp(d), 0)});
    Function f = compile(g, options);
    std::mt19937 rng(5);
    for (const Tensor& in :
         {testing::random_tensor(DType::kFloat32, {4, 12}, rng),
          testing::non_contiguous(testing::random_tensor(DType::kFloat32, {6, 12}, rng))}) {
      auto out = f({in});
      auto want = evaluate_reference(g, {in});
      ASSERT_EQ(out.size(), want.size());
      for (size_t k = 0; k < out.size(); ++k) {
        EXPECT_TRUE(testing::tensors_close(out[k], want[k], 1e-5, 1e-6)) << "output " << k;
      }
    }
    // Two views per run (the reshapes of a); every other reshape copies.
    EXPECT_EQ(f.stats().views, 2 * f.stats().runs);
  }
}

Var slice(Var x, int64_t axis, int64_t start, int64_t end) {
  using Ints = std::vector<int64_t>;
  return kiln::apply("slice", {x},
                     {{"starts", Ints{start}}, {"ends", Ints{end}}, {"axes", Ints{axis}}});
}

// Each op a step with a buffer of its own, poisoned before each run.
CompileOptions unfused_poisoned(Engine* engine) {
  CompileOptions options;
  options.engine = engine;
  options.poison_buffers = true;
  options.passes = "none";
  return options;
}

// A concat whose bands are contiguous (every dimension before its axis is 1) has its
// plain temporaries written in place by their producers, into a temporary or an output of
// the run; it copies only the rest: an input, an output, a view, a value it reads twice, a
// value already in another concat's band, a concat's own output (nested), a band that
// would break the arena's 64-byte alignment, and everything at batch 2 (strided bands).
// Band values read again later (directly and through a reshape) keep their bytes. Serial
// and step-by-step (the concats dominate, so branches go to the engine) runs, with
// poisoned buffers, against the reference.
TEST(Executor, ConcatInputsAreWrittenInPlaceInTheirBands) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  for (Engine* e : {static_cast<Engine*>(nullptr), engine.get()}) {
    SCOPED_TRACE(e ? "threaded engine" : "no engine");
    const CompileOptions options = unfused_poisoned(e);
    Graph g("concat_bands");
    Var x = input(g, "x", DType::kFloat32, {kDynamic, 16, 1024});
    Var a = exp(x);
    Var b = neg(x);
    Var c = concat({a, b, a}, 1);  // b in place; a read twice copies
    Var t = tanh(x);
    Var r = relu(x);               // an output: copied
    Var d = concat({t, x, r}, 1);  // t in place; the input x copies
    Var s = sin(x);
    Var nested = concat({c, s}, 1);  // s in place; c has bands of its own: copied
    Var odd = slice(x, 1, 0, 3);
    Var o1 = cos(odd);
    Var o3 = sqrt(abs(odd));
    Var tail = concat({o1, slice(abs(odd), 2, 0, 1019), o3}, 2);  // axis 2: none in place
    Var mid = concat({o1, o3}, 1);                                // both in place (an output)
    Var o2 = abs(slice(x, 2, 0, 5));
    Var viewed = concat({reshape(o2, {-1, 16, 5}), exp(o2)}, 1);  // the view copies; exp fits
    Var flat = reshape(x, {-1, 16 * 1024});
    Var p1 = exp(slice(flat, 1, 0, 3));
    Var unaligned = concat({p1, neg(slice(flat, 1, 3, 9))}, 1);  // the second band 12 bytes in
    g.set_outputs({nested, d, r, add(b, t), reshape(neg(t), {-1, 1024, 16}), tail, mid,
                   mul(viewed, viewed), add(concat({mul(o1, o3), o1}, 1), mid), unaligned});
    // o1 is in mid's band already: mul(o1, o3) alone goes in place.
    Function f = compile(g, options);
    std::mt19937 rng(7);
    for (int64_t batch : {1, 2, 1}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      const ExecutorStats before = f.stats();
      Tensor in = testing::random_tensor(DType::kFloat32, {batch, 16, 1024}, rng);
      auto out = f({in});
      auto want = evaluate_reference(g, {in});
      ASSERT_EQ(out.size(), want.size());
      for (size_t k = 0; k < out.size(); ++k) {
        EXPECT_TRUE(testing::tensors_close(out[k], want[k], 1e-5, 1e-6)) << "output " << k;
      }
      // Batch 1: b, t, s, o1, o3, mul(o1, o3), the exp of o2 (320 bytes in) and p1.
      EXPECT_EQ(f.stats().bands - before.bands, batch == 1 ? 8 : 0);
    }
    if (e && std::thread::hardware_concurrency() > 1) EXPECT_GT(f.stats().stepwise_runs, 0);
  }
}

// A concat output holding bands owns its bytes from the first band's write (before the
// concat's own step) to the last read of any band (after the concat's last reader): here a
// temporary written between a band and its concat, and one written after the concat's
// last reader while a band is still read, would each take those bytes otherwise.
TEST(Executor, ConcatBandsKeepTheirBytesFromFirstWriteToLastRead) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  for (Engine* e : {static_cast<Engine*>(nullptr), engine.get()}) {
    SCOPED_TRACE(e ? "threaded engine" : "no engine");
    const CompileOptions options = unfused_poisoned(e);
    Graph g("band_lifetimes");
    Var x = input(g, "x", DType::kFloat32, {1, 4096});
    Var b = neg(x);
    Var t2 = sin(exp(x));        // exp(x): a temporary between b and the concat
    Var r = concat({b, t2}, 1);  // b and t2 in place
    Var last_read = tanh(r);
    Var late = exp(concat({x, x}, 1));  // written after r's last reader, as large as r
    g.set_outputs({last_read, add(concat({b, b}, 1), late)});
    Function f = compile(g, options);
    std::mt19937 rng(11);
    Tensor in = testing::random_tensor(DType::kFloat32, {1, 4096}, rng);
    auto out = f({in});
    auto want = evaluate_reference(g, {in});
    for (size_t k = 0; k < out.size(); ++k) {
      EXPECT_TRUE(testing::tensors_close(out[k], want[k], 1e-5, 1e-6)) << "output " << k;
    }
    EXPECT_EQ(f.stats().bands, 2);
  }
}

// In-order runs of one plan keep their bindings (weights, the arena and its views) for
// the next run, and bind only inputs and outputs anew: each run then asks the storage
// pool for its output alone, earlier outputs keep their values, and the caller's input
// is not held once the run returns. A new input shape starts from a fresh binding.
TEST(Executor, InOrderRunsKeepTheirBindingsButNotTheirInputsOrOutputs) {
  Graph g("kept_bindings");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 64});
  std::mt19937 rng(8);
  const Tensor w = testing::random_tensor(DType::kFloat32, {64, 64}, rng);
  Var h = relu(matmul(x, constant(g, w, "w")));
  g.set_outputs({exp(reshape(h * 0.5, {-1}) - 1.0).var()});
  Function f = compile(g);
  auto reference = [&](const Tensor& in) {
    std::vector<double> out;
    for (int64_t r = 0; r < in.shape()[0]; ++r) {
      for (int64_t c = 0; c < 64; ++c) {
        double acc = 0;
        for (int64_t k = 0; k < 64; ++k) acc += in.load(r * 64 + k) * w.load(k * 64 + c);
        out.push_back(std::exp(std::max(acc, 0.0) * 0.5 - 1.0));
      }
    }
    return out;
  };
  auto expect_near = [](const Tensor& got, const std::vector<double>& want) {
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got.load(static_cast<int64_t>(i)), want[i], 1e-4 * (1 + std::abs(want[i])));
  };
  std::vector<Tensor> ins, outs;
  for (int i = 0; i < 6; ++i) ins.push_back(testing::random_tensor(DType::kFloat32, {32, 64}, rng));
  f({ins[0]});  // plans and binds
  const PoolStats before = pool_stats();
  for (int i = 1; i < 6; ++i) outs.push_back(f({ins[i]})[0]);
  const PoolStats after = pool_stats();
  EXPECT_EQ((after.allocations - before.allocations) + (after.reuses - before.reuses), 5u)
      << "one pool request per run: its output";
  for (int i = 1; i < 6; ++i) {
    SCOPED_TRACE("run " + std::to_string(i));
    expect_near(outs[static_cast<size_t>(i - 1)], reference(ins[static_cast<size_t>(i)]));
    EXPECT_EQ(ins[static_cast<size_t>(i)].storage().use_count(), 1) << "the input is held";
  }
  const Tensor other = testing::random_tensor(DType::kFloat32, {7, 64}, rng);
  expect_near(f({other})[0], reference(other));
  expect_near(f({ins[1]})[0], reference(ins[1]));
}

TEST(Executor, OverlappingAsyncRunsEachGetTheirOwnResults) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions options;
  options.engine = engine.get();
  options.split_grain = 64;
  for (bool branched : {true, false}) {
    SCOPED_TRACE(branched ? "branched graph (steps pushed one by one)" : "chain (one push per run)");
    Graph g(branched ? "async_branches" : "async_chain");
    Var x = input(g, "x", DType::kFloat32, {kDynamic});
    Var y = input(g, "y", DType::kFloat32, {kDynamic});
    Var t = exp(x) * 2.0;
    if (branched) {
      g.set_outputs({t + y, (x - y) * y});
    } else {
      g.set_outputs({sqrt(abs(t + y))});
    }
    Function f = compile(g, options);
    std::mt19937 rng(11);
    std::vector<std::vector<Tensor>> inputs;
    std::vector<PendingRun> runs;
    for (int i = 0; i < 6; ++i) {
      // Different shapes, so different plans, in flight at once; large enough that the
      // branched graph's steps are pushed one by one.
      int64_t n = 40000 + 517 * i;
      inputs.push_back({testing::random_tensor(DType::kFloat32, {n}, rng),
                        testing::random_tensor(DType::kFloat32, {n}, rng)});
      runs.push_back(f.run_async(inputs.back()));
    }
    for (int i = 5; i >= 0; --i) {
      auto got = runs[static_cast<size_t>(i)].get();
      auto want = evaluate_reference(g, inputs[static_cast<size_t>(i)]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_TRUE(testing::tensors_close(got[k], want[k], 1e-5, 1e-5)) << "run " << i;
      EXPECT_FALSE(runs[static_cast<size_t>(i)].valid());
    }
    EXPECT_EQ(f.stats().runs, 6);
  }
}

TEST(Executor, AsyncRunErrorsBelongToTheirRunAndAreRethrownOnce) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions options;
  options.engine = engine.get();
  Graph g("async_failing");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  Node* bad = g.add_node(std::make_shared<FailingOp>(), {exp(x)});
  g.set_outputs({relu(Var(&g, bad->outputs[0])), neg(x)});
  Graph ok("async_healthy");
  Var y = input(ok, "y", DType::kFloat32, {kDynamic});
  ok.set_outputs({y * y, -y});
  Function f = compile(g, options);
  Function h = compile(ok, options);
  Tensor t = Tensor::from_doubles(DType::kFloat32, {3}, {1, 2, 3});

  PendingRun failing = f.run_async({t});
  PendingRun healthy = h.run_async({t});
  std::string msg = testing::error_of([&] { failing.get(); });
  EXPECT_NE(msg.find("node 1 (failing_test_op)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("refusing 3 elements"), std::string::npos) << msg;
  EXPECT_TRUE(testing::tensors_close(healthy.get()[0],
                                     Tensor::from_doubles(DType::kFloat32, {3}, {1, 4, 9})));
  // Taken once: a second get() is a clear error, and the engine holds no leftover failure.
  EXPECT_NE(testing::error_of([&] { failing.get(); }).find("no run"), std::string::npos);
  EXPECT_NO_THROW(engine->wait_for_all());
  // A run dropped unwaited is waited for by its destructor; its error goes nowhere else.
  { PendingRun dropped = f.run_async({t}); }
  EXPECT_NO_THROW(engine->wait_for_all());
  EXPECT_TRUE(testing::tensors_close(h({t})[1], Tensor::from_doubles(DType::kFloat32, {3}, {-1, -2, -3})));
  // Input errors are the caller's and throw at once.
  msg = testing::error_of([&] { h.run_async({Tensor::zeros(DType::kInt32, {3})}); });
  EXPECT_NE(msg.find("input 'y': wrong dtype"), std::string::npos) << msg;
}

TEST(Executor, AsyncRunOutlivesItsFunction) {
  auto engine = make_engine(EngineKind::kThreaded, 2);
  CompileOptions options;
  options.engine = engine.get();
  Graph g("async_outlives");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({x + 1.0, x * 3.0});
  Tensor t = Tensor::from_doubles(DType::kFloat32, {2}, {1, 2});
  PendingRun run;
  {
    Function f = compile(g, options);
    run = f.run_async({t});
  }
  auto out = run.get();
  EXPECT_TRUE(testing::tensors_close(out[1], Tensor::from_doubles(DType::kFloat32, {2}, {3, 6})));
}

TEST(Compiler, BrokenFragmentErrorNamesNodeOpFragmentLineAndKeptSource) {
  OpRegistry::instance().add("broken_test_op",
                             [](const Attrs&) { return std::make_shared<BrokenOp>(); });
  Graph g("broken");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  Var y = relu(x);
  g.set_outputs({apply("broken_test_op", {y}).var()});
  try {
    compile(g);
    FAIL() << "compiled a broken fragment";
  } catch (const CompileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("node 1 (broken_test_op), c_code line 3"), std::string::npos) << m;
    EXPECT_NE(m.find("undeclared identifier 'undefined_symbol_xyz'"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined_symbol_xyz += 1;"), std::string::npos) << m;  // the offending line
    EXPECT_NE(m.find("full source kept at"), std::string::npos) << m;
    ASSERT_TRUE(std::filesystem::exists(e.kept_source()));
    EXPECT_NE(read_file(e.kept_source()).find("undefined_symbol_xyz"), std::string::npos);
    ASSERT_FALSE(e.diagnostics().empty());
    const Diagnostic& d = e.diagnostics()[0];
    EXPECT_EQ(d.origin.node, 1);
    EXPECT_EQ(d.origin.fragment, "c_code");
    EXPECT_EQ(d.origin.fragment_line, 3);
  }
}

TEST(Compiler, StateStructInitAndCleanupHooks) {
  OpRegistry::instance().add("counter_test_op",
                             [](const Attrs&) { return std::make_shared<CounterOp>(); });
  Graph g("counter");
  Var x = input(g, "x", DType::kFloat32, {kDynamic});
  g.set_outputs({apply("counter_test_op", {x}).var()});
  Function f = compile(g);
  Tensor t = Tensor::zeros(DType::kFloat32, {2});
  EXPECT_EQ(f({t})[0].load_int(0), 101);
  EXPECT_EQ(f({t})[0].load_int(0), 102);
  EXPECT_EQ(f.info().compiler_log, "");
}

TEST(Compiler, ModuleLayoutBannersAndDeduplicatedIncludes) {
  Graph g("layout");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 256});
  Var b = input(g, "b", DType::kFloat32, {256});
  Var y = relu(exp(x) + b);
  g.set_outputs({y});
  CompileOptions unfused;  // one thunk per node: the layout under test
  unfused.passes = "none";
  std::string src = generate_source(g, unfused);
  EXPECT_NE(src.find("/* node 1: add(t2, b) -> t3  [float32 (?, 256)] */"), std::string::npos)
      << src;
  EXPECT_NE(src.find("const kiln_module_info *kiln_module(const kiln_support *support)"), std::string::npos);
  // The include block (before the pasted ABI header) names each header once.
  std::string includes = src.substr(0, src.find("/* kiln module ABI"));
  size_t first = includes.find("#include <math.h>");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(includes.find("#include <math.h>", first + 1), std::string::npos)
      << "include emitted twice";
  EXPECT_EQ(src.find("#include <Python.h>"), std::string::npos);
  // One thunk and one cleanup label per node.
  size_t thunks = 0, labels = 0;
  for (size_t p = 0; (p = src.find("static int kiln_node_", p)) != std::string::npos; ++p) ++thunks;
  for (size_t p = 0; (p = src.find("kiln_cleanup: __attribute__", p)) != std::string::npos; ++p)
    ++labels;
  EXPECT_EQ(thunks, 3u);
  EXPECT_EQ(labels, 4u);  // three thunks plus state init
}

TEST(Compiler, ToolchainFingerprintNamesCompilerFlagsAndConcreteCpu) {
  const Toolchain& tc = Toolchain::get();
  EXPECT_NE(tc.cpu(), "native");
  EXPECT_FALSE(tc.cpu().empty());
  EXPECT_NE(tc.fingerprint().find("-O3"), std::string::npos);
  EXPECT_NE(tc.fingerprint().find("-march=" + tc.cpu()), std::string::npos);
  EXPECT_NE(tc.fingerprint().find("version="), std::string::npos);
  const Toolchain& extra = Toolchain::get(ToolchainConfig{"", "-DKILN_TEST_FLAG=1"});
  EXPECT_NE(extra.fingerprint(), tc.fingerprint());
}

TEST(Compiler, KeyIgnoresNamesAndWeightsButNotStructure) {
  auto build = [](const std::string& in_name, double w, bool swap) {
    Graph g("k");
    Var a = input(g, in_name, DType::kFloat32, {kDynamic, 4});
    Var c = parameter(g, Tensor::from_doubles(DType::kFloat32, {4}, {w, w, w, w}), "w");
    Var e = exp(a);
    g.set_outputs({swap ? sub(c, e) : sub(e, c)});
    return module_key(g, KeyComponents{{"toolchain", "tc"}}).key;
  };
  EXPECT_EQ(build("x", 1.0, false), build("renamed", 2.0, false));
  EXPECT_NE(build("x", 1.0, false), build("x", 1.0, true));
}

TEST(Compiler, MissingCompilerIsAClearError) {
  Graph g("nocc");
  Var x = input(g, "x", DType::kFloat32, {2});
  g.set_outputs({relu(x)});
  CompileOptions opts;
  opts.toolchain.cc = "/nonexistent/kiln-cc";
  try {
    compile(g, opts);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kiln-cc"), std::string::npos) << e.what();
  }
}

TEST(Compiler, KilnCflagsAreAppended) {
  Graph g("cflags");
  Var x = input(g, "x", DType::kFloat32, {2});
  g.set_outputs({relu(x)});
  CompileOptions opts;
  opts.toolchain.cflags = "-Dkiln_tensor=int";  // reaches clang: no kernel compiles
  EXPECT_THROW(compile(g, opts), CompileError);
  opts.toolchain.cflags = "-DKILN_HARMLESS=1";
  EXPECT_NO_THROW(compile(g, opts));
}

}  // namespace
}  // namespace kiln
