#include "frontend/onnx/onnx_qdq.h"

#include <onnx/onnx_pb.h>

#include <cmath>

#include "frontend/onnx/onnx_op_support.h"
#include "util/error.h"

namespace kiln {
namespace {

using onnx_import::Ints;

int64_t attr_of(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.i();
  }
  return fallback;
}

float attr_float_of(const onnx::NodeProto& n, const std::string& name, float fallback) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.f();
  }
  return fallback;
}

// A DequantizeLinear's parts: the bytes, the scale and the zero point (a zero of the bytes'
// dtype when absent), and the axis its per-axis parameters run along (normalized).
struct Dq {
  Var q, scale, zp;
  bool per_axis = false;
  int64_t axis = 1;
};

std::optional<Dq> read_dq(OnnxImporter& im, const onnx::NodeProto& d) {
  Dq out;
  out.q = im.in(d, 0);
  if (!is_byte(out.q.dtype())) return std::nullopt;
  out.scale = im.in(d, 1);
  if (out.scale.dtype() != DType::kFloat32 || out.scale.rank() > 1) return std::nullopt;
  out.zp = OnnxImporter::has_input(d, 2) ? im.in(d, 2)
                                         : constant(im.graph(), Tensor::scalar(out.q.dtype(), 0));
  if (out.zp.dtype() != out.q.dtype() || out.zp.rank() > 1) return std::nullopt;
  const int64_t n = out.scale.type().static_numel();
  if (n == kDynamic || out.zp.type().static_numel() == kDynamic) return std::nullopt;
  out.per_axis = n > 1;
  out.axis = onnx_import::rank_axis(attr_of(d, "axis", 1), std::max(out.q.rank(), 1));
  return out;
}

// The known values of a scale, all finite and positive: the pattern's parameters are
// checked (and named) by the unfused import otherwise.
bool good_scale(OnnxImporter& im, const onnx::NodeProto& d, int i) {
  const Tensor* v = im.known(d.input(i));
  if (!v) return true;
  for (int64_t e = 0; e < v->numel(); ++e) {
    const double x = v->load(e);
    if (!std::isfinite(x) || x <= 0) return false;
  }
  return true;
}

Var as_scalar(Var v) { return v.rank() == 0 ? v : reshape(v, {}); }

// One known value of input i of d (`fallback` when the input is absent); none when unknown
// or not a single value.
std::optional<double> known_scalar(OnnxImporter& im, const onnx::NodeProto& d, int i,
                                   double fallback) {
  if (!OnnxImporter::has_input(d, i)) return fallback;
  const Tensor* v = im.known(d.input(i));
  if (!v || v->numel() != 1) return std::nullopt;
  return v->load(0);
}

}  // namespace

Var requantized_sum(Var a, double sa, int64_t za, Var b, double sb, int64_t zb, double sy,
                    int64_t zy, DType to, bool relu) {
  const double lo = to == DType::kUInt8 ? 0 : -128, hi = to == DType::kUInt8 ? 255 : 127;
  const double ra = sa / sy, rb = sb / sy,
               k = -(static_cast<double>(za) * ra + static_cast<double>(zb) * rb);
  Var t = cast(a, DType::kFloat32) * ra + (cast(b, DType::kFloat32) * rb + k);
  // A Relu before the quantization is a floor at the zero point after it (rounding and the
  // offset are monotone).
  return cast(clip(round(t) + static_cast<double>(zy), relu ? std::max(lo, double(zy)) : lo, hi),
              to);
}

QdqFusion::QdqFusion(const onnx::GraphProto& g) {
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) producer_[o] = &n;
    for (const auto& i : n.input()) {
      if (!i.empty()) readers_[i].push_back(&n);
    }
    // A value read inside a subgraph (an If branch) counts as read by its node.
    for (const auto& a : n.attribute()) {
      if (a.has_g()) {
        for (const auto& sn : a.g().node())
          for (const auto& i : sn.input()) readers_[i].push_back(&n);
      }
    }
  }
  for (const auto& o : g.output()) graph_outputs_.insert(o.name());
}

const onnx::NodeProto* QdqFusion::producer(const std::string& value, const char* op) const {
  auto it = producer_.find(value);
  if (it == producer_.end() || it->second->op_type() != op) return nullptr;
  const std::string& dom = it->second->domain();
  return dom.empty() || dom == "ai.onnx" ? it->second : nullptr;
}

const onnx::NodeProto* QdqFusion::sole_reader(const std::string& value) const {
  if (graph_outputs_.count(value)) return nullptr;
  auto it = readers_.find(value);
  if (it == readers_.end() || it->second.size() != 1) return nullptr;
  return it->second[0];
}

