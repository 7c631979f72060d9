#pragma once
// Element types. The numeric codes are part of the module ABI (kiln_tensor.dtype).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

enum class DType : int32_t {
  kBool = 0,
  kInt8 = 1,
  kUInt8 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat16 = 5,
  kBFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  // Storage types ONNX models use; kernels compute them in a wider type (the frontend
  // converts at the edges: int16 / uint16 in int32, uint32 / uint64 in int64).
  kInt16 = 9,
  kUInt16 = 10,
  kUInt32 = 11,
  kUInt64 = 12,
};

size_t dtype_size(DType dt);
std::string_view dtype_name(DType dt);  // "float32"
std::optional<DType> dtype_from_name(std::string_view name);
std::string_view dtype_c_type(DType dt);  // C type in generated code ("float", "uint8_t" for bool)
bool is_float(DType dt);
bool is_integer(DType dt);  // bool excluded
bool is_signed(DType dt);
// bfloat16's bits for f, rounded to nearest, ties to even (a NaN stays a quiet NaN), and the
// float those bits are: what kernels that round float32 to bfloat16 compute (ops' reference
// code cannot see runtime/support).
uint16_t bfloat16_bits(float f);
float bfloat16_round(float f);
inline bool is_byte(DType dt) { return dt == DType::kInt8 || dt == DType::kUInt8; }  // quantized

}  // namespace kiln
