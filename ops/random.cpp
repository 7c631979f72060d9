#include "ops/random.h"

#include <cmath>
#include <numbers>

#include "ops/builders.h"
#include "ops/c/c_text.h"
#include "ops/c/workspace.h"
#include "ops/grad/support.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// The generator and the draws, written once in C: emitted into modules and compiled into kiln
// for perform and the known-answer tests.
#define KILN_RANDOM_RULES                                                                         \
  KILN_RNG_FN void kiln_philox(const uint32_t* c, const uint32_t* k, uint32_t* out) {             \
    uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3], k0 = k[0], k1 = k[1];                    \
    for (int r = 0; r < 10; ++r) {                                                                \
      if (r) {                                                                                    \
        k0 += 0x9E3779B9u;                                                                        \
        k1 += 0xBB67AE85u;                                                                        \
      }                                                                                           \
      const uint64_t p0 = (uint64_t)0xD2511F53u * x0, p1 = (uint64_t)0xCD9E8D57u * x2;            \
      const uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;    \
      x1 = (uint32_t)p1;                                                                          \
      x3 = (uint32_t)p0;                                                                          \
      x0 = y0;                                                                                    \
      x2 = y2;                                                                                    \
    }                                                                                             \
    out[0] = x0;                                                                                  \
    out[1] = x1;                                                                                  \
    out[2] = x2;                                                                                  \
    out[3] = x3;                                                                                  \
  }                                                                                               \
  /* The four words of block b (elements 4b..4b+3, or 2b..2b+1 of two words each). */             \
  KILN_RNG_FN void kiln_rng_block(uint64_t seed, uint32_t stream, uint32_t run, uint64_t b,       \
                                  uint32_t* out) {                                                \
    const uint32_t c[4] = {(uint32_t)b, (uint32_t)(b >> 32), stream, run};                        \
    const uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};                               \
    kiln_philox(c, k, out);                                                                       \
  }                                                                                               \
  /* Element i's uniform in [0, 1): 24 bits of its word (float32), 53 of two (float64). */        \
  KILN_RNG_FN double kiln_rng_uniform(uint64_t seed, uint32_t stream, uint32_t run, uint64_t i,   \
                                      int wide) {                                                 \
    uint32_t w[4];                                                                                \
    if (!wide) {                                                                                  \
      kiln_rng_block(seed, stream, run, i / 4, w);                                                \
      return (double)(w[i % 4] >> 8) * (1.0 / 16777216.0);                                        \
    }                                                                                             \
    kiln_rng_block(seed, stream, run, i / 2, w);                                                  \
    const uint64_t bits = ((uint64_t)(w[2 * (i % 2)] >> 5) << 26) | (w[2 * (i % 2) + 1] >> 6);    \
    return (double)bits * (1.0 / 9007199254740992.0);                                             \
  }                                                                                               \
  /* Element i's standard normal, Box-Muller over the two words of its half-block. */             \
  KILN_RNG_FN double kiln_rng_normal(uint64_t seed, uint32_t stream, uint32_t run, uint64_t i) {  \
    uint32_t w[4];                                                                                \
    kiln_rng_block(seed, stream, run, i / 2, w);                                                  \
    const double u1 = ((double)w[2 * (i % 2)] + 1.0) * (1.0 / 4294967296.0);                      \
    const double u2 = (double)w[2 * (i % 2) + 1] * (1.0 / 4294967296.0);                          \
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);                              \
  }                                                                                               \
  /* A row of unnormalized log-probabilities as weights exp(x - max) (the +inf entries alone  */  \
  /* when there are some); returns their sum, 0 when every entry is -inf, -1 when one is NaN. */  \
  /* (m - m != 0 tells an infinite m: no INFINITY, which some device compilers lack.)          */ \
  KILN_RNG_FN double kiln_rng_weights(const double* x, int64_t n, double* w) {                    \
    double m = 0, total = 0;                                                                      \
    for (int64_t c = 0; c < n; ++c) {                                                             \
      if (x[c] != x[c]) return -1;                                                                \
      if (c == 0 || x[c] > m) m = x[c];                                                           \
    }                                                                                             \
    const int infinite = m - m != 0;                                                              \
    if (n == 0 || (infinite && m < 0)) return 0;                                                  \
    for (int64_t c = 0; c < n; ++c) {                                                             \
      w[c] = infinite ? (x[c] == m ? 1.0 : 0.0) : exp(x[c] - m);                                  \
      total += w[c];                                                                              \
    }                                                                                             \
    return total;                                                                                 \
  }                                                                                               \
  /* The class whose share of the running sum holds u * total: -1 for a row without weights. */   \
  KILN_RNG_FN int64_t kiln_rng_categorical(const double* w, int64_t n, double total, double u) {  \
    if (!(total > 0)) return -1;                                                                  \
    const double target = u * total;                                                              \
    double run = 0;                                                                               \
    int64_t last = -1;                                                                            \
    for (int64_t c = 0; c < n; ++c) {                                                             \
      if (!(w[c] > 0)) continue;                                                                  \
      run += w[c];                                                                                \
      last = c;                                                                                   \
      if (run > target) return c;                                                                 \
    }                                                                                             \
    return last; /* rounding left target at the sum: the last class with weight */                \
  }

