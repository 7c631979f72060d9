#pragma once
// QDQ models (onnxruntime's quantize_static, and other toolkits): a Conv, MatMul or Gemm whose
// data inputs come from DequantizeLinear and whose only reader is a QuantizeLinear (maybe
// through a Relu) is one integer qconv or qmatmul: bytes in, bytes out, int32 sums, no float
// tensor between; a MaxPool between a DequantizeLinear and a QuantizeLinear of the same
// parameters pools the bytes, and a residual Add of two dequantized tensors requantizes their
// bytes' sum directly. Patterns that do not fit (a float reader of the product, per-axis
// scales on the wrong axis, a bias whose scale is not the inputs') import as written, in float.
#include <map>
#include <set>
#include <string>

#include "frontend/onnx/onnx_importer.h"

namespace onnx {
class GraphProto;
class NodeProto;
}  // namespace onnx

namespace kiln {

// The requantized sum of two dequantized byte tensors (per-tensor parameters known at load
// time): round(a * (sa / sy) + b * (sb / sy) - (za * sa + zb * sb) / sy) + zy, saturated to
// `to` (from zy on with `relu`). Two multiply-adds per element where the literal chain takes
// two subtractions, two multiplications and a division; it can differ from
// round((dequantized sum) / sy) by a step where that lies within rounding of a half, as
// onnxruntime's own QLinearAdd can.
Var requantized_sum(Var a, double sa, int64_t za, Var b, double sb, int64_t zb, double sy,
                    int64_t zy, DType to, bool relu);

class QdqFusion {
 public:
  explicit QdqFusion(const onnx::GraphProto& g);
  // Imports `n` with its DequantizeLinear inputs and its QuantizeLinear reader as one
  // integer op when the pattern holds; false (nothing built) otherwise.
  bool fuse(OnnxImporter& im, const onnx::NodeProto& n);
  // A node that a fused op took in: the importer skips it.
  bool absorbed(const onnx::NodeProto& n) const { return absorbed_.count(&n) != 0; }

 private:
  // DequantizeLinear -> MaxPool -> QuantizeLinear of one scale and zero point: a max_pool
  // of the bytes.
  bool fuse_max_pool(OnnxImporter& im, const onnx::NodeProto& n);
  // DequantizeLinear (a), DequantizeLinear (b) -> Add (-> Relu) -> QuantizeLinear, every
  // parameter one known value: requantized_sum.
  bool fuse_add(OnnxImporter& im, const onnx::NodeProto& n);
  const onnx::NodeProto* producer(const std::string& value, const char* op) const;
  const onnx::NodeProto* sole_reader(const std::string& value) const;
  std::map<std::string, const onnx::NodeProto*> producer_;
  std::map<std::string, std::vector<const onnx::NodeProto*>> readers_;
  std::set<std::string> graph_outputs_;
  std::set<const onnx::NodeProto*> absorbed_;
};

}  // namespace kiln