bool QdqFusion::fuse_max_pool(OnnxImporter& im, const onnx::NodeProto& n) {
  if (n.input_size() != 1 || n.output_size() != 1) return false;  // no Indices output
  const onnx::NodeProto* dx = producer(n.input(0), "DequantizeLinear");
  const onnx::NodeProto* qn = sole_reader(n.output(0));
  if (!dx || !qn || qn->op_type() != "QuantizeLinear" || qn->output_size() != 1 ||
      !OnnxImporter::has_input(*qn, 2)) {
    return false;
  }
  std::optional<Dq> x = read_dq(im, *dx);
  if (!x || x->per_axis || x->q.rank() < 3 || x->q.rank() > 4) return false;
  // Max commutes with a dequantization (its scale is positive), and quantizing a dequantized
  // byte by the same scale and zero point gives the byte back: the bytes pool as they are.
  const Tensor* sx = im.known(dx->input(1));
  const Tensor* sy = im.known(qn->input(1));
  const Tensor* zx = OnnxImporter::has_input(*dx, 2) ? im.known(dx->input(2)) : nullptr;
  const Tensor* zy = im.known(qn->input(2));
  if (!sx || !sy || !zy || sx->numel() != 1 || sy->numel() != 1 || zy->numel() != 1 ||
      sx->dtype() != sy->dtype() || zy->dtype() != x->q.dtype() || sx->load(0) != sy->load(0) ||
      !std::isfinite(sx->load(0)) || sx->load(0) <= 0 ||
      (zx ? zx->load_int(0) : 0) != zy->load_int(0) || (OnnxImporter::has_input(*dx, 2) && !zx)) {
    return false;
  }
  Attrs props;
  for (const auto& a : n.attribute()) {
    if (a.name() == "storage_order") continue;
    if (a.name() == "kernel_shape" || a.name() == "strides" || a.name() == "dilations" ||
        a.name() == "pads") {
      props[a.name()] = Ints(a.ints().begin(), a.ints().end());
    } else if (a.name() == "auto_pad") {
      props[a.name()] = a.s();
    } else if (a.name() == "ceil_mode") {
      props[a.name()] = a.i();
    } else {
      return false;
    }
  }
  Var y = apply("max_pool", {x->q}, props);
  if (!im.graph().find_variable(qn->output(0))) im.graph().rename(y.var(), qn->output(0));
  im.bind(qn->output(0), y);
  absorbed_.insert(qn);
  return true;
}

bool QdqFusion::fuse_add(OnnxImporter& im, const onnx::NodeProto& n) {
  if (n.input_size() != 2 || n.output_size() != 1) return false;
  const onnx::NodeProto* da = producer(n.input(0), "DequantizeLinear");
  const onnx::NodeProto* db = producer(n.input(1), "DequantizeLinear");
  const onnx::NodeProto* reader = sole_reader(n.output(0));
  const onnx::NodeProto* relu = nullptr;
  if (reader && reader->op_type() == "Relu") {
    relu = reader;
    reader = sole_reader(relu->output(0));
  }
  if (!da || !db || !reader || reader->op_type() != "QuantizeLinear" ||
      reader->output_size() != 1 || !OnnxImporter::has_input(*reader, 2)) {
    return false;
  }
  const onnx::NodeProto& qn = *reader;
  std::optional<Dq> a = read_dq(im, *da), b = read_dq(im, *db);
  if (!a || !b || a->per_axis || b->per_axis) return false;
  const auto sa = known_scalar(im, *da, 1, 0), za = known_scalar(im, *da, 2, 0);
  const auto sb = known_scalar(im, *db, 1, 0), zb = known_scalar(im, *db, 2, 0);
  const auto sy = known_scalar(im, qn, 1, 0), zy = known_scalar(im, qn, 2, 0);
  const DType to = im.in(qn, 2).dtype();
  if (!sa || !za || !sb || !zb || !sy || !zy || !is_byte(to) ||
      im.in(qn, 1).dtype() != DType::kFloat32) {
    return false;
  }
  for (double s : {*sa, *sb, *sy}) {
    if (!std::isfinite(s) || s <= 0) return false;  // the unfused import names it
  }
  Var y = requantized_sum(a->q, *sa, static_cast<int64_t>(*za), b->q, *sb,
                          static_cast<int64_t>(*zb), *sy, static_cast<int64_t>(*zy), to, relu);
  if (!im.graph().find_variable(qn.output(0))) im.graph().rename(y.var(), qn.output(0));
  im.bind(qn.output(0), y);
  absorbed_.insert(&qn);
  if (relu) absorbed_.insert(relu);
  return true;
}

