#include "ops/rnn.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "ctemplate/template.h"
#include "ops/c/elementwise_loop.h"
#include "ops/c/gemm_support.h"
#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

const std::vector<std::string> kActivations{
    "Sigmoid",    "Tanh",        "Relu", "Affine",   "LeakyRelu", "ThresholdedRelu",
    "ScaledTanh", "HardSigmoid", "Elu",  "Softsign", "Softplus"};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(',', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

double activate(int f, double a, double b, double x) {
  switch (f) {
    case 0:
      return 1.0 / (1.0 + std::exp(-x));
    case 1:
      return std::tanh(x);
    case 2:
      return std::max(x, 0.0);
    case 3:
      return a * x + b;
    case 4:
      return x >= 0 ? x : a * x;
    case 5:
      return x > a ? x : 0.0;
    case 6:
      return a * std::tanh(b * x);
    case 7:
      return std::clamp(a * x + b, 0.0, 1.0);
    case 8:
      return x >= 0 ? x : a * (std::exp(x) - 1.0);
    case 9:
      return x / (1.0 + std::abs(x));
    default:
      return x > 20 ? x : std::log1p(std::exp(x));
  }
}

// The engine every node of one dtype shares: all inputs contiguous, in layout 0.
constexpr const char* kEngine = R"kiln(
static ${T} kiln_rnn_act_${S}(int f, ${T} a, ${T} b, ${T} x) {
  switch (f) {
    case 0: return (${T})1 / ((${T})1 + exp${F}(-x));
    case 1: return tanh${F}(x);
    case 2: return x > 0 ? x : (${T})0;
    case 3: return a * x + b;
    case 4: return x >= 0 ? x : a * x;
    case 5: return x > a ? x : (${T})0;
    case 6: return a * tanh${F}(b * x);
    case 7: { ${T} y = a * x + b; return y < 0 ? (${T})0 : y > 1 ? (${T})1 : y; }
    case 8: return x >= 0 ? x : a * (exp${F}(x) - (${T})1);
    case 9: return x / ((${T})1 + fabs${F}(x));
    default: return x > 20 ? x : log1p${F}(exp${F}(x));
  }
}

static ${T} kiln_rnn_clip_${S}(${T} x, ${T} clip) {
  if (clip <= 0) return x;
  return x < -clip ? -clip : x > clip ? clip : x;
}

/* kind: 0 lstm (gates i o f c), 1 gru (z r h), 2 rnn. acts/alpha/beta: per direction, the
 * activations in ONNX order (lstm f g h, gru f g, rnn f). Returns -1 when scratch memory
 * runs out. */
static int kiln_rnn_${S}(kiln_ctx *ctx, int kind, int dirs, int reverse_only, int64_t seq,
                         int64_t batch, int64_t in, int64_t H, const int *acts,
                         const ${T} *alpha, const ${T} *beta, ${T} clip, int input_forget,
                         int lbr, const ${T} *X, const ${T} *W, const ${T} *R, const ${T} *Bias,
                         const ${T} *H0, const ${T} *C0, const ${T} *P, const int32_t *lens,
                         ${T} *Y, ${T} *Yh, ${T} *Yc) {
  const int G = kind == 0 ? 4 : kind == 1 ? 3 : 1, na = kind == 0 ? 3 : kind == 1 ? 2 : 1;
  const int64_t GH = G * H;
  ${T} *xw = (${T} *)ctx->workspace(ctx, (size_t)(seq * batch * GH + 1) * sizeof(${T}));
  ${T} *hr = (${T} *)ctx->workspace(ctx, (size_t)(batch * GH + 1) * sizeof(${T}));
  ${T} *h = (${T} *)ctx->workspace(ctx, (size_t)(batch * H * 5 + 1) * sizeof(${T}));
  if (!xw || !hr || !h) return -1;
  ${T} *c = h + batch * H, *rh = c + batch * H, *hh = rh + batch * H, *zb = hh + batch * H;
  memset(Y, 0, (size_t)(seq * dirs * batch * H) * sizeof(${T}));
  for (int d = 0; d < dirs; ++d) {
    const int rev = reverse_only || d == 1;
    const int *f = acts + d * na;
    const ${T} *al = alpha + d * na, *be = beta + d * na;
    const ${T} *Wd = W + d * GH * in, *Rd = R + d * GH * H, *Wb = Bias + d * 2 * GH, *Rb = Wb + GH;
    memcpy(h, H0 + d * batch * H, (size_t)(batch * H) * sizeof(${T}));
    if (kind == 0) memcpy(c, C0 + d * batch * H, (size_t)(batch * H) * sizeof(${T}));
    /* Every step's input projection at once: (seq * batch, in) x (in, G * H). */
    if (seq * batch > 0 && in > 0) {
      kiln_gemm_${S}(ctx, seq * batch, GH, in, (${T})1, X, in, 1, Wd, 1, in, (${T})0, xw, GH);
    } else {
      memset(xw, 0, (size_t)(seq * batch * GH) * sizeof(${T}));
    }
    for (int64_t s = 0; s < seq; ++s) {
      if (H > 0) kiln_gemm_${S}(ctx, batch, GH, H, (${T})1, h, H, 1, Rd, 1, H, (${T})0, hr, GH);
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = lens ? lens[b] : seq;
        if (s >= len) continue;
        const int64_t t = rev ? len - 1 - s : s;
        const ${T} *xg = xw + (t * batch + b) * GH, *hg = hr + b * GH;
        ${T} *hb = h + b * H, *cb = c + b * H, *y = Y + ((t * dirs + d) * batch + b) * H;
        for (int64_t j = 0; j < H; ++j) {
          if (kind == 0) {
            const ${T} *p = P + d * 3 * H;
            ${T} pi = xg[j] + hg[j] + Wb[j] + Rb[j] + p[j] * cb[j];
            ${T} pf = xg[2 * H + j] + hg[2 * H + j] + Wb[2 * H + j] + Rb[2 * H + j] + p[2 * H + j] * cb[j];
            ${T} pc = xg[3 * H + j] + hg[3 * H + j] + Wb[3 * H + j] + Rb[3 * H + j];
            const ${T} ig = kiln_rnn_act_${S}(f[0], al[0], be[0], kiln_rnn_clip_${S}(pi, clip));
            const ${T} fg = input_forget ? (${T})1 - ig
                                         : kiln_rnn_act_${S}(f[0], al[0], be[0], kiln_rnn_clip_${S}(pf, clip));
            const ${T} cg = kiln_rnn_act_${S}(f[1], al[1], be[1], kiln_rnn_clip_${S}(pc, clip));
            const ${T} C = fg * cb[j] + ig * cg;
            ${T} po = xg[H + j] + hg[H + j] + Wb[H + j] + Rb[H + j] + p[H + j] * C;
            const ${T} og = kiln_rnn_act_${S}(f[0], al[0], be[0], kiln_rnn_clip_${S}(po, clip));
            cb[j] = C;
            hb[j] = y[j] = og * kiln_rnn_act_${S}(f[2], al[2], be[2], C);
          } else if (kind == 1) {
            const ${T} z = kiln_rnn_act_${S}(f[0], al[0], be[0],
                kiln_rnn_clip_${S}(xg[j] + hg[j] + Wb[j] + Rb[j], clip));
            const ${T} r = kiln_rnn_act_${S}(f[0], al[0], be[0],
                kiln_rnn_clip_${S}(xg[H + j] + hg[H + j] + Wb[H + j] + Rb[H + j], clip));
            zb[b * H + j] = z;
            /* With linear_before_reset the reset gate scales R_h h (+ its bias); without,
             * it scales h before R_h, which the GEMM after this pass applies. */
            if (lbr) {
              rh[b * H + j] = r * (hg[2 * H + j] + Rb[2 * H + j]);
            } else {
              rh[b * H + j] = r * hb[j];
            }
          } else {
            hb[j] = y[j] = kiln_rnn_act_${S}(f[0], al[0], be[0],
                kiln_rnn_clip_${S}(xg[j] + hg[j] + Wb[j] + Rb[j], clip));
          }
        }
      }
      if (kind != 1) continue;
      if (!lbr && H > 0)
        kiln_gemm_${S}(ctx, batch, H, H, (${T})1, rh, H, 1, Rd + 2 * H * H, 1, H, (${T})0, hh, H);
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = lens ? lens[b] : seq;
        if (s >= len) continue;
        const int64_t t = rev ? len - 1 - s : s;
        const ${T} *xg = xw + (t * batch + b) * GH;
        ${T} *hb = h + b * H, *y = Y + ((t * dirs + d) * batch + b) * H;
        for (int64_t j = 0; j < H; ++j) {
          const ${T} rpart = lbr ? rh[b * H + j] : hh[b * H + j] + Rb[2 * H + j];
          const ${T} g = kiln_rnn_act_${S}(f[1], al[1], be[1],
              kiln_rnn_clip_${S}(xg[2 * H + j] + rpart + Wb[2 * H + j], clip));
          const ${T} z = zb[b * H + j];
          hb[j] = y[j] = ((${T})1 - z) * g + z * hb[j];
        }
      }
    }
    memcpy(Yh + d * batch * H, h, (size_t)(batch * H) * sizeof(${T}));
    if (kind == 0) memcpy(Yc + d * batch * H, c, (size_t)(batch * H) * sizeof(${T}));
  }
  return 0;
}
)kiln";

}  // namespace

