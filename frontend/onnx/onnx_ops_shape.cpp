// The ONNX importer's shapes and data movement: reshapes, slices, gathers, scatters, pads, resizes.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include "frontend/onnx/nonzero.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_tensor.h"
#include "ops/broadcast.h"
#include "ops/registry.h"
#include "ops/window.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln::onnx_import {
namespace {

Outs convert_slice(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (im.opset() >= 10 && (symbolic_in(im, n, 1) || symbolic_in(im, n, 2))) {
    if (auto y = slice_symbolic(im, n, x)) return Outs{*y};
  }
  Attrs p;
  if (im.opset() < 10) {
    p["starts"] = attr_ints(a, "starts");
    p["ends"] = attr_ints(a, "ends");
    if (a.count("axes")) p["axes"] = attr_ints(a, "axes");
  } else {
    p["starts"] = im.const_ints(n, 1, "starts");
    p["ends"] = im.const_ints(n, 2, "ends");
    if (OnnxImporter::has_input(n, 3)) p["axes"] = im.const_ints(n, 3, "axes");
    if (OnnxImporter::has_input(n, 4)) p["steps"] = im.const_ints(n, 4, "steps");
  }
  return Outs{apply("slice", {x}, p)};
}

Outs convert_split(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const int64_t axis = rank_axis(attr_int(a, "axis", 0), x.rank());
  const int64_t dim = x.type().dims[static_cast<size_t>(axis)];
  Ints split =
      OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "split") : attr_ints(a, "split", Ints{});
  const int64_t parts = n.output_size();
  if (split.empty()) {
    if (dim == kDynamic)
      throw UnsupportedError("Split into equal parts needs a static dimension, got " +
                             x.type().to_string());
    const int64_t each = (dim + parts - 1) / parts;  // the last part may be smaller
    for (int64_t i = 0; i < parts; ++i) split.push_back(std::min(each, dim - i * each));
  }
  if (static_cast<int64_t>(split.size()) != parts) {
    throw UserError("split has " + std::to_string(split.size()) + " sizes for " +
                    std::to_string(parts) + " outputs");
  }
  Outs outs;
  int64_t start = 0;
  for (int64_t s : split) {
    int64_t end = 0;
    // A crafted size must not overflow the running sum (libFuzzer found this).
    if (s < 0 || __builtin_add_overflow(start, s, &end))
      throw UserError("split size " + std::to_string(s) + " is negative or too large");
    outs.push_back(
        apply("slice", {x}, {{"starts", Ints{start}}, {"ends", Ints{end}}, {"axes", Ints{axis}}}));
    start = end;
  }
  if (dim != kDynamic && start != dim) {
    throw UserError("split sizes add up to " + std::to_string(start) + ", the axis has " +
                    std::to_string(dim));
  }
  return outs;
}

Outs convert_squeeze(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints axes =
      OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "axes") : attr_ints(a, "axes", Ints{});
  const auto& dims = x.type().dims;
  std::vector<bool> drop(dims.size(), false);
  for (int64_t ax : axes) {
    auto d = static_cast<size_t>(rank_axis(ax, x.rank()));
    if (dims[d] != 1 && dims[d] != kDynamic) {
      throw UserError("cannot squeeze axis " + std::to_string(ax) + " of " + x.type().to_string() +
                      " (size is not 1)");
    }
    drop[d] = true;
  }
  if (axes.empty()) {
    static_dims(x.type(), "Squeeze without axes");
    for (size_t d = 0; d < dims.size(); ++d) drop[d] = dims[d] == 1;
  }
  Ints out;
  std::vector<int> src;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (drop[d]) continue;
    out.push_back(dims[d]);
    src.push_back(static_cast<int>(d));
  }
  return Outs{reshape_to(x, out, src)};
}

