#include "ops/gather.h"

#include "ops/broadcast.h"
#include "ops/c/workspace.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

Gather::Gather(Attrs props) : COp("gather", std::move(props)) {
  check_known_attrs(this->props(), {"axis"});
  axis_ = attr_int(this->props(), "axis", 0);
}

std::vector<TensorType> Gather::infer_type(const std::vector<TensorType>& inputs) const {
  if (inputs.size() != 2) throw UserError("gather takes 2 inputs (data, indices)");
  const auto& data = inputs[0];
  const auto& idx = inputs[1];
  if (idx.dtype != DType::kInt32 && idx.dtype != DType::kInt64) {
    throw UserError("gather: indices must be int32 or int64, got " + idx.to_string());
  }
  if (data.rank() == 0) throw UserError("gather: data must have rank >= 1");
  const int axis = normalize_axis(axis_, data.rank(), "gather");
  TensorType out{data.dtype, {}};
  out.dims.insert(out.dims.end(), data.dims.begin(), data.dims.begin() + axis);
  out.dims.insert(out.dims.end(), idx.dims.begin(), idx.dims.end());
  out.dims.insert(out.dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  if (out.rank() > 16) throw UserError("gather: result rank > 16");
  return {out};
}

std::vector<Shape> Gather::infer_shape(const std::vector<Shape>& inputs) const {
  const Shape& data = inputs[0];
  const int axis = normalize_axis(axis_, static_cast<int>(data.size()), "gather");
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), inputs[1].begin(), inputs[1].end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return {out};
}

void Gather::perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const {
  const Tensor& data = inputs[0];
  const Tensor& idx = inputs[1];
  Tensor& out = outputs[0];
  const int axis = normalize_axis(axis_, data.ndim(), "gather");
  const int64_t dim = data.shape()[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= data.shape()[static_cast<size_t>(d)];
  for (int d = axis + 1; d < data.ndim(); ++d) inner *= data.shape()[static_cast<size_t>(d)];
  const int64_t n = idx.numel();
  for (int64_t j = 0; j < n; ++j) {
    int64_t i = idx.load_int(j);
    if (i < -dim || i >= dim) {
      throw UserError("gather: index " + std::to_string(i) + " is out of range for axis " +
                      std::to_string(axis) + " of size " + std::to_string(dim));
    }
    if (i < 0) i += dim;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t src = (o * dim + i) * inner + k;
        const int64_t dst = (o * n + j) * inner + k;
        if (is_float(data.dtype())) {
          out.store(dst, data.load(src));
        } else {
          out.store_int(dst, data.load_int(src));
        }
      }
    }
  }
}

std::string Gather::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const auto& dt = node.inputs[0]->type;
  const auto& it = node.inputs[1]->type;
  const int rank = dt.rank(), irank = it.rank();
  const int axis = normalize_axis(axis_, rank, "gather");
  const std::string& data = names.inputs[0];
  const std::string& idx = names.inputs[1];
  const std::string& out = names.outputs[0];
  const std::string es = std::to_string(dtype_size(dt.dtype));
  const std::string ict(dtype_c_type(it.dtype));
  const std::string r = std::to_string(rank), ax = std::to_string(axis);
  std::string s = "{\n";
  // Indices are read once into a contiguous int64 list (validating each), then every
  // (outer position, index) pair copies one inner block.
  s += "  int64_t n = 1, outer = 1, dim = " + data + "->shape[" + ax + "];\n";
  s += "  for (int d = 0; d < " + std::to_string(irank) + "; ++d) n *= " + idx + "->shape[d];\n";
  s += "  for (int d = 0; d < " + ax + "; ++d) outer *= " + data + "->shape[d];\n";
  s += c_workspace("int64_t", "ids", "n", "gather's indices");
  s += "  kiln_copy_strided(ids, " + idx + "->data, " + std::to_string(irank) + ", " + idx +
       "->shape, " + idx + "->strides, sizeof(" + ict + "));\n";
  if (it.dtype == DType::kInt32) {
    s += "  for (int64_t j = n; j-- > 0;) ids[j] = ((const int32_t *)ids)[j];\n";
  }
  s += "  for (int64_t j = 0; j < n; ++j) {\n";
  s += "    if (ids[j] < -dim || ids[j] >= dim) " + sub.fail +
       "(\"gather: index %lld is out of range for axis " + ax +
       " of size %lld\", (long long)ids[j], (long long)dim);\n";
  s += "    if (ids[j] < 0) ids[j] += dim;\n  }\n";
  s += "  int64_t inner_shape[KILN_MAX_DIMS], ist[KILN_MAX_DIMS], inner = 1;\n";
  s += "  int ir = 0;\n";
  s += "  for (int d = " + ax + " + 1; d < " + r + "; ++d, ++ir) {\n";
  s += "    inner_shape[ir] = " + data + "->shape[d];\n    inner *= inner_shape[ir];\n  }\n";
  s += "  int64_t c = 1;\n";
  s += "  for (int d = ir - 1; d >= 0; --d) { ist[d] = c; c *= inner_shape[d]; }\n";
  s += "  char *dst = (char *)" + out + "->data;\n";
  s += "  for (int64_t o = 0; o < outer; ++o) {\n";
  s += "    int64_t base = 0;\n";
  if (axis > 0) {  // o's offset over the outer dimensions
    s += "    int64_t rem = o;\n";
    s += "    for (int d = " + std::to_string(axis - 1) + "; d >= 0; --d) {\n";
    s += "      base += (rem % " + data + "->shape[d]) * " + data + "->strides[d];\n";
    s += "      rem /= " + data + "->shape[d];\n    }\n";
  }
  // One element per index (frames cut from a signal, a row of a table picked per token):
  // a typed load, not a copy call per element.
  const std::string ct(dtype_c_type(dt.dtype));
  s += "    if (inner == 1) {\n";
  s += "      const " + ct + " *row = (const " + ct + " *)" + data + "->data + base;\n";
  s += "      " + ct + " *to = (" + ct + " *)dst;\n";
  s += "      const int64_t as = " + data + "->strides[" + ax + "];\n";
  s += "      for (int64_t j = 0; j < n; ++j) to[j] = row[ids[j] * as];\n";
  s += "      dst += n * " + es + ";\n";
  s += "      continue;\n";
  s += "    }\n";
  s += "    for (int64_t j = 0; j < n; ++j, dst += inner * " + es + ") {\n";
  s += "      const char *src = (const char *)" + data + "->data + (base + ids[j] * " + data +
       "->strides[" + ax + "]) * " + es + ";\n";
  s += "      kiln_copy_nd(dst, ist, src, " + data + "->strides + " + ax +
       " + 1, ir, inner_shape, " + es + ");\n";
  s += "    }\n  }\n}\n";
  return s;
}

}  // namespace kiln
