#pragma once
// ONNX TensorProto <-> kiln Tensor: element types, typed and raw data, and weights kept in
// external data files. Every error names the tensor and, for external data, the file.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frontend/model_value.h"
#include "runtime/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln {

// The kiln dtype for an ONNX TensorProto.DataType code; nullopt when kiln has none.
std::optional<DType> dtype_from_onnx(int code);
std::string onnx_dtype_name(int code);  // "FLOAT", "UINT16", ...
int onnx_dtype_code(DType dt);          // the TensorProto.DataType code of a kiln dtype
// A tensor as a TensorProto named `name` (dims, data type, raw little-endian data).
void tensor_to_onnx(const Tensor& t, const std::string& name, onnx::TensorProto* proto);

// A tensor's raw_data left in the model file's mapping (onnx_wire.h) rather than in its
// TensorProto.
struct MappedRawData {
  std::shared_ptr<Storage> file;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Copies out of a model file's mapping, gathered while the initializers are imported and
// run together, split across the cores: fresh memory is filled at twice the speed on two
// cores, and a transformer's weights are most of its load time.
class MappedCopies {
 public:
  void add(void* to, const void* from, size_t bytes);
  void run();  // every copy added since the last run

 private:
  struct Copy {
    char* to;
    const char* from;
    size_t bytes;
  };
  std::vector<Copy> copies_;
};

// `where` prefixes errors ("model.onnx: initializer 'fc.weight'"); external data files
// resolve against base_dir and must stay inside it. `mapped`, when given, is the tensor's
// raw_data, copied once, by `copies` when given (the tensor's values are then unset until
// copies->run()). Never viewed in place: one view would keep the whole file mapped, and every
// page the other copies touched counted in the process's memory, for the graph's life.
Tensor tensor_from_onnx(const onnx::TensorProto& proto, const std::filesystem::path& base_dir,
                        const std::string& where, const MappedRawData* mapped = nullptr,
                        MappedCopies* copies = nullptr);

// Reads one serialized TensorProto file (the ONNX test-data format: input_0.pb, ...).
Tensor load_onnx_tensor_file(const std::filesystem::path& path);
// Reads a file holding a value of `kind`: a TensorProto, a SequenceProto of tensors, or an
// OptionalProto holding either or nothing.
ModelValue load_onnx_value_file(const std::filesystem::path& path, ValueKind kind);

}  // namespace kiln
