#include "frontend/onnx/onnx_sym.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>

#include "frontend/onnx/onnx_importer.h"
#include "frontend/onnx/onnx_tensor.h"
#include "util/error.h"

namespace kiln {
namespace {

using Exprs = std::vector<DimExpr>;

const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  const auto* a = attr(n, name);
  return a ? a->i() : fallback;
}

// Element k of v broadcast to `count` elements (a scalar or one-element vector repeats).
const DimExpr& elem(const SymValue& v, size_t k) {
  return v.elems.size() == 1 ? v.elems[0] : v.elems[k];
}

std::optional<SymValue> binary(const SymValue& a, const SymValue& b, char op) {
  if (a.elems.size() != b.elems.size() && a.elems.size() != 1 && b.elems.size() != 1)
    return std::nullopt;
  SymValue out{a.dtype, a.scalar && b.scalar, {}};
  const size_t count = std::max(a.elems.size(), b.elems.size());
  for (size_t k = 0; k < count; ++k) {
    const DimExpr &x = elem(a, k), &y = elem(b, k);
    if (op == '/' && y.value() == 0) return std::nullopt;  // left to fail at run time
    if (op == '%' && y.value() == 0) return std::nullopt;
    out.elems.push_back(DimExpr::binary(op, x, y));
  }
  return out;
}

// A comparison decided at load time: both constant, or a dimension (never negative)
// against a negative constant. nullopt when it depends on the run-time size.
std::optional<bool> compare_equal(const DimExpr& a, const DimExpr& b) {
  if (a.value() && b.value()) return *a.value() == *b.value();
  if (a.leaf() && b.value() && *b.value() < 0) return false;
  if (b.leaf() && a.value() && *a.value() < 0) return false;
  if (a == b) return true;
  return std::nullopt;
}

std::optional<std::vector<int64_t>> known_ints(OnnxImporter& im, const onnx::NodeProto& n, int i) {
  if (!OnnxImporter::has_input(n, i)) return std::nullopt;
  const Tensor* t = im.known(n.input(i));
  if (!t || is_float(t->dtype()) || t->ndim() > 1) return std::nullopt;
  std::vector<int64_t> out;
  for (int64_t k = 0; k < t->numel(); ++k) out.push_back(t->load_int(k));
  return out;
}

std::optional<SymValue> shape_of(OnnxImporter& im, const onnx::NodeProto& n) {
  if (im.known(n.input(0)) || im.sym(n.input(0))) return std::nullopt;
  Variable* v = im.variable(n.input(0));
  if (!v) return std::nullopt;
  const TensorType& t = v->type;
  const int64_t r = t.rank();
  int64_t start = int_attr(n, "start", 0), end = int_attr(n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  bool dynamic = false;
  SymValue out;
  for (int64_t d = start; d < end; ++d) {
    const int64_t size = t.dims[static_cast<size_t>(d)];
    dynamic = dynamic || size == kDynamic;
    out.elems.push_back(size == kDynamic ? DimExpr::dim(im.sym_source(v), static_cast<int>(d))
                                         : DimExpr::constant(size));
  }
  if (!dynamic) return std::nullopt;  // the converter makes it a known value
  return out;
}

std::optional<SymValue> size_of(OnnxImporter& im, const onnx::NodeProto& n) {
  if (im.known(n.input(0)) || im.sym(n.input(0))) return std::nullopt;
  Variable* v = im.variable(n.input(0));
  if (!v) return std::nullopt;
  DimExpr p = DimExpr::constant(1);
  bool dynamic = false;
  for (int d = 0; d < v->type.rank(); ++d) {
    const int64_t size = v->type.dims[static_cast<size_t>(d)];
    dynamic = dynamic || size == kDynamic;
    p = DimExpr::binary(
        '*', p, size == kDynamic ? DimExpr::dim(im.sym_source(v), d) : DimExpr::constant(size));
  }
  if (!dynamic) return std::nullopt;
  return SymValue{DType::kInt64, true, {p}};
}

// A node's axes: input 1 (newer opsets; it must be known) or the `axes` attribute; empty when
// neither is given; nullopt when input 1 is computed at run time.
std::optional<std::vector<int64_t>> axes_of(OnnxImporter& im, const onnx::NodeProto& n) {
  if (OnnxImporter::has_input(n, 1)) return known_ints(im, n, 1);
  std::vector<int64_t> axes;
  if (const auto* a = attr(n, "axes")) axes.assign(a->ints().begin(), a->ints().end());
  return axes;
}

std::optional<SymValue> gather(const SymValue& data, const onnx::NodeProto& n,
                               const std::vector<int64_t>& idx, bool idx_scalar) {
  if (data.scalar || int_attr(n, "axis", 0) != 0) return std::nullopt;
  const auto size = static_cast<int64_t>(data.elems.size());
  SymValue out{data.dtype, idx_scalar, {}};
  for (int64_t i : idx) {
    if (i < -size || i >= size) return std::nullopt;  // the converter reports it
    out.elems.push_back(data.elems[static_cast<size_t>(i < 0 ? i + size : i)]);
  }
  return out;
}

std::optional<SymValue> slice(OnnxImporter& im, const onnx::NodeProto& n, const SymValue& data) {
  if (data.scalar) return std::nullopt;
  auto starts = known_ints(im, n, 1), ends = known_ints(im, n, 2);
  if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
  if (auto axes = known_ints(im, n, 3);
      OnnxImporter::has_input(n, 3) &&
      (!axes || axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1)))
    return std::nullopt;
  int64_t step = 1;
  if (OnnxImporter::has_input(n, 4)) {
    auto steps = known_ints(im, n, 4);
    if (!steps || steps->size() != 1 || (*steps)[0] == 0) return std::nullopt;
    step = (*steps)[0];
  }
  const auto size = static_cast<int64_t>(data.elems.size());
  int64_t s = (*starts)[0], e = (*ends)[0];
  if (s < 0) s += size;
  if (e < 0) e += size;
  SymValue out{data.dtype, false, {}};
  if (step > 0) {
    s = std::clamp<int64_t>(s, 0, size);
    e = std::clamp<int64_t>(e, 0, size);
    for (int64_t k = s; k < e; k += step) out.elems.push_back(data.elems[static_cast<size_t>(k)]);
  } else {
    s = std::clamp<int64_t>(s, 0, size - 1);
    e = std::clamp<int64_t>(e, -1, size - 1);
    for (int64_t k = s; k > e; k += step) out.elems.push_back(data.elems[static_cast<size_t>(k)]);
  }
  return out;
}

}  // namespace