#define KILN_RNG_FN static
using std::cos;
using std::exp;
using std::log;
using std::sqrt;
KILN_RANDOM_RULES
#undef KILN_RNG_FN

const char* const kRulesC = KILN_C_TEXT(KILN_RANDOM_RULES);

const char* kind_name(RandomOp::Kind k) {
  switch (k) {
    case RandomOp::kUniform:
      return "random_uniform";
    case RandomOp::kNormal:
      return "random_normal";
    case RandomOp::kBernoulli:
      return "bernoulli";
    case RandomOp::kMultinomial:
      return "multinomial";
    default:
      return "dropout_train";
  }
}

}  // namespace

void philox4x32_10(const uint32_t c[4], const uint32_t k[2], uint32_t out[4]) {
  kiln_philox(c, k, out);
}

RandomOp::RandomOp(Kind kind, Attrs props) : COp(kind_name(kind), std::move(props)), kind_(kind) {
  const Attrs& p = this->props();
  check_known_attrs(p, {"seed", "stream", "low", "high", "mean", "scale", "ratio", "dtype", "shape",
                        "sample_size"});
  seed_ = static_cast<uint64_t>(attr_int(p, "seed", 0));
  stream_ = attr_int(p, "stream", 0);
  if (stream_ < 0 || stream_ > 0xffffffffLL) throw AttrError("stream", "must fit 32 bits");
  a_ = attr_float(p, kind == kNormal ? "mean" : (kind == kDropout ? "ratio" : "low"),
                  kind == kDropout ? 0.5 : 0.0);
  b_ = attr_float(p, kind == kNormal ? "scale" : "high", 1.0);
  const std::string dt = attr_string(p, "dtype", std::string("float32"));
  const std::optional<DType> parsed = dtype_from_name(dt);
  if (!parsed) throw AttrError("dtype", "'" + dt + "' is not a dtype (" + name() + ")");
  dtype_ = *parsed;
  if (kind == kMultinomial) {
    if (dtype_ != DType::kInt32 && dtype_ != DType::kInt64)
      throw AttrError("dtype", "must be int32 or int64 (multinomial)");
    sample_size_ = attr_int(p, "sample_size", 1);
    if (sample_size_ < 0) throw AttrError("sample_size", "must be >= 0");
  } else if (dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64 && kind != kBernoulli) {
    throw AttrError("dtype", "must be float32 or float64 (" + name() + ")");
  }
  has_shape_ = p.count("shape") != 0;
  if (has_shape_) shape_ = attr_ints(p, "shape");
  for (int64_t d : shape_)
    if (d < 0) throw AttrError("shape", "sizes must be >= 0 (" + name() + ")");
  if (kind == kDropout && !(a_ >= 0 && a_ <= 1)) throw AttrError("ratio", "must be in [0, 1]");
  if (kind == kUniform && !(b_ >= a_)) throw AttrError("high", "must be at least low");
}

std::vector<TensorType> RandomOp::infer_type(const std::vector<TensorType>& inputs) const {
  if (kind_ == kDropout) {
    if (inputs.empty() || inputs.size() > 2) throw UserError("dropout_train takes x[, ratio]");
    const TensorType& x = inputs[0];
    if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
      throw UnsupportedError("dropout_train: " + x.to_string() + " (float32 and float64)");
    if (inputs.size() == 2 && (!is_float(inputs[1].dtype) || inputs[1].rank() != 0))
      throw UserError("dropout_train: ratio " + inputs[1].to_string() + " must be a float scalar");
    return {x, TensorType{DType::kBool, x.dims}};
  }
  if (kind_ == kMultinomial) {
    if (inputs.size() != 1 || !is_float(inputs[0].dtype) || inputs[0].rank() != 2)
      throw UserError("multinomial takes one float (batch, classes) input, the log-probabilities");
    return {TensorType{dtype_, {inputs[0].dims[0], sample_size_}}};
  }
  if (kind_ == kBernoulli) {
    if (inputs.size() != 1 || !is_float(inputs[0].dtype))
      throw UserError("bernoulli takes one float input (the probabilities)");
    return {TensorType{dtype_, inputs[0].dims}};
  }
  if (has_shape_ == !inputs.empty())
    throw UserError(name() + " takes a shape or an input to copy it from, not both");
  return {TensorType{dtype_, has_shape_ ? shape_ : inputs[0].dims}};
}

