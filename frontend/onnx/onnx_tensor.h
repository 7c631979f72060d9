#pragma once
// ONNX TensorProto <-> kiln Tensor: element types, typed and raw data, and weights kept in
// external data files. Every error names the tensor and, for external data, the file.
#include <filesystem>
#include <optional>
#include <string>

#include "runtime/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln {

// The kiln dtype for an ONNX TensorProto.DataType code; nullopt when kiln has none.
std::optional<DType> dtype_from_onnx(int code);
std::string onnx_dtype_name(int code);  // "FLOAT", "UINT16", ...

// `where` prefixes errors ("model.onnx: initializer 'fc.weight'"); external data files
// resolve against base_dir and must stay inside it.
Tensor tensor_from_onnx(const onnx::TensorProto& proto, const std::filesystem::path& base_dir,
                        const std::string& where);

// Reads one serialized TensorProto file (the ONNX test-data format: input_0.pb, ...).
Tensor load_onnx_tensor_file(const std::filesystem::path& path);

}  // namespace kiln