bool fold_symbolic(OnnxImporter& im, const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  if (n.output_size() < 1 || n.output(0).empty()) return false;
  std::optional<SymValue> out;
  if (op == "Shape" && n.input_size() == 1) {
    out = shape_of(im, n);
  } else if (op == "Size" && n.input_size() == 1) {
    out = size_of(im, n);
  } else {
    // Everything else needs a symbolic input; known values take the ordinary folding.
    bool any_sym = false;
    for (int i = 0; i < n.input_size(); ++i)
      any_sym = any_sym || (!n.input(i).empty() && im.sym(n.input(i)));
    if (!any_sym) return false;
    auto in = [&](int i) { return OnnxImporter::has_input(n, i) ? im.sym_in(n, i) : std::nullopt; };
    static const std::map<std::string, char> kArith{{"Add", '+'}, {"Sub", '-'}, {"Mul", '*'},
                                                    {"Div", '/'}, {"Mod", '%'}, {"Max", 'M'},
                                                    {"Min", 'm'}};
    if (auto a = kArith.find(op); a != kArith.end()) {
      if (op == "Mod" && int_attr(n, "fmod", 0) != 0) return false;
      auto x = in(0);
      for (int i = 1; x && i < n.input_size(); ++i) {
        auto y = in(i);
        x = y ? binary(*x, *y, a->second) : std::nullopt;
      }
      out = x;
    } else if (op == "Identity") {
      out = in(0);
    } else if (op == "Cast") {
      auto x = in(0);
      auto to = dtype_from_onnx(static_cast<int>(int_attr(n, "to", 0)));
      if (x && to && *to != DType::kBool && *to != DType::kFloat16 && *to != DType::kBFloat16) {
        x->dtype = *to;
        out = x;
      }
    } else if (op == "Gather") {
      auto data = in(0);
      const Tensor* idx = im.known(n.input(1));
      if (data && idx && !is_float(idx->dtype()) && idx->ndim() <= 1) {
        std::vector<int64_t> ids;
        for (int64_t k = 0; k < idx->numel(); ++k) ids.push_back(idx->load_int(k));
        out = gather(*data, n, ids, idx->ndim() == 0);
      }
    } else if (op == "Unsqueeze" || op == "Squeeze") {
      auto x = in(0);
      const std::optional<std::vector<int64_t>> given = axes_of(im, n);
      if (!given) return false;
      const std::vector<int64_t>& axes = *given;
      const bool ok_axes = axes.size() == 1 && (axes[0] == 0 || axes[0] == -1);
      if (x && op == "Unsqueeze" && x->scalar && ok_axes) {
        x->scalar = false;
        out = x;
      } else if (x && op == "Squeeze" && !x->scalar && x->elems.size() == 1 &&
                 (axes.empty() || ok_axes)) {
        x->scalar = true;
        out = x;
      }
    } else if (op == "ReduceMin" || op == "ReduceMax" || op == "ReduceSum" || op == "ReduceProd") {
      // Over a shape vector (torchvision's min(k, boxes) takes a ReduceMin of a Concat).
      auto x = in(0);
      const std::optional<std::vector<int64_t>> given = axes_of(im, n);
      if (!given) return false;
      const std::vector<int64_t>& axes = *given;
      const bool all = axes.empty() ? int_attr(n, "noop_with_empty_axes", 0) == 0
                                    : axes.size() == 1 && (axes[0] == 0 || axes[0] == -1);
      if (x && !x->scalar && !x->elems.empty() && all) {
        const char c = op == "ReduceMin"   ? 'm'
                       : op == "ReduceMax" ? 'M'
                       : op == "ReduceSum" ? '+'
                                           : '*';
        DimExpr acc = x->elems[0];
        for (size_t k = 1; k < x->elems.size(); ++k) acc = DimExpr::binary(c, acc, x->elems[k]);
        out = SymValue{x->dtype, int_attr(n, "keepdims", 1) == 0, {acc}};
      }
    } else if (op == "Concat" && int_attr(n, "axis", 0) == 0) {
      SymValue cat;
      bool ok = true;
      for (int i = 0; ok && i < n.input_size(); ++i) {
        auto x = in(i);
        ok = x && !x->scalar;
        if (ok) {
          cat.dtype = x->dtype;
          cat.elems.insert(cat.elems.end(), x->elems.begin(), x->elems.end());
        }
      }
      if (ok) out = cat;
    } else if (op == "Slice" && n.input_size() >= 3) {
      if (auto x = in(0)) out = slice(im, n, *x);
    } else if (op == "Reshape") {
      // A shape vector reshaped to one dimension or to a scalar keeps its elements.
      auto x = in(0);
      auto shape = known_ints(im, n, 1);
      if (x && shape && shape->empty() && x->elems.size() == 1) {
        x->scalar = true;
        out = x;
      } else if (x && shape && shape->size() == 1 &&
                 ((*shape)[0] == -1 || (*shape)[0] == static_cast<int64_t>(x->elems.size()))) {
        x->scalar = false;
        out = x;
      }
    } else if (op == "Equal") {
      auto x = in(0), y = in(1);
      if (x && y &&
          (x->elems.size() == y->elems.size() || x->elems.size() == 1 || y->elems.size() == 1)) {
        const size_t count = std::max(x->elems.size(), y->elems.size());
        Tensor t = Tensor::empty(
            DType::kBool, x->scalar && y->scalar ? Shape{} : Shape{static_cast<int64_t>(count)});
        bool decided = true;
        for (size_t k = 0; decided && k < count; ++k) {
          auto eq = compare_equal(elem(*x, k), elem(*y, k));
          decided = eq.has_value();
          if (decided) t.store_int(static_cast<int64_t>(k), *eq ? 1 : 0);
        }
        if (decided) {
          im.add_known(n.output(0), std::move(t), false);
          return true;
        }
      }
    } else if (op == "Where") {
      const Tensor* cond = im.known(n.input(0));
      auto x = in(1), y = in(2);
      if (cond && cond->ndim() <= 1 && x && y) {
        const size_t count =
            std::max({static_cast<size_t>(cond->numel()), x->elems.size(), y->elems.size()});
        auto fits = [&](size_t s) { return s == count || s == 1; };
        if (fits(static_cast<size_t>(cond->numel())) && fits(x->elems.size()) &&
            fits(y->elems.size())) {
          SymValue w{x->dtype, cond->ndim() == 0 && x->scalar && y->scalar, {}};
          for (size_t k = 0; k < count; ++k) {
            const bool c = cond->load_int(cond->numel() == 1 ? 0 : static_cast<int64_t>(k)) != 0;
            w.elems.push_back(c ? elem(*x, k) : elem(*y, k));
          }
          out = w;
        }
      }
    }
  }
  if (!out) return false;
  im.add_sym(n.output(0), std::move(*out));
  return true;
}

}  // namespace kiln