bool QdqFusion::fuse(OnnxImporter& im, const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (op == "MaxPool") return fuse_max_pool(im, n);
  if (op == "Add") return fuse_add(im, n);
  const bool conv = op == "Conv", gemm = op == "Gemm", mm = op == "MatMul";
  if ((!conv && !gemm && !mm) || n.input_size() < 2 || n.output_size() != 1) return false;
  const onnx::NodeProto* dx = producer(n.input(0), "DequantizeLinear");
  const onnx::NodeProto* dw = producer(n.input(1), "DequantizeLinear");
  if (!dx || !dw) return false;
  // The reader: QuantizeLinear, or a Relu read only by one.
  const onnx::NodeProto* reader = sole_reader(n.output(0));
  const onnx::NodeProto* relu = nullptr;
  if (reader && reader->op_type() == "Relu") {
    relu = reader;
    reader = sole_reader(relu->output(0));
  }
  if (!reader || reader->op_type() != "QuantizeLinear" || reader->output_size() != 1 ||
      !OnnxImporter::has_input(*reader, 2)) {
    return false;
  }
  const onnx::NodeProto& qn = *reader;
  if (!good_scale(im, *dx, 1) || !good_scale(im, *dw, 1) || !good_scale(im, qn, 1)) return false;
  std::optional<Dq> x = read_dq(im, *dx), w = read_dq(im, *dw);
  if (!x || !w || x->per_axis || x->zp.type().static_numel() != 1) return false;
  Var sy = im.in(qn, 1), zy = im.in(qn, 2);
  if (sy.dtype() != DType::kFloat32 || sy.type().static_numel() != 1 || !is_byte(zy.dtype()) ||
      zy.type().static_numel() != 1) {
    return false;
  }
  Var wq = w->q, wzp = w->zp, wscale = w->scale;
  Attrs props;
  if (conv) {
    if (w->per_axis && w->axis != 0) return false;  // per output channel only
    if (x->q.rank() != 3 && x->q.rank() != 4) return false;
    for (const auto& a : n.attribute()) {
      if (a.name() == "group" || a.name() == "strides" || a.name() == "dilations" ||
          a.name() == "pads" || a.name() == "kernel_shape" || a.name() == "auto_pad") {
        props[a.name()] = a.type() == onnx::AttributeProto::INTS
                              ? AttrValue(Ints(a.ints().begin(), a.ints().end()))
                          : a.type() == onnx::AttributeProto::STRING ? AttrValue(a.s())
                                                                     : AttrValue(a.i());
      }
    }
  } else {
    if (wq.rank() != 2) return false;  // a weight matrix
    bool trans_b = false;
    if (gemm) {
      if (attr_of(n, "transA", 0) != 0 || attr_float_of(n, "alpha", 1.f) != 1.f ||
          attr_float_of(n, "beta", 1.f) != 1.f) {
        return false;
      }
      trans_b = attr_of(n, "transB", 0) != 0;
    }
    // Per-column parameters run along B's columns: axis 1 of (K, N), axis 0 of (N, K).
    if (w->per_axis && w->axis != (trans_b ? 0 : 1)) return false;
    if (trans_b) wq = transpose(wq, {1, 0});
  }
  // The bias: int32 dequantized by the product's scale (sx * sw) and zero point 0.
  std::optional<Var> bias;
  const int bias_at = 2;
  if ((conv || gemm) && OnnxImporter::has_input(n, bias_at)) {
    const onnx::NodeProto* db = producer(n.input(bias_at), "DequantizeLinear");
    if (!db) return false;
    Var bq = im.in(*db, 0);
    if (bq.dtype() != DType::kInt32 || bq.rank() != 1) return false;
    if (OnnxImporter::has_input(*db, 2)) {
      const Tensor* z = im.known(db->input(2));
      if (!z) return false;
      for (int64_t e = 0; e < z->numel(); ++e)
        if (z->load_int(e) != 0) return false;
    }
    const Tensor* sb = im.known(db->input(1));
    const Tensor* sx = im.known(dx->input(1));
    const Tensor* sw = im.known(dw->input(1));
    if (!sb || !sx || !sw) return false;
    for (int64_t e = 0; e < sb->numel(); ++e) {
      const double want = sx->load(0) * sw->load(sw->numel() > 1 ? e : 0);
      if (std::fabs(sb->load(e) - want) > 1e-6 * std::fabs(want)) return false;
    }
    bias = bq;
  }
  Var mult = as_scalar(x->scale) * wscale / as_scalar(sy);
  if (mult.rank() == 0) mult = reshape(mult, {1});
  std::vector<Var> ins{x->q, wq, x->zp, wzp, mult, zy};
  props["requant"] = int64_t{1};
  if (relu) props["relu"] = int64_t{1};
  if (bias) {
    ins.push_back(*bias);
    props["bias"] = int64_t{1};
  }
  Var y = apply(conv ? "qconv" : "qmatmul", ins, props);
  if (!im.graph().find_variable(qn.output(0))) im.graph().rename(y.var(), qn.output(0));
  im.bind(qn.output(0), y);
  absorbed_.insert(&qn);
  if (relu) absorbed_.insert(relu);
  return true;
}

}  // namespace kiln