int Recurrent::activation_code(const std::string& onnx_name) {
  for (size_t i = 0; i < kActivations.size(); ++i) {
    if (kActivations[i] == onnx_name) return static_cast<int>(i);
  }
  return -1;
}

Recurrent::Recurrent(std::string kind, Attrs props) : COp(kind, std::move(props)), kind_(kind) {
  check_known_attrs(this->props(),
                    {"hidden_size", "direction", "activations", "activation_alpha",
                     "activation_beta", "clip", "input_forget", "linear_before_reset", "has_lens"});
  hidden_ = attr_int(this->props(), "hidden_size");
  if (hidden_ < 1) throw AttrError("hidden_size", "must be at least 1");
  direction_ = attr_string(this->props(), "direction", std::string("forward"));
  if (direction_ != "forward" && direction_ != "reverse" && direction_ != "bidirectional")
    throw AttrError("direction", "'" + direction_ + "' is not forward, reverse or bidirectional");
  const size_t per_dir = kind_ == "lstm" ? 3 : kind_ == "gru" ? 2 : 1;
  for (const std::string& a : split_commas(attr_string(this->props(), "activations"))) {
    const int code = activation_code(a);
    if (code < 0) throw AttrError("activations", "unknown activation '" + a + "'");
    acts_.push_back(code);
  }
  if (acts_.size() != per_dir * static_cast<size_t>(directions())) {
    throw AttrError("activations", std::to_string(acts_.size()) + " given, " + kind_ + " " +
                                       direction_ + " takes " +
                                       std::to_string(per_dir * directions()));
  }
  alpha_ = std::get<std::vector<double>>(this->props().at("activation_alpha"));
  beta_ = std::get<std::vector<double>>(this->props().at("activation_beta"));
  if (alpha_.size() != acts_.size() || beta_.size() != acts_.size())
    throw AttrError("activation_alpha", "needs one alpha and one beta per activation");
  clip_ = attr_float(this->props(), "clip", 0.0);
  input_forget_ = attr_int(this->props(), "input_forget", 0) != 0;
  linear_before_reset_ = attr_int(this->props(), "linear_before_reset", 0) != 0;
  has_lens_ = attr_int(this->props(), "has_lens", 0) != 0;
}

