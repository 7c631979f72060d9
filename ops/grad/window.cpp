// Gradients of the sliding-window ops, built from convolutions, strided slices and pads:
//   conv, input:  the output gradient dilated by the stride, convolved with the flipped
//                 weights (channels regrouped), cropped or padded back to the input;
//   conv, weight: conv_weight_grad (ops/grad/window_ops.h), one kernel;
//   conv_transpose: its adjoint, conv, with the same window and weights for the input;
//                 conv_weight_grad with the roles of input and output swapped for W;
//   max pool:     max_pool_grad (ops/grad/window_ops.h), one kernel;
//   average pool: each kernel tap's share (1/divisor) placed back at its strided positions
//                 and summed, or reshapes when the windows tile the input.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conv.h"
#include "ops/conv_transpose.h"
#include "ops/grad/support.h"
#include "ops/pool.h"

namespace kiln {
namespace {

// The static spatial dims a window gradient needs, or a clear error.
void require_static(const GradArgs& args, int input, const Var& v, const std::string& what) {
  for (size_t d = 1; d < v.type().dims.size(); ++d) {
    if (v.type().dims[d] == kDynamic) {
      not_differentiable(
          args, input,
          what + " needs static channel and spatial dimensions, got " + v.type().to_string());
    }
  }
}

Var pad_all(Var x, const std::vector<int64_t>& begin, const std::vector<int64_t>& end,
            double value = 0.0) {
  const size_t k = begin.size(), r = static_cast<size_t>(x.rank());
  std::vector<int64_t> pads(2 * r, 0);
  bool any = false;
  for (size_t i = 0; i < k; ++i) {
    pads[r - k + i] = begin[i];
    pads[2 * r - k + i] = end[i];
    any = any || begin[i] || end[i];
  }
  return any ? apply("pad", {x}, {{"pads", pads}, {"value", value}}) : x;
}

// The padded extent every window reads: begin pad, input, and an end pad that covers the
// last window (ceil_mode may reach past pad_end; floor mode may leave rows unread).
int64_t padded_end(const WindowDims& w) {
  return (w.out - 1) * w.stride + (w.kernel - 1) * w.dilation + 1 - w.in - w.pad_begin;
}

// Average windows that tile the input exactly (kernel == stride, no padding or dilation):
// each input element is in one window, so the gradient is the output gradient divided by the
// window's size and spread over it, with a few reshapes.
Var tiled_average_grad(Var x, Var g, const std::vector<WindowDims>& geo) {
  const size_t k = geo.size();
  int64_t window = 1;
  std::string split = "#0.0;#0.1", lead = "#0.0;#0.1";
  std::vector<int64_t> perm{0, 1};
  for (size_t i = 0; i < k; ++i) {
    split += ";" + std::to_string(geo[i].out) + ";" + std::to_string(geo[i].kernel);
    lead += ";" + std::to_string(geo[i].out);
    window *= geo[i].kernel;
  }
  // (N, C, o0, k0, o1, k1) -> (N, C, o0, o1, k0, k1): the window's elements last.
  for (size_t i = 0; i < k; ++i) perm.push_back(static_cast<int64_t>(2 + 2 * i));
  for (size_t i = 0; i < k; ++i) perm.push_back(static_cast<int64_t>(3 + 2 * i));
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  Var windows = apply_dims("reshape", {x}, {{"dims", split}});
  if (k > 1) windows = transpose(windows, perm);
  windows = apply_dims("reshape", {windows}, {{"dims", lead + ";" + std::to_string(window)}});
  Var gk = apply_dims("reshape", {g}, {{"dims", lead + ";1"}});
  Var part = apply_dims("expand", {gk / static_cast<double>(window), windows},
                        {{"dims", dims_of_input(1, static_cast<int>(k + 3))}});
  std::string full = lead;
  for (size_t i = 0; i < k; ++i) full += ";" + std::to_string(geo[i].kernel);
  Var w = apply_dims("reshape", {part}, {{"dims", full}});
  if (k > 1) w = transpose(w, inverse);
  return reshape_like(w, x);
}

}  // namespace

std::vector<Variable*> Pool::grad(const GradArgs& args) const {
  Var x = grad_in(args, 0), g = grad_of_out(args, 0);
  require_static(args, 0, x, name());
  // Max: one kernel finds each window's first maximum and adds its gradient there.
  if (is_max_) return {apply("max_pool_grad", {x, grad_out(args, 0), g}, props()).var()};
  const auto geo = geometry(x.type().dims);
  const size_t k = geo.size();
  bool tiled = true;
  for (const auto& d : geo) {
    tiled = tiled && d.kernel == d.stride && d.dilation == 1 && d.pad_begin == 0 &&
            d.pad_end == 0 && d.out * d.kernel == d.in;
  }
  if (tiled) return {tiled_average_grad(x, g, geo).var()};
  std::vector<int64_t> pb, pe, full;
  for (const auto& w : geo) {
    pb.push_back(w.pad_begin);
    pe.push_back(padded_end(w));
    full.push_back(w.pad_begin + w.in + padded_end(w));
  }
  // The divisor of each output position, exactly as the forward counts it.
  std::vector<int64_t> out_dims;
  for (const auto& w : geo) out_dims.push_back(w.out);
  Tensor div = Tensor::empty(x.dtype(), out_dims);
  const WindowDims one{1, 1, 1, 1, 0, 0, 1};
  const WindowDims& gy = k == 2 ? geo[0] : one;
  const WindowDims& gx = geo[k - 1];
  for (int64_t oy = 0, flat = 0; oy < gy.out; ++oy) {
    for (int64_t ox = 0; ox < gx.out; ++ox, ++flat) {
      int64_t count = 0, padded = 0;
      for (int64_t i = 0; i < gy.kernel; ++i) {
        const int64_t yy = oy * gy.stride - gy.pad_begin + i * gy.dilation;
        if (yy >= gy.in + gy.pad_end) break;
        for (int64_t j = 0; j < gx.kernel; ++j) {
          const int64_t xx = ox * gx.stride - gx.pad_begin + j * gx.dilation;
          if (xx >= gx.in + gx.pad_end) break;
          ++padded;
          if (yy >= 0 && yy < gy.in && xx >= 0 && xx < gx.in) ++count;
        }
      }
      div.store(flat,
                static_cast<double>(count_include_pad_ ? padded : std::max<int64_t>(count, 1)));
    }
  }
  Var share = g / constant(x.graph(), div);
  Var total;
  std::vector<int64_t> tap(k, 0);
  for (;;) {
    std::vector<int64_t> start;
    for (size_t i = 0; i < k; ++i) start.push_back(tap[i] * geo[i].dilation);
    Var part = share;
    for (size_t i = 0; i < k; ++i) {
      part = place_strided(part, static_cast<int>(i + 2), start[i], geo[i].stride, geo[i].out,
                           full[i]);
    }
    total = total.var() ? total + part : part;
    size_t i = k;
    while (i-- > 0 && ++tap[i] == geo[i].kernel) tap[i] = 0;
    if (i == static_cast<size_t>(-1)) break;
  }
  std::vector<int64_t> cb, ce;
  for (size_t i = 0; i < k; ++i) {
    cb.push_back(-pb[i]);
    ce.push_back(-pe[i]);
  }
  return {pad_all(total, cb, ce).var()};
}

std::vector<Variable*> Conv::grad(const GradArgs& args) const {
  // Packing runs after differentiation; a packed graph read back (kiln's JSON) is not
  // differentiated through its blocks.
  if (packed_m_ > 0) {
    throw UnsupportedError(
        "conv: the gradient of a packed-weight convolution (packed_m); "
        "differentiate the graph before the pack pass");
  }
  Var x = grad_in(args, 0), w = grad_in(args, 1), g = grad_of_out(args, 0);
  std::vector<Variable*> out(args.node.inputs.size(), nullptr);
  const auto geo = geometry(x.type().dims, w.type().dims);
  const size_t k = geo.size();
  const int r = x.rank();
  const int64_t G = group_, C = x.type().dims[1], M = w.type().dims[0];
  const int64_t cg = C / G, mg = M / G;
  std::vector<int64_t> pb, pe, strides, dilations;
  for (const auto& d : geo) {
    pb.push_back(d.pad_begin);
    pe.push_back(d.pad_end);
    strides.push_back(d.stride);
    dilations.push_back(d.dilation);
  }
  auto perm_swap = [&](std::vector<int64_t> head) {
    for (int d = 3; d <= r; ++d) head.push_back(d);  // the spatial axes after a 5-D split
    return head;
  };
  // dims "a,b,#0.2,..": the leading dims given, the spatial dims copied from input 0 at
  // offset `from`.
  auto dims_with = [&](const std::string& lead, int from) {
    std::string s = lead;
    for (size_t i = 0; i < k; ++i) s += ";#0." + std::to_string(from + static_cast<int>(i));
    return s;
  };
  if (out.size() > 2 && args.wanted[2]) {
    std::vector<int64_t> axes{0};
    for (int d = 2; d < r; ++d) axes.push_back(d);
    out[2] = sum(g, axes).var();
  }
  if (args.wanted[1]) {
    require_static(args, 1, x, "the weight gradient of conv");
    // One kernel sums slices of the output rows apart (the cores share the work), a
    // reduction adds the slices; a big weight takes fewer slices, to bound their memory.
    Attrs props = this->props();
    props["kernel_shape"] = std::vector<int64_t>(w.type().dims.begin() + 2, w.type().dims.end());
    const int64_t weights = shape_numel(w.type().dims);
    const int64_t slices =
        std::clamp<int64_t>((int64_t(1) << 20) / std::max<int64_t>(weights, 1), 1, 8);
    props["slices"] = slices;
    // One slice is dW itself, written in place: no sum (a 9 MB copy per step), no reshape
    // (a copy too where dW is the graph's output).
    if (slices == 1) props["sliced"] = int64_t{0};
    Var parts = apply("conv_weight_grad", {x, g}, props);
    out[1] = (slices == 1 ? parts : sum(parts, {0})).var();
  }
  if (args.wanted[0]) {
    require_static(args, 0, x, "the input gradient of conv");
  }
  // A strided layer's or a small image's input gradient as dY times W^T folded back
  // (conv_input_grad): no zeros between the strided positions (4x the multiply-adds at stride
  // 2), no flipped copy of W (9 MB per step for a 512-channel 3x3 layer). Large images at
  // stride 1 keep the direct convolution of the flipped weight, the faster kernel there.
  constexpr int64_t kSmallInput = 16;  // input positions per image
  bool strided = false;
  int64_t in_positions = 1;
  std::vector<int64_t> in_spatial;
  for (const auto& d : geo) {
    strided |= d.stride > 1;
    in_positions *= d.in;
    in_spatial.push_back(d.in);
  }
  if (args.wanted[0] && r <= 4 && (strided || in_positions <= kSmallInput)) {
    Attrs props = this->props();
    props["input_shape"] = in_spatial;
    out[0] = apply("conv_input_grad", {g, w}, props).var();
  } else if (args.wanted[0]) {
    // g dilated by the stride: (N, M, (out-1)*s+1).
    Var gd = g;
    std::vector<int64_t> sd;
    for (size_t i = 0; i < k; ++i) {
      sd.push_back((geo[i].out - 1) * geo[i].stride + 1);
      gd = place_strided(gd, static_cast<int>(i + 2), 0, geo[i].stride, geo[i].out, sd.back());
    }
    // W (G*mg, cg, K) -> flipped -> (G*cg, mg, K).
    std::vector<int> spatial;
    for (size_t i = 0; i < k; ++i) spatial.push_back(static_cast<int>(i + 2));
    Var wf = reverse_axes(w, spatial);  // one pass over W, not one per axis
    std::string split = std::to_string(G) + ";" + std::to_string(mg) + ";" + std::to_string(cg);
    wf = apply_dims("reshape", {wf}, {{"dims", dims_with(split, 2)}});
    wf = transpose(wf, perm_swap({0, 2, 1}));
    wf = apply_dims("reshape", {wf},
                    {{"dims", dims_with(std::to_string(C) + ";" + std::to_string(mg), 3)}});
    std::vector<int64_t> begin, end, crop_b, crop_e;
    for (size_t i = 0; i < k; ++i) {
      const int64_t span = (geo[i].kernel - 1) * geo[i].dilation;
      const int64_t p = span - geo[i].pad_begin;
      const int64_t e = geo[i].in + span - p - sd[i];
      begin.push_back(std::max<int64_t>(p, 0));
      end.push_back(std::max<int64_t>(e, 0));
      crop_b.push_back(std::min<int64_t>(p, 0));
      crop_e.push_back(std::min<int64_t>(e, 0));
    }
    gd = pad_all(gd, crop_b, crop_e);
    std::vector<int64_t> pads = begin;
    pads.insert(pads.end(), end.begin(), end.end());
    out[0] = apply("conv", {gd, wf},
                   {{"group", G},
                    {"dilations", dilations},
                    {"strides", std::vector<int64_t>(k, 1)},
                    {"pads", pads}})
                 .var();
  }
  return out;
}

std::vector<Variable*> ConvTranspose::grad(const GradArgs& args) const {
  Var x = grad_in(args, 0), w = grad_in(args, 1), g = grad_of_out(args, 0);
  std::vector<Variable*> out(args.node.inputs.size(), nullptr);
  const int r = x.rank();
  if (out.size() > 2 && args.wanted[2]) {
    std::vector<int64_t> axes{0};
    for (int d = 2; d < r; ++d) axes.push_back(d);
    out[2] = sum(g, axes).var();
  }
  if (!args.wanted[0] && !args.wanted[1]) return out;
  require_static(args, 0, x, "the gradient of conv_transpose");
  if (r > 4) not_differentiable(args, 0, "conv_transpose: the gradient of a 3-D one (conv is 1-D and 2-D)");
  const auto geo = geometry(x.type().dims, w.type().dims);
  // dY's positions that no tap reaches (negative pads) are cropped; the rest is conv's
  // window over dY, which covers exactly the input's positions.
  std::vector<int64_t> crop_b, crop_e, pads, pads_e, strides, dilations;
  for (size_t d = 0; d < geo.size(); ++d) {
    const int64_t op = window_.output_padding.empty() ? 0 : window_.output_padding[d];
    const int64_t pb = geo[d].pad_begin, pe = window_.pad_end(d) - op;
    crop_b.push_back(std::min<int64_t>(pb, 0));
    crop_e.push_back(std::min<int64_t>(pe, 0));
    pads.push_back(std::max<int64_t>(pb, 0));
    pads_e.push_back(std::max<int64_t>(pe, 0));
    strides.push_back(geo[d].stride);
    dilations.push_back(geo[d].dilation);
  }
  pads.insert(pads.end(), pads_e.begin(), pads_e.end());
  Var gc = pad_all(g, crop_b, crop_e);
  Attrs props{{"group", group_}, {"strides", strides}, {"dilations", dilations}, {"pads", pads}};
  if (args.wanted[0]) out[0] = apply("conv", {gc, w}, props).var();
  if (args.wanted[1]) {
    props["kernel_shape"] = std::vector<int64_t>(w.type().dims.begin() + 2, w.type().dims.end());
    const int64_t weights = shape_numel(w.type().dims);
    props["slices"] = std::clamp<int64_t>((int64_t(1) << 20) / std::max<int64_t>(weights, 1), 1, 8);
    out[1] = sum(apply("conv_weight_grad", {gc, x}, props), {0}).var();
  }
  return out;
}

}  // namespace kiln