Outs convert_unsqueeze(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints axes = OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "axes") : attr_ints(a, "axes");
  const int out_rank = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> added(static_cast<size_t>(out_rank), false);
  for (int64_t ax : axes) {
    auto d = static_cast<size_t>(rank_axis(ax, out_rank));
    if (added[d]) throw UserError("axis " + std::to_string(ax) + " given twice");
    added[d] = true;
  }
  Ints out;
  std::vector<int> src;
  int k = 0;
  for (int d = 0; d < out_rank; ++d) {
    if (added[static_cast<size_t>(d)]) {
      out.push_back(1);
      src.push_back(-1);
    } else {
      out.push_back(x.type().dims[static_cast<size_t>(k)]);
      src.push_back(k++);
    }
  }
  return Outs{reshape_to(x, out, src)};
}

Outs convert_reshape(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  if (auto target = im.opset() >= 5 ? symbolic_in(im, n, 1) : std::nullopt)
    return Outs{reshape_symbolic(im, x, *target, attr_int(a, "allowzero", 0) != 0)};
  Ints shape = im.opset() < 5 ? attr_ints(a, "shape") : im.const_ints(n, 1, "shape");
  if (attr_int(a, "allowzero", 0) != 0 && std::count(shape.begin(), shape.end(), 0) > 0) {
    // A 0 is a dimension of size 0, not a copy: the shape as dimension expressions says so.
    SymValue target{DType::kInt64, false, {}};
    for (int64_t d : shape) target.elems.push_back(DimExpr::constant(d));
    return Outs{reshape_symbolic(im, x, target, true)};
  }
  return Outs{reshape(x, shape)};
}

Outs convert_flatten(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  int64_t axis = attr_int(a, "axis", 1);
  if (axis < 0) axis += x.rank();
  return Outs{flatten(x, axis)};
}