std::vector<TensorType> Recurrent::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != input_count()) {
    throw UserError(kind_ + " takes " + std::to_string(input_count()) + " inputs, got " +
                    std::to_string(inputs.size()));
  }
  const TensorType& x = inputs[0];
  if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)
    throw UserError(kind_ + ": X " + x.to_string() + " (float32 and float64 are supported)");
  if (x.rank() != 3)
    throw UserError(kind_ + ": X must be (seq, batch, input), got " + x.to_string());
  const int64_t dirs = directions(), gh = gates() * hidden_;
  const int64_t seq = x.dims[0], batch = x.dims[1], in = x.dims[2];
  auto expect = [&](size_t i, const char* name, std::vector<int64_t> dims, DType dt) {
    const TensorType& t = inputs[i];
    bool fits = t.dtype == dt && t.rank() == static_cast<int>(dims.size());
    for (size_t d = 0; fits && d < dims.size(); ++d) {
      fits = t.dims[d] == kDynamic || dims[d] == kDynamic || t.dims[d] == dims[d];
    }
    if (!fits) {
      throw UserError(kind_ + ": " + name + " is " + t.to_string() + ", expected " +
                      TensorType{dt, dims}.to_string());
    }
  };
  expect(1, "W", {dirs, gh, in}, x.dtype);
  expect(2, "R", {dirs, gh, hidden_}, x.dtype);
  expect(3, "B", {dirs, 2 * gh}, x.dtype);
  expect(4, "initial_h", {dirs, batch, hidden_}, x.dtype);
  if (kind_ == "lstm") {
    expect(5, "initial_c", {dirs, batch, hidden_}, x.dtype);
    expect(6, "P", {dirs, 3 * hidden_}, x.dtype);
  }
  if (has_lens_) expect(input_count() - 1, "sequence_lens", {batch}, DType::kInt32);
  std::vector<TensorType> out{{x.dtype, {seq, dirs, batch, hidden_}},
                              {x.dtype, {dirs, batch, hidden_}}};
  if (kind_ == "lstm") out.push_back({x.dtype, {dirs, batch, hidden_}});
  return out;
}

