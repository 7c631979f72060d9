#include "runtime/tensor.h"

#include "runtime/support/kiln_half.h"

#include <cmath>
#include <cstring>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      throw UserError("shape " + dims_to_string(shape) + " has more elements than fit in 64 bits");
    }
  }
  return n;
}

std::optional<uint64_t> checked_nbytes(const Shape& shape, DType dtype) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) return 0;
  }
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Only an empty tensor's other dimensions can multiply past 64 bits (a non-empty one's
    // size was checked): its strides are never used, so they saturate.
    if (__builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s)) s = INT64_MAX;
  }
  return strides;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, DType dtype, Shape shape,
               Shape strides)
    : storage_(std::move(storage)),
      offset_(byte_offset),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)) {
  check_internal(shape_.size() == strides_.size(), "tensor shape/strides rank differ");
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  for (int64_t d : shape) {
    if (d < 0) throw UserError("negative dimension in shape " + dims_to_string(shape));
  }
  auto nbytes = checked_nbytes(shape, dtype);
  if (!nbytes) {
    throw UserError(std::string(dtype_name(dtype)) + " tensor of shape " + dims_to_string(shape) +
                    " needs more bytes than fit in 64 bits");
  }
  size_t bytes = static_cast<size_t>(*nbytes);
  Shape strides = contiguous_strides(shape);
  return Tensor(allocate_storage(bytes), 0, dtype, std::move(shape), std::move(strides));
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::from_doubles(DType dtype, Shape shape, const std::vector<double>& values) {
  Tensor t = empty(dtype, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel()) {
    throw UserError("from_doubles: " + std::to_string(values.size()) + " values for shape " +
                    dims_to_string(t.shape()));
  }
  for (size_t i = 0; i < values.size(); ++i) t.store(static_cast<int64_t>(i), values[i]);
  return t;
}

void* Tensor::data() const {
  return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // (its other dimensions may multiply past 64 bits)
  int64_t expect = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expect) return numel() == 0;
    expect *= shape_[i];
  }
  return true;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(dtype_, shape_);
  copy_into(*this, out);
  return out;
}

Tensor Tensor::permute(const std::vector<int>& perm) const {
  if (perm.size() != shape_.size()) throw UserError("permute: wrong number of axes");
  Shape shape(perm.size()), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    shape[i] = shape_.at(perm[i]);
    strides[i] = strides_.at(perm[i]);
  }
  return Tensor(storage_, offset_, dtype_, shape, strides);
}

Tensor Tensor::slice(int dim, int64_t start, int64_t stop, int64_t step) const {
  if (dim < 0 || dim >= ndim() || step <= 0 || start < 0 || stop > shape_[dim] || start > stop) {
    throw UserError("slice out of range on " + describe());
  }
  Shape shape = shape_, strides = strides_;
  shape[dim] = (stop - start + step - 1) / step;
  strides[dim] = strides_[dim] * step;
  size_t off = offset_ + static_cast<size_t>(start * strides_[dim]) * dtype_size(dtype_);
  return Tensor(storage_, off, dtype_, shape, strides);
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape_numel(shape) != numel()) {
    throw UserError("reshape " + describe() + " to " + dims_to_string(shape) +
                    ": element counts differ");
  }
  Tensor base = contiguous();
  Shape strides = contiguous_strides(shape);
  return Tensor(base.storage_, base.offset_, dtype_, std::move(shape), std::move(strides));
}

char* Tensor::element_ptr(int64_t flat) const {
  if (storage_ && storage_->on_device()) {
    throw UserError("reading or writing the elements of a device tensor (" + describe() +
                    ") on the host: copy it to the host first (to_host)");
  }
  int64_t off = 0;
  for (size_t i = shape_.size(); i-- > 0;) {
    int64_t d = shape_[i];
    off += (flat % d) * strides_[i];
    flat /= d;
  }
  return static_cast<char*>(data()) + off * static_cast<int64_t>(dtype_size(dtype_));
}

double Tensor::load(int64_t flat) const {
  const char* p = element_ptr(flat);
  switch (dtype_) {
    case DType::kBool:
      return *reinterpret_cast<const uint8_t*>(p) != 0;
    case DType::kInt8:
      return *reinterpret_cast<const int8_t*>(p);
    case DType::kUInt8:
      return *reinterpret_cast<const uint8_t*>(p);
    case DType::kInt32:
      return *reinterpret_cast<const int32_t*>(p);
    case DType::kInt64:
      return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case DType::kFloat32:
      return *reinterpret_cast<const float*>(p);
    case DType::kFloat64:
      return *reinterpret_cast<const double*>(p);
    case DType::kFloat16:
      return kiln_f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::kBFloat16:
      return kiln_bf16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::kInt16:
      return *reinterpret_cast<const int16_t*>(p);
    case DType::kUInt16:
      return *reinterpret_cast<const uint16_t*>(p);
    case DType::kUInt32:
      return *reinterpret_cast<const uint32_t*>(p);
    case DType::kUInt64:
      return static_cast<double>(*reinterpret_cast<const uint64_t*>(p));
  }
  throw InternalError("bad dtype");
}