Outs convert_pad(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Ints pads;
  double value = 0;
  if (im.opset() < 11) {
    pads = attr_ints(a, "pads");
    value = attr_float(a, "value", 0.0);
  } else {
    pads = im.const_ints(n, 1, "pads");
    if (OnnxImporter::has_input(n, 2)) {
      const Tensor& v = im.const_in(n, 2, "constant_value");
      if (v.numel() != 1)
        throw UserError("constant_value must hold one value, got " + v.describe());
      value = v.load(0);
    }
    if (OnnxImporter::has_input(n, 3)) {
      // pads for the listed axes only: spread over every axis, zero elsewhere.
      const Ints axes = im.const_ints(n, 3, "axes");
      const int64_t r = x.rank();
      if (pads.size() != 2 * axes.size()) {
        throw UserError("pads has " + std::to_string(pads.size()) + " entries for " +
                        std::to_string(axes.size()) + " axes (needs twice as many)");
      }
      Ints full(static_cast<size_t>(2 * r), 0);
      std::vector<bool> seen(static_cast<size_t>(r), false);
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t ax = axes[i] < 0 ? axes[i] + r : axes[i];
        if (ax < 0 || ax >= r || seen[static_cast<size_t>(ax)]) {
          throw UserError("axes entry " + std::to_string(axes[i]) +
                          " is out of range or repeated for rank " + std::to_string(r));
        }
        seen[static_cast<size_t>(ax)] = true;
        full[static_cast<size_t>(ax)] = pads[i];
        full[static_cast<size_t>(ax + r)] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  const std::string mode = attr_string(a, "mode", std::string("constant"));
  Attrs p{{"pads", pads}, {"value", value}};
  if (mode != "constant") p["mode"] = mode;
  return Outs{apply("pad", {x}, p)};
}

// ReverseSequence: along the time axis, each batch entry's first sequence_lens[b] steps in
// reverse order and the rest as they are: a gather_elements by index
// where(t < len, len - 1 - t, t), broadcast over the other axes (a length past the time axis
// fails the gather, naming the index).
Outs convert_reverse_sequence(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Var lens = im.in(n, 1);
  const Ints d = static_dims(x.type(), "ReverseSequence");
  const int64_t r = static_cast<int64_t>(d.size());
  if (r < 2)
    throw UserError("ReverseSequence needs a rank of at least 2, got " + x.type().to_string());
  const int64_t time = rank_axis(attr_int(a, "time_axis", 0), static_cast<int>(r));
  const int64_t batch = rank_axis(attr_int(a, "batch_axis", 1), static_cast<int>(r));
  if (time == batch)
    throw UserError("ReverseSequence's time_axis and batch_axis are the same axis");
  if (lens.rank() != 1 ||
      (lens.type().dims[0] != kDynamic && lens.type().dims[0] != d[static_cast<size_t>(batch)]))
    throw UserError("sequence_lens " + lens.type().to_string() +
                    " must hold one length per batch entry (" +
                    std::to_string(d[static_cast<size_t>(batch)]) + ")");
  Ints tshape(static_cast<size_t>(r), 1), bshape(static_cast<size_t>(r), 1);
  tshape[static_cast<size_t>(time)] = d[static_cast<size_t>(time)];
  bshape[static_cast<size_t>(batch)] = d[static_cast<size_t>(batch)];
  std::vector<double> steps(static_cast<size_t>(d[static_cast<size_t>(time)]));
  for (size_t i = 0; i < steps.size(); ++i) steps[i] = static_cast<double>(i);
  Var t = constant(im.graph(), Tensor::from_doubles(DType::kInt64, tshape, steps));
  Var len = reshape(cast(lens, DType::kInt64), bshape);
  Var src = where(lt(t, len), len - 1.0 - t, t);
  src = apply("expand", {src}, {{"shape", d}});
  return Outs{apply("gather_elements", {x, src}, {{"axis", time}})};
}

// Compress: the slices along the axis (of the flattened input without one) whose condition is
// true. A condition known when the model loads makes it a gather by constant indices (entries
// past the axis may only be false); one known only at run time is computed between stages.
Outs convert_compress(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  if (!OnnxImporter::has_input(n, 1) || !im.known(n.input(1))) {
    if (im.type_of(n, 1).rank() != 1)
      throw UserError("Compress's condition must be 1-D, got " + im.type_of(n, 1).to_string());
    TensorType y = im.type_of(n, 0);
    y.dtype = im.logical_dtype(n, 0);
    Attrs stage;
    if (a.count("axis")) {
      const int64_t axis = rank_axis(attr_int(a, "axis"), y.rank());
      y.dims[static_cast<size_t>(axis)] = kDynamic;
      stage["axis"] = axis;
    } else {
      y.dims = {kDynamic};
    }
    throw RunTimeValueNeeded({n.input(0), n.input(1)}, {n.output(0)}, {y}, "Compress", stage,
                             "Compress by '" + n.input(1) +
                                 "', a condition known only at run time: its output's size "
                                 "depends on the values, so it is computed between compiled "
                                 "stages (kiln run and ModelFunction do this)");
  }
  Var x = im.in(n, 0);
  const Tensor& cond = im.const_in(n, 1, "condition");
  if (cond.ndim() != 1) throw UserError("Compress's condition must be 1-D, got " + cond.describe());
  Var data = x;
  int64_t axis = 0;
  if (a.count("axis")) {
    axis = rank_axis(attr_int(a, "axis"), x.rank());
  } else {
    data = reshape(x, {-1});
  }
  const int64_t len = data.type().dims[static_cast<size_t>(axis)];
  if (len == kDynamic) throw UnsupportedError("Compress along a dynamic dimension");
  std::vector<double> kept;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (cond.load(i) == 0) continue;
    if (i >= len) {
      throw UserError("Compress's condition is true at " + std::to_string(i) +
                      ", past the axis's " + std::to_string(len) + " entries");
    }
    kept.push_back(static_cast<double>(i));
  }
  const auto count = static_cast<int64_t>(kept.size());
  Var idx = constant(im.graph(), Tensor::from_doubles(DType::kInt64, {count}, kept));
  return Outs{apply("gather", {data, idx}, {{"axis", axis}})};
}

// DepthToSpace / SpaceToDepth: reshape, transpose, reshape (static dimensions).
Outs convert_depth_space(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a,
                         bool to_space) {
  Var x = im.in(n, 0);
  const Ints d = static_dims(x.type(), n.op_type());
  if (d.size() != 4)
    throw UserError(n.op_type() + " needs (N, C, H, W), got " + x.type().to_string());
  const int64_t b = attr_int(a, "blocksize");
  if (b < 1) throw UserError("blocksize must be at least 1");
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  if (to_space) {
    if (C % (b * b) != 0)
      throw UserError("channels " + std::to_string(C) + " do not divide by blocksize^2");
    const bool crd = attr_string(a, "mode", std::string("DCR")) == "CRD";
    Var t = crd ? transpose(reshape(x, {N, C / (b * b), b, b, H, W}), {0, 1, 4, 2, 5, 3})
                : transpose(reshape(x, {N, b, b, C / (b * b), H, W}), {0, 3, 4, 1, 5, 2});
    return Outs{reshape(t, {N, C / (b * b), H * b, W * b})};
  }
  if (H % b != 0 || W % b != 0) throw UserError("height and width must divide by blocksize");
  Var t = transpose(reshape(x, {N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
  return Outs{reshape(t, {N, C * b * b, H / b, W / b})};
}

// Tile: each axis i repeated r_i times, as an expand over a new axis before it.
Outs convert_tile(OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
  Var x = im.in(n, 0);
  const Ints reps = im.const_ints(n, 1, "repeats");
  const Ints d = static_dims(x.type(), "Tile");
  if (reps.size() != d.size())
    throw UserError("repeats has " + std::to_string(reps.size()) + " values for rank " +
                    std::to_string(d.size()));
  Ints split, wide, out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (reps[i] < 0) throw UserError("repeats must not be negative");
    split.push_back(1);
    split.push_back(d[i]);
    wide.push_back(reps[i]);
    wide.push_back(d[i]);
    out.push_back(reps[i] * d[i]);
  }
  if (std::count(out.begin(), out.end(), 0) > 0) {
    return Outs{constant(im.graph(), Tensor::zeros(x.dtype(), out))};
  }
  return Outs{reshape(apply("expand", {reshape(x, split)}, {{"shape", wide}}), out)};
}

}  // namespace

void add_shape_ops(OpTable& t) {
  // Shapes and data movement.
  t["Flatten"] = {{"axis"}, nullptr, convert_flatten};
  t["Reshape"] = {{"allowzero", "shape"}, nullptr, convert_reshape};
  t["Transpose"] = {
      {"perm"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{transpose(im.in(n, 0), attr_ints(a, "perm", Ints{}))};
      }};
  t["Squeeze"] = {{"axes"}, nullptr, convert_squeeze};
  t["Unsqueeze"] = {{"axes"}, nullptr, convert_unsqueeze};
  t["Concat"] = {{"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                   std::vector<Var> ins;
                   for (int i = 0; i < n.input_size(); ++i) ins.push_back(im.in(n, i));
                   return Outs{concat(ins, attr_int(a, "axis"))};
                 }};
  t["Split"] = {{"axis", "split"}, nullptr, convert_split};
  t["Slice"] = {{"starts", "ends", "axes"}, nullptr, convert_slice};
  t["Gather"] = {{"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                   return Outs{apply("gather", {im.in(n, 0), im.in(n, 1)},
                                     {{"axis", attr_int(a, "axis", 0)}})};
                 }};
  t["GatherND"] = {
      {"batch_dims"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{apply("gather_nd", {im.in(n, 0), im.in(n, 1)},
                          {{"batch_dims", attr_int(a, "batch_dims", 0)}})};
      }};
  t["ScatterND"] = {
      {"reduction"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{apply("scatter_nd", {im.in(n, 0), im.in(n, 1), im.in(n, 2)},
                          {{"reduction", attr_string(a, "reduction", std::string("none"))}})};
      }};
  for (const char* op : {"ScatterElements", "Scatter"}) {
    t[op] = {
        {"axis", "reduction"},
        nullptr,
        [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
          return Outs{apply("scatter_elements", {im.in(n, 0), im.in(n, 1), im.in(n, 2)},
                            {{"axis", attr_int(a, "axis", 0)},
                             {"reduction", attr_string(a, "reduction", std::string("none"))}})};
        }};
  }
  t["Resize"] = {{"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                  "exclude_outside", "extrapolation_value"},
                 nullptr,
                 [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                   Attrs p = a;
                   // Opset 10: (X, scales); 11 and later: (X, roi, scales, sizes).
                   const int scales_at = im.opset() < 11 ? 1 : 2;
                   auto doubles = [&](int i, const char* what) {
                     std::vector<double> v;
                     if (!OnnxImporter::has_input(n, i)) return v;
                     const Tensor& t = im.const_in(n, i, what);
                     for (int64_t k = 0; k < t.numel(); ++k) v.push_back(t.load(k));
                     return v;
                   };
                   const auto scales = doubles(scales_at, "scales");
                   if (!scales.empty()) p["scales"] = scales;
                   if (im.opset() >= 11 && OnnxImporter::has_input(n, 3)) {
                     const Ints sizes = im.const_ints(n, 3, "sizes");
                     if (!sizes.empty()) p["sizes"] = sizes;
                   }
                   if (im.opset() >= 11 && attr_string(a, "coordinate_transformation_mode",
                                                       std::string()) == "tf_crop_and_resize")
                     p["roi"] = doubles(1, "roi");
                   return Outs{apply("resize", {im.in(n, 0)}, p)};
                 }};
  t["Upsample"] = {
      {"mode", "scales"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        std::vector<double> scales;
        if (a.count("scales")) {
          scales = std::get<std::vector<double>>(a.at("scales"));
        } else {
          const Tensor& t = im.const_in(n, 1, "scales");
          for (int64_t k = 0; k < t.numel(); ++k) scales.push_back(t.load(k));
        }
        // Upsample is Resize with ONNX's asymmetric coordinates.
        return Outs{apply("resize", {im.in(n, 0)},
                          {{"mode", attr_string(a, "mode", std::string("nearest"))},
                           {"coordinate_transformation_mode", std::string("asymmetric")},
                           {"nearest_mode", std::string("floor")},
                           {"scales", scales}})};
      }};
  t["DepthToSpace"] = {{"blocksize", "mode"},
                       nullptr,
                       [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                         return convert_depth_space(im, n, a, true);
                       }};
  t["SpaceToDepth"] = {
      {"blocksize"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return convert_depth_space(im, n, a, false);
      }};
  t["Tile"] = {{}, nullptr, convert_tile};
  t["GatherElements"] = {
      {"axis"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        return Outs{apply("gather_elements", {im.in(n, 0), im.in(n, 1)},
                          {{"axis", attr_int(a, "axis", 0)}})};
      }};
  t["Expand"] = {
      {}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs&) {
        if (auto target = symbolic_in(im, n, 1))
          return Outs{expand_symbolic(im, im.in(n, 0), *target)};
        return Outs{apply("expand", {im.in(n, 0)}, {{"shape", im.const_ints(n, 1, "shape")}})};
      }};
  t["Compress"] = {{"axis"}, nullptr, convert_compress};
  t["ReverseSequence"] = {{"batch_axis", "time_axis"}, nullptr, convert_reverse_sequence};
  t["Pad"] = {{"mode", "pads", "value"},
              [](const Attrs& a, const onnx::NodeProto&, int) {
                std::vector<std::string> p;
                const std::string mode = attr_string(a, "mode", std::string("constant"));
                if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
                  p.push_back(attr_problem("mode", mode, "(constant, reflect, edge or wrap)"));
                return p;
              },
              convert_pad};
}

}  // namespace kiln::onnx_import
