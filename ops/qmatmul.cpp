#include "ops/qmatmul.h"

#include "ops/c/qgemm_pack.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {

QMatMul::QMatMul(Attrs props) : COp("qmatmul", std::move(props)) {
  check_known_attrs(this->props(), {"requant", "bias", "relu", "scaled", "packed_n", "packed_k",
                                    "b_u8", "split_rows"});
  q_ = QuantLayout::from_props(this->props(), "qmatmul");
  packed_n_ = attr_int(this->props(), "packed_n", 0);
  packed_k_ = attr_int(this->props(), "packed_k", 0);
  b_u8_ = attr_int(this->props(), "b_u8", 0) != 0;
  split_rows_ = attr_int(this->props(), "split_rows", 0) != 0;
  if (packed_n_ < 0 || packed_k_ < 0 || (packed_n_ > 0) != (packed_k_ > 0)) {
    throw UserError("qmatmul: packed_n and packed_k must both be positive or both 0");
  }
}

DType QMatMul::b_dtype(const TensorType& b) const {
  if (packed_n_ == 0) return b.dtype;
  return b_u8_ ? DType::kUInt8 : DType::kInt8;
}

std::vector<TensorType> QMatMul::infer_type(const std::vector<TensorType>& in) const {
  if (in.size() != q_.input_count()) {
    throw UserError("qmatmul takes " + std::to_string(q_.input_count()) + " inputs here, got " +
                    std::to_string(in.size()));
  }
  const TensorType& a = in[0];
  const TensorType& b = in[1];
  if (a.rank() < 2) throw UserError("qmatmul: A must be at least 2-D, got " + a.to_string());
  const int64_t k = a.dims.back();
  int64_t n = kDynamic;
  if (packed_n_ > 0) {
    const int64_t bytes = qgemm_packed_bytes(packed_k_, packed_n_);
    if (b.dtype != DType::kInt8 || b.rank() != 1 || (b.dims[0] != kDynamic && b.dims[0] != bytes) ||
        (k != kDynamic && k != packed_k_)) {
      throw UserError("qmatmul: B packed for " + std::to_string(packed_k_) + " x " +
                      std::to_string(packed_n_) + " must be int8 (" + std::to_string(bytes) +
                      ") with A's last dimension " + std::to_string(packed_k_) + ", got A " +
                      a.to_string() + " and B " + b.to_string());
    }
    n = packed_n_;
  } else {
    if (b.rank() != 2 && b.rank() != a.rank()) {
      throw UserError("qmatmul: B must be 2-D or of A's rank, got A " + a.to_string() + " and B " +
                      b.to_string());
    }
    if (b.rank() > 2) {
      for (int d = 0; d + 2 < b.rank(); ++d) {
        const int64_t x = a.dims[static_cast<size_t>(d)], y = b.dims[static_cast<size_t>(d)];
        if (x == kDynamic || y == kDynamic || x != y) {
          throw UserError("qmatmul: B's leading dimensions must equal A's, got A " + a.to_string() +
                          " and B " + b.to_string());
        }
      }
    }
    const int64_t kb = b.dims[b.dims.size() - 2];
    if (k != kDynamic && kb != kDynamic && k != kb) {
      throw UserError("qmatmul: inner dimensions differ: A " + a.to_string() + ", B " +
                      b.to_string());
    }
    n = b.dims.back();
  }
  const DType out = check_quant_inputs("qmatmul", q_, in, b_dtype(b), n);
  TensorType y{out, a.dims};
  y.dims.back() = n;
  return {y};
}

std::vector<Shape> QMatMul::infer_shape(const std::vector<Shape>& in) const {
  const Shape& a = in[0];
  const Shape& b = in[1];
  const int64_t n = packed_n_ > 0 ? packed_n_ : b.back();
  const int64_t kb = packed_n_ > 0 ? packed_k_ : b[b.size() - 2];
  if (a.back() != kb) {
    throw UserError("qmatmul: inner dimensions differ: A " + dims_to_string(a) + ", B " +
                    dims_to_string(b));
  }
  if (packed_n_ == 0 && b.size() > 2) {
    for (size_t d = 0; d + 2 < b.size(); ++d) {
      if (a[d] != b[d]) {
        throw UserError("qmatmul: B's leading dimensions must equal A's, got A " +
                        dims_to_string(a) + " and B " + dims_to_string(b));
      }
    }
  }
  Shape y = a;
  y.back() = n;
  return {y};
}

double QMatMul::flops(const std::vector<Shape>& in, const std::vector<Shape>& out) const {
  return 2.0 * static_cast<double>(in[0].back()) * static_cast<double>(shape_numel(out[0]));
}

void QMatMul::perform(const std::vector<Tensor>& in, std::vector<Tensor>& out) const {
  const Tensor a = in[0].contiguous();
  const Tensor b = in[1].contiguous();
  Tensor& y = out[0];
  const QuantReference ref(q_, in);
  const int64_t k = a.shape().back(), n = y.shape().back();
  const int64_t rows = n > 0 ? y.numel() / n : 0;
  const bool batched = packed_n_ == 0 && b.ndim() > 2;
  const int64_t per_batch = batched ? a.shape()[a.ndim() - 2] : rows;
  const auto* packed = static_cast<const int8_t*>(b.data());
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t b_off = batched ? (i / per_batch) * k * n : 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t t = 0; t < k; ++t) {
        const int64_t av = a.load_int(i * k + t) - ref.a_zp();
        const int64_t bv = packed_n_ > 0 ? qgemm_packed_at(packed, k, t, j) + (b_u8_ ? 128 : 0)
                                         : b.load_int(b_off + t * n + j);
        acc += av * (bv - ref.b_zp(j));
      }
      if (q_.scaled) {
        y.store(i * n + j, ref.scaled_out(acc, j));
      } else {
        y.store_int(i * n + j, ref.out(acc, j));
      }
    }
  }
}

int64_t QMatMul::c_split_unit(const Node& node) const {
  // Whole row tiles of 6 (the kernel's) where N is known, so no part gets a sliver; with a
  // packed B and fewer rows than two tiles, column panels of 16 (kiln_qmatmul splits those).
  const auto& y = node.outputs[0]->type;
  const int64_t n = y.dims.back();
  if (n == kDynamic) return 0;
  if (split_rows_) return n;  // whole rows, which an epilogue follows
  const int64_t rows =
      y.static_numel() == kDynamic ? kDynamic : y.static_numel() / std::max<int64_t>(n, 1);
  if (packed_n_ > 0 && rows != kDynamic && rows < 12) return 16;
  return 6 * n;
}

std::string QMatMul::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  const bool b_u8 = packed_n_ > 0 ? b_u8_ : node.inputs[1]->type.dtype == DType::kUInt8;
  std::string s = "{\n";
  s += quant_c_params(q_, node, names, b_u8);
  s += "  if (kiln_qmatmul(" + sub.ctx + ", KILN_SUPPORT, " + names.inputs[0] + ", " +
       names.inputs[1] + ", " + std::to_string(packed_n_) + ", &qp, " + names.outputs[0] + ", " +
       std::to_string(split_rows_ ? 1 : 0) + ") != 0) " + sub.fail +
       "(\"integer matmul failed\");\n";
  s += "}\n";
  return s;
}

}  // namespace kiln
