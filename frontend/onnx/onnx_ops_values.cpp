// The ONNX importer's values known at load time (Shape, Size, Constant, Range) and the ops the
// loader resolves (If, NonZero).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include "frontend/onnx/nms.h"
#include "frontend/onnx/nonzero.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_tensor.h"
#include "frontend/onnx/unique.h"
#include "ops/broadcast.h"
#include "ops/registry.h"
#include "ops/window.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln::onnx_import {
namespace {

Outs convert_shape(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  TensorType t = im.type_of(n, 0);
  const int64_t r = t.rank();
  int64_t start = attr_int(a, "start", 0), end = attr_int(a, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  Ints dims(t.dims.begin() + start, t.dims.begin() + end);
  for (int64_t d : dims) {
    if (d == kDynamic)
      throw UnsupportedError("Shape of " + t.to_string() +
                             ": a dynamic dimension is not known at load time");
  }
  Tensor v = Tensor::empty(DType::kInt64, {static_cast<int64_t>(dims.size())});
  for (size_t i = 0; i < dims.size(); ++i) v.store_int(static_cast<int64_t>(i), dims[i]);
  return Outs{constant(im.graph(), v)};
}

Outs convert_size(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  TensorType t = im.type_of(n, 0);
  int64_t size = 1;
  for (int64_t d : static_dims(t, "Size")) size *= d;
  Tensor v = Tensor::empty(DType::kInt64, {});
  v.store_int(0, size);
  return Outs{constant(im.graph(), v)};
}

Outs convert_constant(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (const auto* t = tensor_attr(n, "value"); t && t->has_t()) {
    return Outs{constant(im.graph(), tensor_from_onnx(t->t(), {}, "attribute 'value'"))};
  }
  auto make = [&](DType dt, Shape shape, const std::vector<double>& vals) {
    return Outs{constant(im.graph(), Tensor::from_doubles(dt, std::move(shape), vals))};
  };
  if (a.count("value_float")) return make(DType::kFloat32, {}, {attr_float(a, "value_float")});
  if (a.count("value_floats")) {
    auto v = std::get<std::vector<double>>(a.at("value_floats"));
    return make(DType::kFloat32, {static_cast<int64_t>(v.size())}, v);
  }
  if (a.count("value_int")) {
    Tensor t = Tensor::empty(DType::kInt64, {});
    t.store_int(0, attr_int(a, "value_int"));
    return Outs{constant(im.graph(), t)};
  }
  if (a.count("value_ints")) {
    Ints v = attr_ints(a, "value_ints");
    Tensor t = Tensor::empty(DType::kInt64, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.store_int(static_cast<int64_t>(i), v[i]);
    return Outs{constant(im.graph(), t)};
  }
  throw UnsupportedError("Constant without a value, value_float(s) or value_int(s) attribute");
}

Outs convert_constant_of_shape(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Tensor fill = Tensor::zeros(DType::kFloat32, {1});
  if (const auto* t = tensor_attr(n, "value"); t && t->has_t())
    fill = tensor_from_onnx(t->t(), {}, "attribute 'value'");
  if (fill.numel() != 1)
    throw UserError("attribute 'value' must hold one element, got " + fill.describe());
  if (auto shape = symbolic_in(im, n, 0)) {
    if (fill.dtype() == DType::kBool)
      throw UnsupportedError("ConstantOfShape of booleans with a dynamic shape");
    return Outs{
        apply_with_dims(im, "fill", std::nullopt,
                        {{"value", fill.load(0)}, {"dtype", std::string(dtype_name(fill.dtype()))}},
                        {{"dims", shape->elems}})};
  }
  Ints shape = im.const_ints(n, 0, "shape");
  Tensor out = Tensor::empty(fill.dtype(), shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (is_float(fill.dtype())) {
      out.store(i, fill.load(0));
    } else {
      out.store_int(i, fill.load_int(0));
    }
  }
  return Outs{constant(im.graph(), out)};
}

Outs convert_range(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  if (symbolic_in(im, n, 0) || symbolic_in(im, n, 1) || symbolic_in(im, n, 2)) {
    auto start = range_bound(im, n, 0), limit = range_bound(im, n, 1),
         delta = range_bound(im, n, 2);
    if (start && limit && delta) {
      if (delta->value() == 0) throw UserError("Range with delta 0");
      const DType dt = im.type_of(n, 0).dtype;
      if (dt == DType::kBool) throw UserError("Range of booleans");
      return Outs{apply_with_dims(im, "arange", std::nullopt,
                                  {{"dtype", std::string(dtype_name(dt))}},
                                  {{"start", {*start}}, {"limit", {*limit}}, {"delta", {*delta}}})};
    }
  }
  const Tensor& s = im.const_in(n, 0, "start");
  const Tensor& l = im.const_in(n, 1, "limit");
  const Tensor& d = im.const_in(n, 2, "delta");
  const bool fl = is_float(s.dtype());
  const double start = s.load(0), limit = l.load(0), delta = d.load(0);
  if (delta == 0) throw UserError("Range with delta 0");
  const auto count = static_cast<int64_t>(std::max(0.0, std::ceil((limit - start) / delta)));
  Tensor out = Tensor::empty(s.dtype(), {count});
  for (int64_t i = 0; i < count; ++i) {
    if (fl) {
      out.store(i, start + static_cast<double>(i) * delta);
    } else {
      out.store_int(i, s.load_int(0) + i * d.load_int(0));
    }
  }
  return Outs{constant(im.graph(), out)};
}

}  // namespace

void add_value_ops(OpTable& t) {
  // Integer tokens only: kiln has no string tensors.
  t["TfIdfVectorizer"] = {
      {"max_gram_length", "max_skip_count", "min_gram_length", "mode", "ngram_counts",
       "ngram_indexes", "pool_int64s", "pool_strings", "weights"},
      [](const Attrs&, const onnx::NodeProto& n, int) {
        std::vector<std::string> problems;
        for (const auto& at : n.attribute())
          if (at.name() == "pool_strings")
            problems.push_back("attribute pool_strings (string tensors are not supported)");
        return problems;
      },
      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        if (!a.count("pool_int64s")) throw UserError("TfIdfVectorizer has no pool_int64s");
        Attrs p{{"min_gram", attr_int(a, "min_gram_length")},
                {"max_gram", attr_int(a, "max_gram_length")},
                {"max_skip", attr_int(a, "max_skip_count")},
                {"mode", attr_string(a, "mode")},
                {"pool", attr_ints(a, "pool_int64s")},
                {"ngram_counts", attr_ints(a, "ngram_counts")},
                {"ngram_indexes", attr_ints(a, "ngram_indexes")}};
        if (a.count("weights")) p["weights"] = a.at("weights");
        return Outs{apply("tfidf", {im.in(n, 0)}, p)};
      }};
  // Inlined by the loader when the condition is known at load time (onnx_model.cpp).
  t["If"] = {{"then_branch", "else_branch"},
             nullptr,
             [](OnnxImporter&, const onnx::NodeProto&, const Attrs&) -> Outs {
               throw InternalError("If reached its converter");
             }};
  t["NonZero"] = {
      {}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) -> Outs {
        if (const Tensor* x = im.known(n.input(0)))
          return Outs{constant(im.graph(), nonzero_indices(*x))};
        const int rank = std::max(1, im.type_of(n, 0).rank());
        throw RunTimeValueNeeded(
            {n.input(0)}, {n.output(0)}, {TensorType{DType::kInt64, {rank, kDynamic}}}, "NonZero",
            {},
            "NonZero of '" + n.input(0) +
                "', a tensor known only at run time: its output size depends on "
                "the values, so it is computed between compiled stages (kiln run "
                "and ModelFunction do this)");
      }};
  // Unique: folded when its input is known at load time, else computed between stages.
  t["Unique"] = {
      {"axis", "sorted"},
      nullptr,
      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) -> Outs {
        const std::optional<int64_t> axis =
            a.count("axis") ? std::optional<int64_t>(attr_int(a, "axis")) : std::nullopt;
        const int64_t sorted = attr_int(a, "sorted", 1);
        if (sorted != 0 && sorted != 1)
          throw UserError("sorted must be 0 or 1, got " + std::to_string(sorted));
        TensorType x = im.type_of(n, 0);
        x.dtype = im.logical_dtype(n, 0);
        if (axis && (*axis < -x.rank() || *axis >= x.rank()))
          throw UserError("axis " + std::to_string(*axis) + " is outside " + x.to_string());
        if (const Tensor* v = im.known(n.input(0))) {
          const std::optional<DType> st = im.storage(n.input(0));
          Outs outs;
          for (const Tensor& r : unique(st ? convert_tensor(*v, *st) : *v, axis, sorted != 0))
            outs.push_back(constant(im.graph(), r));
          return outs;
        }
        TensorType y{x.dtype, {kDynamic}};
        if (axis) {
          y = x;
          y.dims[static_cast<size_t>(*axis < 0 ? *axis + x.rank() : *axis)] = kDynamic;
        }
        const TensorType index{DType::kInt64, {kDynamic}};
        Attrs stage{{"sorted", sorted}};
        if (axis) stage["axis"] = *axis;
        throw RunTimeValueNeeded({n.input(0)}, {n.output().begin(), n.output().end()},
                                 {y, index, index, index}, "Unique", stage,
                                 "Unique of '" + n.input(0) +
                                     "', a tensor known only at run time: its outputs' sizes "
                                     "depend on the values, so it is computed between compiled "
                                     "stages (kiln run and ModelFunction do this)");
      }};
  // Boxes kept by NonMaxSuppression: computed at load time when its inputs are known, else
  // between stages as NonZero is.
  t["NonMaxSuppression"] = {
      {"center_point_box"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) -> Outs {
        const int64_t centre = attr_int(a, "center_point_box", 0);
        if (centre != 0 && centre != 1)
          throw UserError("center_point_box must be 0 or 1, got " + std::to_string(centre));
        std::vector<std::string> values;
        std::vector<const Tensor*> known;
        bool all_known = true;
        for (int k = 0; k < 5; ++k) {
          values.push_back(OnnxImporter::has_input(n, k) ? n.input(k) : "");
          known.push_back(values.back().empty() ? nullptr : im.known(values.back()));
          all_known = all_known && (values.back().empty() || known.back());
        }
        if (values[0].empty() || values[1].empty())
          throw UserError("NonMaxSuppression needs boxes and scores");
        if (all_known) {
          return Outs{constant(im.graph(), non_max_suppression(*known[0], *known[1],
                                                               nms_params(known, centre)))};
        }
        throw RunTimeValueNeeded(values, {n.output(0)}, {TensorType{DType::kInt64, {kDynamic, 3}}},
                                 "NonMaxSuppression", {{"center_point_box", centre}},
                                 "NonMaxSuppression of boxes and scores known only at run time: "
                                 "its output size depends on the values, so it is computed "
                                 "between compiled stages (kiln run and ModelFunction do this)");
      }};
  // Values known at load time.
  t["Shape"] = {{"start", "end"}, nullptr, convert_shape};
  t["Size"] = {{}, nullptr, convert_size};
  t["Constant"] = {{"value", "value_float", "value_floats", "value_int", "value_ints"},
                   nullptr,
                   convert_constant};
  t["ConstantOfShape"] = {{"value"}, nullptr, convert_constant_of_shape};
  t["Range"] = {{}, nullptr, convert_range};
}

}  // namespace kiln::onnx_import
