#pragma once
// ONNX DFT: dft(X) -> Y along one axis. X (..., n, c, ...) with a last dimension of 1 (real)
// or 2 (complex: real, imaginary); Y (..., m, 2), where the signal is cut or zero-padded to
// `length` points (0: n) and m = length, or length / 2 + 1 when onesided (real input, forward).
// Props: axis (not the last), inverse (e^{+2 pi i jk / L} / L), onesided, length.
//
// Each line along the axis is transformed in double: a radix-2 FFT when the length is a power
// of two, otherwise the direct sum over a table of the length's twiddles (O(L^2) per line; a
// short-time transform of a few hundred points per frame runs as a GEMM against the DFT's
// matrix instead, frontend/onnx/onnx_ops_signal.cpp). Parts take runs of lines.
#include "ops/cop.h"

namespace kiln {

class Dft : public COp {
 public:
  explicit Dft(Attrs props);
  std::vector<TensorType> infer_type(const std::vector<TensorType>& inputs) const override;
  std::vector<Shape> infer_shape(const std::vector<Shape>& inputs) const override;
  void perform(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) const override;
  std::optional<int> cache_version() const override { return 1; }
  std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const override;
  std::string c_support_code() const override;
  std::vector<std::string> c_headers() const override { return {"<math.h>"}; }
  bool c_splittable(const Node&) const override { return true; }
  bool c_heavy(const Node&) const override { return true; }

 private:
  // The signal axis for a rank, and the transform's length for a signal of n points.
  int axis_for(int rank) const;
  int64_t length_for(int64_t n) const { return length_ > 0 ? length_ : n; }
  int64_t axis_, length_;
  bool inverse_, onesided_;
};

}  // namespace kiln