std::vector<Shape> RandomOp::infer_shape(const std::vector<Shape>& inputs) const {
  if (kind_ == kDropout) return {inputs[0], inputs[0]};
  if (kind_ == kMultinomial) return {Shape{inputs[0][0], sample_size_}};
  if (kind_ == kBernoulli || !has_shape_) return {inputs[0]};
  return {Shape(shape_.begin(), shape_.end())};
}

void RandomOp::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  Tensor& y = outputs[0];
  const auto stream = static_cast<uint32_t>(stream_);
  const int wide = dtype_ == DType::kFloat64 ? 1 : 0;
  if (kind_ == kMultinomial) {
    const Tensor x = inputs[0].contiguous();
    const int64_t classes = x.shape()[1];
    std::vector<double> row(static_cast<size_t>(classes)), w(row.size());
    for (int64_t b = 0; b < x.shape()[0]; ++b) {
      for (int64_t c = 0; c < classes; ++c) row[static_cast<size_t>(c)] = x.load(b * classes + c);
      const double total = kiln_rng_weights(row.data(), classes, w.data());
      for (int64_t k = 0; k < sample_size_; ++k) {
        const int64_t i = b * sample_size_ + k;
        y.store_int(i, kiln_rng_categorical(
                           w.data(), classes, total,
                           kiln_rng_uniform(seed_, stream, 0, static_cast<uint64_t>(i), 1)));
      }
    }
    return;
  }
  for (int64_t i = 0; i < y.numel(); ++i) {
    const auto u = static_cast<uint64_t>(i);
    switch (kind_) {
      case kUniform:
        y.store(i, a_ + (b_ - a_) * kiln_rng_uniform(seed_, stream, 0, u, wide));
        break;
      case kNormal:
        y.store(i, a_ + b_ * kiln_rng_normal(seed_, stream, 0, u));
        break;
      case kBernoulli:
        y.store(i, kiln_rng_uniform(seed_, stream, 0, u, 0) < inputs[0].load(i) ? 1.0 : 0.0);
        break;
      case kDropout: {
        const double ratio = inputs.size() == 2 ? inputs[1].load(0) : a_;
        const bool keep = kiln_rng_uniform(seed_, stream, 0, u, 0) >= ratio;
        y.store(i, keep && ratio < 1 ? inputs[0].load(i) / (1 - ratio) : 0.0);
        outputs[1].store(i, keep ? 1.0 : 0.0);
        break;
      }
      case kMultinomial:
        break;  // drawn above, row by row
    }
  }
}

std::vector<Variable*> RandomOp::grad(const GradArgs& args) const {
  if (kind_ != kDropout) return Op::grad(args);
  std::vector<Variable*> out(args.node.inputs.size(), nullptr);
  if (args.node.inputs.size() == 2 && args.wanted[1])
    not_differentiable(args, 1, "dropout_train: the gradient of the ratio");
  if (!args.wanted[0]) return out;
  Var g = grad_of_out(args, 0);
  Var mask(&args.graph, args.node.outputs[1]);
  Var zero = scalar(args.graph, g.dtype(), 0.0);
  Var kept = args.node.inputs.size() == 2 ? g / (1.0 - cast(grad_in(args, 1), g.dtype()))
                                          : g * (a_ < 1 ? 1.0 / (1.0 - a_) : 0.0);
  out[0] = where(mask, kept, zero).var();
  return out;
}

const char* RandomOp::rules_c() { return kRulesC; }

std::string RandomOp::c_support_code() const {
  return std::string("#define KILN_RNG_FN __attribute__((unused)) static\n") + kRulesC + "\n";
}

std::string RandomOp::c_state_fields(const Node&, const std::string& prefix) const {
  return "uint32_t " + prefix + "run;\n";
}