int64_t Tensor::load_int(int64_t flat) const {
  const char* p = element_ptr(flat);
  switch (dtype_) {
    case DType::kInt32:
      return *reinterpret_cast<const int32_t*>(p);
    case DType::kInt64:
      return *reinterpret_cast<const int64_t*>(p);
    case DType::kInt16:
      return *reinterpret_cast<const int16_t*>(p);
    case DType::kUInt16:
      return *reinterpret_cast<const uint16_t*>(p);
    case DType::kUInt32:
      return *reinterpret_cast<const uint32_t*>(p);
    // uint64 above 2^63 reads as its two's-complement int64 (the same 64 bits).
    case DType::kUInt64:
      return static_cast<int64_t>(*reinterpret_cast<const uint64_t*>(p));
    default:
      return static_cast<int64_t>(load(flat));
  }
}

void Tensor::store(int64_t flat, double v) {
  char* p = element_ptr(flat);
  switch (dtype_) {
    case DType::kBool:
      *reinterpret_cast<uint8_t*>(p) = v != 0;
      break;
    case DType::kInt8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
      break;
    case DType::kUInt8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      break;
    case DType::kInt32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    case DType::kFloat32:
      *reinterpret_cast<float*>(p) = static_cast<float>(v);
      break;
    case DType::kFloat64:
      *reinterpret_cast<double*>(p) = v;
      break;
    case DType::kFloat16:
      *reinterpret_cast<uint16_t*>(p) = kiln_f32_to_f16(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      *reinterpret_cast<uint16_t*>(p) = kiln_f32_to_bf16(static_cast<float>(v));
      break;
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      store_int(flat, static_cast<int64_t>(v));
      break;
  }
}

void Tensor::store_int(int64_t flat, int64_t v) {
  char* p = element_ptr(flat);
  switch (dtype_) {
    case DType::kInt8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
      break;
    case DType::kUInt8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      break;
    case DType::kInt32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      *reinterpret_cast<int64_t*>(p) = v;
      break;
    // Narrower integers keep the low bits (two's complement), as a C cast does.
    case DType::kInt16:
      *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(v);
      break;
    case DType::kUInt16:
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
      break;
    case DType::kUInt32:
      *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
      break;
    case DType::kUInt64:
      *reinterpret_cast<uint64_t*>(p) = static_cast<uint64_t>(v);
      break;
    default:
      store(flat, static_cast<double>(v));
  }
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[static_cast<size_t>(i)] = load(i);
  return v;
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + " " + dims_to_string(shape_) +
         (storage_ && storage_->on_device() ? " on cuda" : "");
}

namespace {

// dst (contiguous) = src's elements in row-major order, src read through its strides: an
// odometer over the outer dimensions and a strided run over the last, with no division and
// no conversion per element.
template <class T>
void gather_strided(const T* src, const Shape& shape, const std::vector<int64_t>& strides, T* dst) {
  const size_t rank = shape.size();
  if (rank == 0) {
    *dst = *src;
    return;
  }
  const int64_t inner = shape[rank - 1], step = strides[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < rank; ++d) outer *= shape[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (size_t d = 0; d + 1 < rank; ++d) off += index[d] * strides[d];
    const T* s = src + off;
    for (int64_t k = 0; k < inner; ++k) dst[k] = s[k * step];
    dst += inner;
    for (size_t d = rank - 1; d-- > 0;) {  // next outer index
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

void copy_into(const Tensor& src, Tensor& dst) {
  if (src.shape() != dst.shape()) {
    throw UserError("copy: shape " + dims_to_string(src.shape()) + " into " +
                    dims_to_string(dst.shape()));
  }
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if ((src.storage() && src.storage()->on_device()) ||
        (dst.storage() && dst.storage()->on_device())) {
      throw UserError("copy: " + src.describe() + " into " + dst.describe() +
                      ": device tensors move with to_device / to_host");
    }
    if (src.nbytes()) std::memcpy(dst.data(), src.data(), src.nbytes());
    return;
  }
  const bool host = !(src.storage() && src.storage()->on_device()) &&
                    !(dst.storage() && dst.storage()->on_device());
  if (src.dtype() == dst.dtype() && dst.is_contiguous() && host && src.numel() > 0) {
    const auto* s = static_cast<const char*>(src.data());
    switch (dtype_size(src.dtype())) {
      case 1:
        return gather_strided(reinterpret_cast<const uint8_t*>(s), src.shape(), src.strides(),
                              static_cast<uint8_t*>(dst.data()));
      case 2:
        return gather_strided(reinterpret_cast<const uint16_t*>(s), src.shape(), src.strides(),
                              static_cast<uint16_t*>(dst.data()));
      case 4:
        return gather_strided(reinterpret_cast<const uint32_t*>(s), src.shape(), src.strides(),
                              static_cast<uint32_t*>(dst.data()));
      case 8:
        return gather_strided(reinterpret_cast<const uint64_t*>(s), src.shape(), src.strides(),
                              static_cast<uint64_t*>(dst.data()));
    }
  }
  bool ints = is_integer(src.dtype()) && is_integer(dst.dtype());
  for (int64_t i = 0; i < src.numel(); ++i) {
    if (ints) {
      dst.store_int(i, src.load_int(i));
    } else {
      dst.store(i, src.load(i));
    }
  }
}

}  // namespace kiln
