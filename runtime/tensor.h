#pragma once
// An n-dimensional array: dtype, shape, element strides, and shared storage. Views
// (transpose, slice) share storage; outputs produced by kiln are contiguous.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/storage.h"

namespace kiln {

using Shape = std::vector<int64_t>;

// The product of the dimensions; throws UserError naming the shape when it does not fit in
// 63 bits (shapes from files are untrusted: a wrapped product would pass every size check).
int64_t shape_numel(const Shape& shape);
// numel * element size, or nullopt when that overflows (or a dimension is negative).
std::optional<uint64_t> checked_nbytes(const Shape& shape, DType dtype);
Shape contiguous_strides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // Values are converted from double (exact for the integer range tests use).
  static Tensor from_doubles(DType dtype, Shape shape, const std::vector<double>& values);
  static Tensor scalar(DType dtype, double value) { return from_doubles(dtype, {}, {value}); }
  // A view over existing storage.
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, DType dtype, Shape shape,
         Shape strides);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  void* data() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return offset_; }
  bool is_contiguous() const;

  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor permute(const std::vector<int>& perm) const;                       // view
  Tensor slice(int dim, int64_t start, int64_t stop, int64_t step = 1) const;  // view
  Tensor reshape(Shape shape) const;  // view of a contiguous tensor (copies otherwise)

  // Element access by logical (row-major) flat index, any strides.
  double load(int64_t flat) const;
  int64_t load_int(int64_t flat) const;
  void store(int64_t flat, double value);
  void store_int(int64_t flat, int64_t value);
  std::vector<double> to_doubles() const;

  std::string describe() const;  // "float32 (2, 3)"

 private:
  char* element_ptr(int64_t flat) const;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::kFloat32;
  Shape shape_;
  Shape strides_;
};

// Copies src into dst element by element (same shape; any strides; dtypes may differ).
void copy_into(const Tensor& src, Tensor& dst);

}  // namespace kiln