std::vector<Shape> Recurrent::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& x = inputs[0];
  const int64_t dirs = directions();
  if (inputs[4] != Shape{dirs, x[1], hidden_} || inputs[1][2] != x[2]) {
    throw UserError(kind_ + ": X " + dims_to_string(x) + ", W " + dims_to_string(inputs[1]) +
                    " and initial_h " + dims_to_string(inputs[4]) + " do not fit");
  }
  std::vector<Shape> out{{x[0], dirs, x[1], hidden_}, {dirs, x[1], hidden_}};
  if (kind_ == "lstm") out.push_back({dirs, x[1], hidden_});
  return out;
}

void Recurrent::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  // A direct transcription of ONNX's equations in double precision: the oracle.
  const Tensor &X = inputs[0], &W = inputs[1], &R = inputs[2], &B = inputs[3], &H0 = inputs[4];
  const int64_t seq = X.shape()[0], batch = X.shape()[1], in = X.shape()[2], H = hidden_;
  const int G = gates(), dirs = directions();
  const size_t na = acts_.size() / static_cast<size_t>(dirs);
  const int64_t GH = G * H;
  Tensor &Y = outputs[0], &Yh = outputs[1];
  for (int64_t i = 0; i < Y.numel(); ++i) Y.store(i, 0.0);
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (has_lens_) {
    for (int64_t b = 0; b < batch; ++b) {
      lens[static_cast<size_t>(b)] = inputs.back().load_int(b);
      if (lens[static_cast<size_t>(b)] < 0 || lens[static_cast<size_t>(b)] > seq) {
        throw UserError(kind_ + ": sequence_lens[" + std::to_string(b) + "] is " +
                        std::to_string(lens[static_cast<size_t>(b)]) + ", outside [0, " +
                        std::to_string(seq) + "]");
      }
    }
  }
  auto clip = [&](double v) { return clip_ > 0 ? std::clamp(v, -clip_, clip_) : v; };
  for (int d = 0; d < dirs; ++d) {
    const bool rev = direction_ == "reverse" || d == 1;
    // Clip bounds the gates' inputs; the cell state entering h() is not clipped (as
    // onnxruntime does).
    auto act = [&](size_t k, double v, bool clipped = true) {
      const size_t a = static_cast<size_t>(d) * na + k;
      return activate(acts_[a], alpha_[a], beta_[a], clipped ? clip(v) : v);
    };
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<double> h(static_cast<size_t>(H)), c(static_cast<size_t>(H), 0.0);
      for (int64_t j = 0; j < H; ++j) {
        h[static_cast<size_t>(j)] = H0.load((d * batch + b) * H + j);
        if (kind_ == "lstm") c[static_cast<size_t>(j)] = inputs[5].load((d * batch + b) * H + j);
      }
      const int64_t len = lens[static_cast<size_t>(b)];
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = rev ? len - 1 - s : s;
        // pre[g][j]: x W_g^T + Wb_g (xpart) and h R_g^T + Rb_g (hpart), kept apart for GRU.
        std::vector<double> xpart(static_cast<size_t>(GH)), hpart(static_cast<size_t>(GH));
        for (int64_t r = 0; r < GH; ++r) {
          double xs = B.load(d * 2 * GH + r), hs = B.load(d * 2 * GH + GH + r);
          for (int64_t k = 0; k < in; ++k)
            xs += X.load((t * batch + b) * in + k) * W.load((d * GH + r) * in + k);
          for (int64_t k = 0; k < H; ++k)
            hs += h[static_cast<size_t>(k)] * R.load((d * GH + r) * H + k);
          xpart[static_cast<size_t>(r)] = xs;
          hpart[static_cast<size_t>(r)] = hs;
        }
        std::vector<double> hn(static_cast<size_t>(H));
        auto pre = [&](int g, int64_t j) {
          return xpart[static_cast<size_t>(g * H + j)] + hpart[static_cast<size_t>(g * H + j)];
        };
        if (kind_ == "lstm") {
          for (int64_t j = 0; j < H; ++j) {
            const auto sj = static_cast<size_t>(j);
            auto p = [&](int g) { return inputs[6].load(d * 3 * H + g * H + j); };
            const double ig = act(0, pre(0, j) + p(0) * c[sj]);
            const double fg = input_forget_ ? 1.0 - ig : act(0, pre(2, j) + p(2) * c[sj]);
            const double C = fg * c[sj] + ig * act(1, pre(3, j));
            const double og = act(0, pre(1, j) + p(1) * C);
            c[sj] = C;
            hn[sj] = og * act(2, C, false);
          }
        } else if (kind_ == "gru") {
          std::vector<double> z(static_cast<size_t>(H)), r(static_cast<size_t>(H));
          for (int64_t j = 0; j < H; ++j) {
            z[static_cast<size_t>(j)] = act(0, pre(0, j));
            r[static_cast<size_t>(j)] = act(0, pre(1, j));
          }
          for (int64_t j = 0; j < H; ++j) {
            const auto sj = static_cast<size_t>(j);
            // The candidate's recurrent part: r * (h R_h^T + Rb_h), or (r * h) R_h^T + Rb_h.
            double rpart;
            if (linear_before_reset_) {
              rpart = r[sj] * hpart[static_cast<size_t>(2 * H + j)];
            } else {
              rpart = B.load(d * 2 * GH + GH + 2 * H + j);
              for (int64_t k = 0; k < H; ++k) {
                rpart += r[static_cast<size_t>(k)] * h[static_cast<size_t>(k)] *
                         R.load((d * GH + 2 * H + j) * H + k);
              }
            }
            const double g = act(1, xpart[static_cast<size_t>(2 * H + j)] + rpart);
            hn[sj] = (1.0 - z[sj]) * g + z[sj] * h[sj];
          }
        } else {
          for (int64_t j = 0; j < H; ++j) hn[static_cast<size_t>(j)] = act(0, pre(0, j));
        }
        h = hn;
        for (int64_t j = 0; j < H; ++j)
          Y.store(((t * dirs + d) * batch + b) * H + j, h[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < H; ++j) {
        Yh.store((d * batch + b) * H + j, h[static_cast<size_t>(j)]);
        if (kind_ == "lstm") outputs[2].store((d * batch + b) * H + j, c[static_cast<size_t>(j)]);
      }
    }
  }
}