std::string RandomOp::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const TensorType& yt = node.outputs[0]->type;
  const std::string T(dtype_c_type(yt.dtype));
  const std::string& Y = names.outputs[0];
  const int r = yt.rank();
  char seed[32], a[40], b[40];
  std::snprintf(seed, sizeof seed, "%lluULL", static_cast<unsigned long long>(seed_));
  std::snprintf(a, sizeof a, "%.17g", a_);
  std::snprintf(b, sizeof b, "%.17g", b_);
  std::string s = "{\n";
  // One draw of the run counter per call: calls of one module get fresh numbers.
  s += "  const uint32_t r_run = __atomic_fetch_add(&" + sub.state + "->" + sub.prefix +
       "run, 1u, __ATOMIC_RELAXED);\n";
  if (kind_ != kMultinomial) {
    s += "  int64_t r_n = 1;\n";
    s += "  for (int d = 0; d < " + std::to_string(r) + "; ++d) r_n *= " + Y + "->shape[d];\n";
  }
  s += "  " + T + " *r_y = (" + T + " *)" + Y + "->data;\n";
  const std::string stream = std::to_string(stream_) + "u";
  const std::string wide = dtype_ == DType::kFloat64 ? "1" : "0";
  // Inputs are read in row-major order through their strides.
  if (kind_ == kMultinomial) {
    const std::string& X = names.inputs[0];
    const std::string XT(dtype_c_type(node.inputs[0]->type.dtype));
    const std::string k = std::to_string(sample_size_);
    s += "  const int64_t r_c = " + X + "->shape[1];\n";
    s += "  " + c_workspace("double", "r_x", "2 * r_c", "multinomial's row");
    s += "  for (int64_t b = 0; b < " + X + "->shape[0]; ++b) {\n";
    s += "    for (int64_t c = 0; c < r_c; ++c)\n";
    s += "      r_x[c] = (double)((const " + XT + " *)" + X + "->data)[b * " + X +
         "->strides[0] + c * " + X + "->strides[1]];\n";
    s += "    const double total = kiln_rng_weights(r_x, r_c, r_x + r_c);\n";
    s += "    for (int64_t k = 0; k < " + k + "; ++k)\n";
    s += "      r_y[b * " + k + " + k] = (" + T +
         ")kiln_rng_categorical(r_x + r_c, r_c, total, "
         "kiln_rng_uniform(" +
         seed + ", " + stream + ", r_run, (uint64_t)(b * " + k + " + k), 1));\n";
    s += "  }\n";
  } else if (kind_ == kBernoulli || kind_ == kDropout) {
    const std::string& X = names.inputs[0];
    const std::string XT(dtype_c_type(node.inputs[0]->type.dtype));
    s += "  for (int64_t i = 0; i < r_n; ++i) {\n";
    s += "    int64_t rem = i, off = 0;\n";
    s += "    for (int d = " + std::to_string(r - 1) + "; d >= 0; --d) { off += rem % " + X +
         "->shape[d] * " + X + "->strides[d]; rem /= " + X + "->shape[d]; }\n";
    s += "    const double xv = (double)((const " + XT + " *)" + X + "->data)[off];\n";
    s += "    const double u = kiln_rng_uniform(" + std::string(seed) + ", " + stream +
         ", r_run, (uint64_t)i, 0);\n";
    if (kind_ == kBernoulli) {
      s += "    r_y[i] = (" + T + ")(u < xv ? 1 : 0);\n";
    } else {
      const std::string ratio = node.inputs.size() == 2
                                    ? "(double)*(const " +
                                          std::string(dtype_c_type(node.inputs[1]->type.dtype)) +
                                          " *)" + names.inputs[1] + "->data"
                                    : std::string(a);
      s += "    const double ratio = " + ratio + ";\n";
      s += "    const int keep = u >= ratio;\n";
      s += "    r_y[i] = (" + T + ")(keep && ratio < 1 ? xv / (1 - ratio) : 0.0);\n";
      s += "    ((uint8_t *)" + names.outputs[1] + "->data)[i] = (uint8_t)keep;\n";
    }
    s += "  }\n";
  } else if (kind_ == kUniform) {
    s += "  for (int64_t i = 0; i < r_n; ++i)\n";
    s += "    r_y[i] = (" + T + ")(" + std::string(a) + " + (" + b + " - " + a +
         ") * kiln_rng_uniform(" + seed + ", " + stream + ", r_run, (uint64_t)i, " + wide + "));\n";
  } else {
    s += "  for (int64_t i = 0; i < r_n; ++i)\n";
    s += "    r_y[i] = (" + T + ")(" + std::string(a) + " + " + b + " * kiln_rng_normal(" + seed +
         ", " + stream + ", r_run, (uint64_t)i));\n";
  }
  s += "}\n";
  return s;
}

}  // namespace kiln
