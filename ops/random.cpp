#include "ops/random.h"

#include <cmath>
#include <numbers>

#include "ops/builders.h"
#include "ops/c/c_text.h"
#include "ops/grad/support.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// The generator and the draws, written once in C: emitted into modules and compiled into kiln
// for perform and the known-answer tests.
#define KILN_RANDOM_RULES                                                                        \
  KILN_RNG_FN void kiln_philox(const uint32_t* c, const uint32_t* k, uint32_t* out) {            \
    uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3], k0 = k[0], k1 = k[1];                   \
    for (int r = 0; r < 10; ++r) {                                                               \
      if (r) {                                                                                   \
        k0 += 0x9E3779B9u;                                                                       \
        k1 += 0xBB67AE85u;                                                                       \
      }                                                                                          \
      const uint64_t p0 = (uint64_t)0xD2511F53u * x0, p1 = (uint64_t)0xCD9E8D57u * x2;           \
      const uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;   \
      x1 = (uint32_t)p1;                                                                         \
      x3 = (uint32_t)p0;                                                                         \
      x0 = y0;                                                                                   \
      x2 = y2;                                                                                   \
    }                                                                                            \
    out[0] = x0;                                                                                 \
    out[1] = x1;                                                                                 \
    out[2] = x2;                                                                                 \
    out[3] = x3;                                                                                 \
  }                                                                                              \
  /* The four words of block b (elements 4b..4b+3, or 2b..2b+1 of two words each). */            \
  KILN_RNG_FN void kiln_rng_block(uint64_t seed, uint32_t stream, uint32_t run, uint64_t b,      \
                                  uint32_t* out) {                                               \
    const uint32_t c[4] = {(uint32_t)b, (uint32_t)(b >> 32), stream, run};                       \
    const uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};                              \
    kiln_philox(c, k, out);                                                                      \
  }                                                                                              \
  /* Element i's uniform in [0, 1): 24 bits of its word (float32), 53 of two (float64). */       \
  KILN_RNG_FN double kiln_rng_uniform(uint64_t seed, uint32_t stream, uint32_t run, uint64_t i,  \
                                      int wide) {                                                \
    uint32_t w[4];                                                                               \
    if (!wide) {                                                                                 \
      kiln_rng_block(seed, stream, run, i / 4, w);                                               \
      return (double)(w[i % 4] >> 8) * (1.0 / 16777216.0);                                       \
    }                                                                                            \
    kiln_rng_block(seed, stream, run, i / 2, w);                                                 \
    const uint64_t bits = ((uint64_t)(w[2 * (i % 2)] >> 5) << 26) | (w[2 * (i % 2) + 1] >> 6);   \
    return (double)bits * (1.0 / 9007199254740992.0);                                            \
  }                                                                                              \
  /* Element i's standard normal, Box-Muller over the two words of its half-block. */            \
  KILN_RNG_FN double kiln_rng_normal(uint64_t seed, uint32_t stream, uint32_t run, uint64_t i) { \
    uint32_t w[4];                                                                               \
    kiln_rng_block(seed, stream, run, i / 2, w);                                                 \
    const double u1 = ((double)w[2 * (i % 2)] + 1.0) * (1.0 / 4294967296.0);                     \
    const double u2 = (double)w[2 * (i % 2) + 1] * (1.0 / 4294967296.0);                         \
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);                             \
  }

#define KILN_RNG_FN static
using std::cos;
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
  check_known_attrs(p,
                    {"seed", "stream", "low", "high", "mean", "scale", "ratio", "dtype", "shape"});
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
  if (dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64 && kind != kBernoulli)
    throw AttrError("dtype", "must be float32 or float64 (" + name() + ")");
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
  if (kind_ == kBernoulli || !has_shape_) return {inputs[0]};
  return {Shape(shape_.begin(), shape_.end())};
}

void RandomOp::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  Tensor& y = outputs[0];
  const auto stream = static_cast<uint32_t>(stream_);
  const int wide = dtype_ == DType::kFloat64 ? 1 : 0;
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
  s += "  int64_t r_n = 1;\n";
  s += "  for (int d = 0; d < " + std::to_string(r) + "; ++d) r_n *= " + Y + "->shape[d];\n";
  s += "  " + T + " *r_y = (" + T + " *)" + Y + "->data;\n";
  const std::string stream = std::to_string(stream_) + "u";
  const std::string wide = dtype_ == DType::kFloat64 ? "1" : "0";
  // Inputs are read in row-major order through their strides.
  if (kind_ == kBernoulli || kind_ == kDropout) {
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