std::string Recurrent::c_support_code_apply(const Node& node, const std::string&) const {
  const DType dt = node.inputs[0]->type.dtype;
  TemplateValues v;
  v["T"] = std::string(dtype_c_type(dt));
  v["S"] = dt == DType::kFloat32 ? "f32" : "f64";
  v["F"] = dt == DType::kFloat32 ? "f" : "";
  return gemm_support_code(dt) + render_template(kEngine, v, "rnn engine");
}

std::string Recurrent::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const DType dt = node.inputs[0]->type.dtype;
  const std::string T(dtype_c_type(dt)), S = dt == DType::kFloat32 ? "f32" : "f64";
  std::string s = "{\n";
  // Contiguous copies of the inputs (any strides arrive).
  for (size_t i = 0; i < names.inputs.size(); ++i) {
    const auto& type = node.inputs[i]->type;
    const std::string ct(dtype_c_type(type.dtype)), in = names.inputs[i],
                                                    v = "in" + std::to_string(i);
    s += "  int64_t " + v + "_n = 1;\n  for (int d = 0; d < " + std::to_string(type.rank()) +
         "; ++d) " + v + "_n *= " + in + "->shape[d];\n";
    s += c_workspace(ct, v, v + "_n + 1", kind_ + "'s dense input " + std::to_string(i));
    s += "  kiln_copy_strided(" + v + ", " + in + "->data, " + std::to_string(type.rank()) + ", " +
         in + "->shape, " + in + "->strides, sizeof(" + ct + "));\n";
  }
  const std::string x = names.inputs[0];
  auto list = [](const auto& values) {
    std::vector<std::string> parts;
    for (const auto& a : values)
      parts.push_back(c_literal_of(DType::kFloat64, static_cast<double>(a), 0));
    return join(parts, ", ");
  };
  std::vector<std::string> acts;
  for (int a : acts_) acts.push_back(std::to_string(a));
  s += "  static const int acts[] = {" + join(acts, ", ") + "};\n";
  s += "  static const " + T + " alpha[] = {" + list(alpha_) + "}, beta[] = {" + list(beta_) +
       "};\n";
  const std::string seq = x + "->shape[0]", batch = x + "->shape[1]";
  if (has_lens_) {
    const std::string lens = "in" + std::to_string(input_count() - 1);
    s += "  for (int64_t b = 0; b < " + batch + "; ++b) {\n    if (" + lens + "[b] < 0 || " + lens +
         "[b] > " + seq + ") " + sub.fail + "(\"" + kind_ +
         ": sequence_lens[%lld] is %d, outside [0, %lld]\", (long long)b, (int)" + lens +
         "[b], (long long)" + seq + ");\n  }\n";
  }
  const bool lstm = kind_ == "lstm";
  const std::string kind = lstm ? "0" : kind_ == "gru" ? "1" : "2";
  s += "  if (kiln_rnn_" + S + "(" + sub.ctx + ", " + kind + ", " + std::to_string(directions()) +
       ", " + (direction_ == "reverse" ? "1" : "0") + ", " + seq + ", " + batch + ", " + x +
       "->shape[2], " + std::to_string(hidden_) + ", acts, alpha, beta, " +
       c_literal_of(dt, clip_, 0) + ", " + (input_forget_ ? "1" : "0") + ", " +
       (linear_before_reset_ ? "1" : "0") + ", in0, in1, in2, in3, in4, " +
       (lstm ? "in5, in6" : "NULL, NULL") + ", " +
       (has_lens_ ? "in" + std::to_string(input_count() - 1) : std::string("NULL")) + ", (" + T +
       " *)" + names.outputs[0] + "->data, (" + T + " *)" + names.outputs[1] + "->data, " +
       (lstm ? "(" + T + " *)" + names.outputs[2] + "->data" : std::string("NULL")) + "))\n";
  s += "    " + sub.fail + "(\"" + kind_ + ": out of memory\");\n}\n";
  return s;
}

}  // namespace kiln
