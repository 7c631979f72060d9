// The ONNX importer's ops built of several kiln ops (Trilu, OneHot, EyeLike, Einsum).
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

// Trilu: the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dimensions.
Outs convert_trilu(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  const int64_t k = OnnxImporter::has_input(n, 1) ? im.const_ints(n, 1, "k").at(0) : 0;
  const bool upper = attr_int(a, "upper", 1) != 0;
  if (x.rank() < 2) throw UserError("Trilu needs rank >= 2, got " + x.type().to_string());
  const int64_t rows = x.type().dims[static_cast<size_t>(x.rank() - 2)];
  const int64_t cols = x.type().dims[static_cast<size_t>(x.rank() - 1)];
  if (rows == kDynamic || cols == kDynamic)
    throw UnsupportedError("Trilu over dynamic matrix dimensions " + x.type().to_string());
  Var keep = index_constant(im.graph(), DType::kBool, {rows, cols}, [&](const Ints& at) {
    const int64_t diff = at[1] - at[0];
    return upper ? diff >= k : diff <= k;
  });
  return Outs{where(keep, x, scalar_like(x, 0.0))};
}

// OneHot(indices, depth, values): values[1] where the index (negative from the end) is the
// position along the new axis, values[0] elsewhere.
Outs convert_one_hot(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var idx = im.in(n, 0);
  const Tensor& depth_t = im.const_in(n, 1, "depth");
  if (depth_t.numel() != 1) throw UserError("depth must hold one value, got " + depth_t.describe());
  const auto depth = static_cast<int64_t>(depth_t.load(0));
  if (depth < 1) throw UserError("depth must be at least 1, got " + std::to_string(depth));
  Var values = im.in(n, 2);
  const int out_rank = idx.rank() + 1;
  const int axis = static_cast<int>(rank_axis(attr_int(a, "axis", -1), out_rank));
  Var i = is_float(idx.dtype()) ? cast(floor(idx), DType::kInt64) : cast(idx, DType::kInt64);
  i = where(lt(i, scalar(im.graph(), DType::kInt64, 0)),
            i + scalar(im.graph(), DType::kInt64, static_cast<double>(depth)), i);
  Var ie = unsqueeze_at(i, axis);
  Ints shape(static_cast<size_t>(out_rank), 1);
  shape[static_cast<size_t>(axis)] = depth;
  Var iota = index_constant(im.graph(), DType::kInt64, shape, [&](const Ints& at) {
    return static_cast<double>(at[static_cast<size_t>(axis)]);
  });
  Var off = apply("slice", {values}, {{"starts", Ints{0}}, {"ends", Ints{1}}});
  Var on = apply("slice", {values}, {{"starts", Ints{1}}, {"ends", Ints{2}}});
  return Outs{where(eq(iota, ie), reshape(on, {}), reshape(off, {}))};
}

// EyeLike: ones on the k-th diagonal of a static 2-D shape.
Outs convert_eye_like(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  const TensorType t = im.type_of(n, 0);
  const Ints d = static_dims(t, "EyeLike");
  if (d.size() != 2) throw UserError("EyeLike needs a 2-D input, got " + t.to_string());
  DType dt = t.dtype;
  if (a.count("dtype")) {
    auto to = dtype_from_onnx(static_cast<int>(attr_int(a, "dtype")));
    if (!to)
      throw UnsupportedError("EyeLike dtype " +
                             onnx_dtype_name(static_cast<int>(attr_int(a, "dtype"))));
    dt = *to;
  }
  const int64_t k = attr_int(a, "k", 0);
  Tensor eye = Tensor::zeros(dt, d);
  for (int64_t i = 0; i < d[0]; ++i) {
    if (i + k >= 0 && i + k < d[1]) eye.store(i * d[1] + i + k, 1.0);
  }
  return Outs{constant(im.graph(), eye)};
}

