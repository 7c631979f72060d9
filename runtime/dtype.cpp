#include "runtime/dtype.h"

#include <iterator>

#include "runtime/support/kiln_half.h"
#include "util/error.h"

namespace kiln {
namespace {
struct Info {
  DType dt;
  std::string_view name;
  std::string_view c_type;
  size_t size;
};
constexpr Info kInfo[] = {
    {DType::kBool, "bool", "uint8_t", 1},          {DType::kInt8, "int8", "int8_t", 1},
    {DType::kUInt8, "uint8", "uint8_t", 1},        {DType::kInt32, "int32", "int32_t", 4},
    {DType::kInt64, "int64", "int64_t", 8},        {DType::kFloat16, "float16", "uint16_t", 2},
    {DType::kBFloat16, "bfloat16", "uint16_t", 2}, {DType::kFloat32, "float32", "float", 4},
    {DType::kFloat64, "float64", "double", 8},     {DType::kInt16, "int16", "int16_t", 2},
    {DType::kUInt16, "uint16", "uint16_t", 2},     {DType::kUInt32, "uint32", "uint32_t", 4},
    {DType::kUInt64, "uint64", "uint64_t", 8},
};

const Info& info(DType dt) {
  auto i = static_cast<int32_t>(dt);
  // The message only when it is needed: this runs once per element of every reference loop.
  if (i < 0 || i >= static_cast<int32_t>(std::size(kInfo)))
    throw InternalError("bad dtype code " + std::to_string(i));
  return kInfo[i];
}
}  // namespace

size_t dtype_size(DType dt) { return info(dt).size; }
std::string_view dtype_name(DType dt) { return info(dt).name; }
std::string_view dtype_c_type(DType dt) { return info(dt).c_type; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo) {
    if (i.name == name) return i.dt;
  }
  return std::nullopt;
}

bool is_float(DType dt) {
  return dt == DType::kFloat16 || dt == DType::kBFloat16 || dt == DType::kFloat32 ||
         dt == DType::kFloat64;
}
bool is_integer(DType dt) {
  return dt == DType::kInt8 || dt == DType::kUInt8 || dt == DType::kInt32 || dt == DType::kInt64 ||
         dt == DType::kInt16 || dt == DType::kUInt16 || dt == DType::kUInt32 ||
         dt == DType::kUInt64;
}
bool is_signed(DType dt) {
  return is_float(dt) || dt == DType::kInt8 || dt == DType::kInt16 || dt == DType::kInt32 ||
         dt == DType::kInt64;
}

uint16_t bfloat16_bits(float f) { return kiln_f32_to_bf16(f); }

float bfloat16_round(float f) { return kiln_bf16_to_f32(kiln_f32_to_bf16(f)); }

}  // namespace kiln
