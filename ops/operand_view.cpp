#include "ops/operand_view.h"

#include <algorithm>

#include "util/error.h"

namespace kiln {

std::vector<int64_t> OperandView::encode() const {
  std::vector<int64_t> v{offset, static_cast<int64_t>(dims.size())};
  v.insert(v.end(), dims.begin(), dims.end());
  v.insert(v.end(), strides.begin(), strides.end());
  return v;
}

std::optional<OperandView> OperandView::from_props(const Attrs& props, const std::string& name) {
  if (!props.count(name)) return std::nullopt;
  const auto v = attr_ints(props, name);
  if (v.size() < 2 || v[1] < 1 || v[1] > 16 || v.size() != 2 + 2 * static_cast<size_t>(v[1])) {
    throw AttrError(name, "expects offset, rank (1..16), that many dims and that many strides");
  }
  OperandView view;
  view.offset = v[0];
  const auto r = static_cast<size_t>(v[1]);
  view.dims.assign(v.begin() + 2, v.begin() + 2 + static_cast<std::ptrdiff_t>(r));
  view.strides.assign(v.begin() + 2 + static_cast<std::ptrdiff_t>(r), v.end());
  if (view.offset < 0) throw AttrError(name, "negative offset");
  for (size_t d = 0; d < r; ++d) {
    if (view.dims[d] < 0 || view.strides[d] < 0) {
      throw AttrError(name, "negative dimension or stride at axis " + std::to_string(d));
    }
  }
  return view;
}

void OperandView::check_within(const TensorType& input, const std::string& what) const {
  int64_t numel = 1;
  for (int64_t d : input.dims) {
    if (d == kDynamic) throw UserError(what + ": a view needs an input of static shape");
    numel *= d;
  }
  int64_t last = offset, count = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    count *= dims[d];
    if (dims[d] > 0) last += (dims[d] - 1) * strides[d];
  }
  if (count > 0 && last >= numel) {
    throw UserError(what + ": the view reads element " + std::to_string(last) + " of an input of " +
                    std::to_string(numel) + " (" + input.to_string() + ")");
  }
}

Tensor OperandView::of(const Tensor& input) const {
  const Tensor c = input.contiguous();
  return Tensor(c.storage(), c.byte_offset() + static_cast<size_t>(offset) * dtype_size(c.dtype()),
                c.dtype(), dims, strides);
}

std::vector<int64_t> out_perm_from_props(const Attrs& props, const std::string& name) {
  std::vector<int64_t> perm = attr_ints(props, name, std::vector<int64_t>{});
  if (perm.empty()) return perm;
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  const auto r = static_cast<int64_t>(perm.size());
  for (int64_t d = 0; d < r; ++d) {
    if (sorted[static_cast<size_t>(d)] != d) throw AttrError(name, "is no permutation");
  }
  // The product's rows must stay rows: its columns are what the kernels store in a run.
  if (r < 2 || perm.back() != r - 1) throw AttrError(name, "must keep the last axis last");
  return perm;
}

std::string c_operand_dim(const std::optional<OperandView>& view, const std::string& input, int d) {
  return view ? std::to_string(view->dims[static_cast<size_t>(d)])
              : input + "->shape[" + std::to_string(d) + "]";
}

std::string c_operand_stride(const std::optional<OperandView>& view, const std::string& input,
                             int d) {
  return view ? std::to_string(view->strides[static_cast<size_t>(d)])
              : input + "->strides[" + std::to_string(d) + "]";
}

}  // namespace kiln