// Einsum with one or two operands, as transposes, sums and one batched matmul: the
// operands' letters sort into batch (both and the output), contracted (both, not the
// output), and kept-from-one-side; letters only one operand has and the output lacks are
// summed first. "..." stands for the leading dimensions. Static dimensions; a letter
// repeated within one operand takes that operand's diagonal first.
Outs convert_einsum(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  std::string eq;
  for (char c : attr_string(a, "equation")) {
    if (c != ' ') eq += c;
  }
  std::vector<Var> ops;
  for (int i = 0; i < n.input_size(); ++i) ops.push_back(im.in(n, i));
  if (ops.empty() || ops.size() > 2)
    throw UnsupportedError("Einsum with " + std::to_string(ops.size()) + " operands");
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  {
    const std::string lhs = eq.substr(0, arrow);
    size_t start = 0;
    for (;;) {
      const size_t comma = lhs.find(',', start);
      terms.push_back(
          lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (terms.size() != ops.size())
    throw UserError("equation '" + eq + "' has " + std::to_string(terms.size()) + " terms for " +
                    std::to_string(ops.size()) + " inputs");
  // "..." becomes upper-case letters, aligned from the right across operands.
  int ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (terms[i].find("...") != std::string::npos)
      ell = std::max(ell, ops[i].rank() - static_cast<int>(terms[i].size()) + 3);
  }
  auto expand_ellipsis = [&](std::string t, int rank) {
    const size_t p = t.find("...");
    if (p == std::string::npos) return t;
    const int count = rank - static_cast<int>(t.size()) + 3;
    std::string fill;
    for (int k = ell - count; k < ell; ++k) fill += static_cast<char>('A' + k);
    return t.replace(p, 3, fill);
  };
  for (size_t i = 0; i < terms.size(); ++i) {
    terms[i] = expand_ellipsis(terms[i], ops[i].rank());
    if (static_cast<int>(terms[i].size()) != ops[i].rank())
      throw UserError("term '" + terms[i] + "' does not match input " + ops[i].type().to_string());
    // A letter repeated within a term takes the diagonal: the two axes moved last, merged,
    // and every (n + 1)-th element kept; the letter then appears once, last.
    for (size_t q = 0; q < terms[i].size();) {
      const size_t p = terms[i].find(terms[i][q]);
      if (p == q) {
        ++q;
        continue;
      }
      const Ints d = static_dims(ops[i].type(), "Einsum");
      if (d[p] != d[q]) {
        throw UserError("term '" + terms[i] + "' repeats '" + std::string(1, terms[i][q]) +
                        "' over dimensions of " + std::to_string(d[p]) + " and " +
                        std::to_string(d[q]));
      }
      Ints perm, shape;
      std::string rest;
      for (size_t c = 0; c < terms[i].size(); ++c) {
        if (c == p || c == q) continue;
        perm.push_back(static_cast<int64_t>(c));
        shape.push_back(d[c]);
        rest += terms[i][c];
      }
      perm.push_back(static_cast<int64_t>(p));
      perm.push_back(static_cast<int64_t>(q));
      shape.push_back(d[p] * d[p]);
      const auto last = static_cast<int64_t>(shape.size()) - 1;
      ops[i] = apply("slice", {reshape(transpose(ops[i], perm), shape)},
                     {{"starts", Ints{0}},
                      {"ends", Ints{d[p] * d[p]}},
                      {"axes", Ints{last}},
                      {"steps", Ints{d[p] + 1}}});
      terms[i] = rest + terms[i][q];
      q = 0;  // look again: a letter may appear three times
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (out.find("...") != std::string::npos) {
      std::string fill;
      for (int k = 0; k < ell; ++k) fill += static_cast<char>('A' + k);
      out.replace(out.find("..."), 3, fill);
    }
  } else {
    std::string all = terms.size() == 2 ? terms[0] + terms[1] : terms[0];
    std::string ups, lows;
    for (char c : all) {
      if (std::count(all.begin(), all.end(), c) == 1)
        (std::isupper(static_cast<unsigned char>(c)) ? ups : lows) += c;
    }
    for (int k = 0; k < ell; ++k) ups = std::string(1, static_cast<char>('A' + k)) + ups;
    std::sort(lows.begin(), lows.end());
    out = ups + lows;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Ints d = static_dims(ops[i].type(), "Einsum");
    for (size_t c = 0; c < terms[i].size(); ++c) {
      auto [it, fresh] = size.emplace(terms[i][c], d[c]);
      if (!fresh && it->second != d[c])
        throw UnsupportedError("Einsum letter '" + std::string(1, terms[i][c]) + "' is " +
                               std::to_string(it->second) + " and " + std::to_string(d[c]) +
                               " (broadcasting)");
    }
  }
  auto has = [](const std::string& t, char c) { return t.find(c) != std::string::npos; };
  // Sums the letters of term i that nothing else needs.
  auto sum_private = [&](size_t i, const std::string& other) {
    Ints axes;
    std::string kept;
    for (size_t c = 0; c < terms[i].size(); ++c) {
      const char l = terms[i][c];
      if (!has(out, l) && !has(other, l))
        axes.push_back(static_cast<int64_t>(c));
      else
        kept += l;
    }
    if (!axes.empty()) {
      ops[i] = sum(ops[i], axes, false);
      terms[i] = kept;
    }
  };
  auto permute_to = [](Var x, const std::string& from, const std::string& to) {
    Ints perm;
    bool identity = true;
    for (char c : to) {
      perm.push_back(static_cast<int64_t>(from.find(c)));
      identity = identity && perm.back() == static_cast<int64_t>(perm.size() - 1);
    }
    return identity ? x : transpose(x, perm);
  };
  auto product = [&](const std::string& letters) {
    int64_t p = 1;
    for (char c : letters) p *= size.at(c);
    return p;
  };
  if (ops.size() == 1) {
    sum_private(0, "");
    return Outs{permute_to(ops[0], terms[0], out)};
  }
  sum_private(0, terms[1]);
  sum_private(1, terms[0]);
  std::string batch, contract, left, right;
  for (char c : terms[0]) {
    if (has(terms[1], c))
      (has(out, c) ? batch : contract) += c;
    else
      left += c;
  }
  for (char c : terms[1]) {
    if (!has(terms[0], c)) right += c;
  }
  Var x = reshape(permute_to(ops[0], terms[0], batch + left + contract),
                  {product(batch), product(left), product(contract)});
  Var y = reshape(permute_to(ops[1], terms[1], batch + contract + right),
                  {product(batch), product(contract), product(right)});
  Ints dims;
  for (char c : batch + left + right) dims.push_back(size.at(c));
  Var z = reshape(matmul(x, y), dims);
  return Outs{permute_to(z, batch + left + right, out)};
}

}  // namespace

void add_composite_ops(OpTable& t) {
  t["Trilu"] = {{"upper"}, nullptr, convert_trilu};
  t["Einsum"] = {{"equation"}, nullptr, convert_einsum};
  t["OneHot"] = {{"axis"}, nullptr, convert_one_hot};
  t["EyeLike"] = {{"dtype", "k"}, nullptr, convert_eye_like};
}

}  // namespace kiln::onnx_import
