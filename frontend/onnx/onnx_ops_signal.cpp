// The ONNX importer's signal ops: the Hann, Hamming and Blackman windows and MelWeightMatrix
// (tables computed at load time: their sizes are inputs that decide the output's shape, so
// they are known when the graph is built), DFT (kiln's dft op) and STFT.
//
// STFT: frames gathered from the signal, windowed, and multiplied by the DFT's matrix (cos and
// -sin of 2 pi jk / n per bin, the window folded in when it is a constant): one packed GEMM
// for every frame at once, where a per-frame FFT of a non-power-of-two frame (Whisper's 400)
// would fall back to the direct sum. Frames longer than kMaxGemmFrame points run the dft op
// (its FFT where the length is a power of two) rather than hold a matrix of O(n^2) floats.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <numbers>

#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_tensor.h"
#include "util/error.h"

namespace kiln::onnx_import {
namespace {

constexpr int64_t kMaxGemmFrame = 2048;  // a 2048-point frame's matrix: 2048 x 2050 floats

// output_datatype (a TensorProto code, default FLOAT) as a floating dtype.
DType output_dtype(const Attrs& a, const std::string& what) {
  const int64_t code = attr_int(a, "output_datatype", 1);
  const std::optional<DType> dt = dtype_from_onnx(static_cast<int>(code));
  if (!dt || (*dt != DType::kFloat32 && *dt != DType::kFloat64)) {
    throw UnsupportedError(what + " with output_datatype " +
                           onnx_dtype_name(static_cast<int>(code)) +
                           " (FLOAT and DOUBLE are supported)");
  }
  return *dt;
}

int64_t scalar_int(OnnxImporter& im, const onnx::NodeProto& n, int i, const std::string& what) {
  const Tensor& t = im.const_in(n, i, what);
  if (t.numel() != 1) throw UserError(what + " must hold one value, got " + t.describe());
  return t.load_int(0);
}

// w[k] for k < size, as ONNX defines the three windows: over N = size (periodic) or size - 1
// (symmetric) intervals.
Outs convert_window(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a,
                    const std::string& kind) {
  const int64_t size = scalar_int(im, n, 0, "size");
  if (size < 0) throw UserError("window size " + std::to_string(size) + " is negative");
  const bool periodic = attr_int(a, "periodic", 1) != 0;
  const double N = static_cast<double>(periodic ? size : size - 1);
  const double two_pi = 2 * std::numbers::pi;
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t k = 0; k < size; ++k) {
    const double t = N > 0 ? two_pi * static_cast<double>(k) / N : 0.0;
    double v = 0;
    if (kind == "hann") v = 0.5 - 0.5 * std::cos(t);
    if (kind == "hamming") v = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(t);
    if (kind == "blackman") v = 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t);
    w[static_cast<size_t>(k)] = v;
  }
  return Outs{constant(im.graph(), Tensor::from_doubles(output_dtype(a, n.op_type()), {size}, w))};
}

// The triangular filters of num_mel_bins mel bands over dft_length / 2 + 1 bins, from
// lower_edge_hertz to upper_edge_hertz: each band's edges and centre are the mel scale's
// evenly spaced points (num_mel_bins + 2 of them) mapped to whole bins, as ONNX defines it.
Outs convert_mel(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  const int64_t bands = scalar_int(im, n, 0, "num_mel_bins");
  const int64_t dft_length = scalar_int(im, n, 1, "dft_length");
  const int64_t rate = scalar_int(im, n, 2, "sample_rate");
  const double lo = im.const_in(n, 3, "lower_edge_hertz").load(0);
  const double hi = im.const_in(n, 4, "upper_edge_hertz").load(0);
  if (bands < 1 || dft_length < 1 || rate < 1) {
    throw UserError("MelWeightMatrix needs num_mel_bins, dft_length and sample_rate >= 1, got " +
                    std::to_string(bands) + ", " + std::to_string(dft_length) + ", " +
                    std::to_string(rate));
  }
  if (!(lo >= 0) || !(hi > lo)) {
    throw UserError("MelWeightMatrix needs 0 <= lower_edge_hertz < upper_edge_hertz, got " +
                    std::to_string(lo) + " and " + std::to_string(hi));
  }
  const int64_t bins = dft_length / 2 + 1;
  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double mel_lo = mel(lo), step = (mel(hi) - mel_lo) / static_cast<double>(bands + 2);
  std::vector<int64_t> edge(static_cast<size_t>(bands + 2));
  for (int64_t i = 0; i < bands + 2; ++i) {
    const double hz =
        700.0 * (std::pow(10.0, (static_cast<double>(i) * step + mel_lo) / 2595.0) - 1);
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(
        std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(rate)));
    if (edge[static_cast<size_t>(i)] < 0 || edge[static_cast<size_t>(i)] >= bins) {
      throw UserError("MelWeightMatrix: upper_edge_hertz " + std::to_string(hi) +
                      " lies past the Nyquist bin of a " + std::to_string(dft_length) +
                      "-point DFT at " + std::to_string(rate) + " Hz");
    }
  }
  std::vector<double> w(static_cast<size_t>(bins * bands), 0.0);
  auto at = [&](int64_t bin, int64_t band) -> double& {
    return w[static_cast<size_t>(bin * bands + band)];
  };
  for (int64_t b = 0; b < bands; ++b) {
    const int64_t left = edge[static_cast<size_t>(b)], centre = edge[static_cast<size_t>(b + 1)],
                  right = edge[static_cast<size_t>(b + 2)];
    if (centre == left) {
      at(centre, b) = 1;
    } else {
      for (int64_t j = left; j <= centre; ++j)
        at(j, b) = static_cast<double>(j - left) / static_cast<double>(centre - left);
    }
    for (int64_t j = centre; j < right; ++j)
      at(j, b) = static_cast<double>(right - j) / static_cast<double>(right - centre);
  }
  return Outs{constant(im.graph(),
                       Tensor::from_doubles(output_dtype(a, "MelWeightMatrix"), {bins, bands}, w))};
}

Outs convert_dft(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  int64_t length = 0;
  if (OnnxImporter::has_input(n, 1)) {
    length = scalar_int(im, n, 1, "dft_length");
    if (length < 1) throw UserError("dft_length must be >= 1, got " + std::to_string(length));
  }
  int64_t axis = attr_int(a, "axis", 1);
  if (im.opset() >= 20) {
    axis = OnnxImporter::has_input(n, 2) ? scalar_int(im, n, 2, "axis") : -2;
  }
  return Outs{apply("dft", {x},
                    {{"axis", axis},
                     {"inverse", attr_int(a, "inverse", 0)},
                     {"onesided", attr_int(a, "onesided", 0)},
                     {"length", length}})};
}

Outs convert_stft(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var signal = im.in(n, 0);
  // (batch, length) is a real signal too: PyTorch's exporter writes torch.stft so, and
  // onnxruntime takes it.
  if (signal.rank() == 2) signal = apply("reshape", {signal}, {{"shape", Ints{0, 0, 1}}});
  const TensorType st = signal.type();
  if (st.rank() != 3 || (st.dims[2] != 1 && st.dims[2] != 2)) {
    throw UserError("STFT needs a signal (batch, length, 1 or 2), got " + st.to_string());
  }
  if (st.dims[1] == kDynamic)
    throw UnsupportedError("STFT of a signal of dynamic length (frames are gathered statically)");
  if (st.dtype != DType::kFloat32 && st.dtype != DType::kFloat64)
    throw UnsupportedError("STFT of " + st.to_string() + " (float32 and float64 are supported)");
  const bool complex_in = st.dims[2] == 2;
  const int64_t step = scalar_int(im, n, 1, "frame_step");
  std::optional<Var> window;
  const Tensor* window_value = nullptr;
  if (OnnxImporter::has_input(n, 2)) {
    window = im.in(n, 2);
    if (window->rank() != 1)
      throw UserError("STFT's window must be 1-D, got " + window->type().to_string());
    window_value = im.known(n.input(2));
  }
  int64_t len = 0;
  if (OnnxImporter::has_input(n, 3)) {
    len = scalar_int(im, n, 3, "frame_length");
  } else if (window) {
    len = window->type().dims[0];
  } else {
    throw UserError("STFT needs a window or a frame_length");
  }
  if (window && window->type().dims[0] != len) {
    throw UserError("STFT's window has " + std::to_string(window->type().dims[0]) +
                    " points for frames of " + std::to_string(len));
  }
  const int64_t L = st.dims[1];
  if (step < 1 || len < 1 || len > L) {
    throw UserError("STFT needs frame_step >= 1 and 1 <= frame_length <= the signal's " +
                    std::to_string(L) + " points, got " + std::to_string(step) + " and " +
                    std::to_string(len));
  }
  const bool onesided = attr_int(a, "onesided", 1) != 0;
  if (onesided && complex_in) throw UserError("STFT: a one-sided transform of a complex signal");
  const int64_t frames = (L - len) / step + 1, bins = onesided ? len / 2 + 1 : len;
  // Frame f's points: signal[f * step + j] (batch, frames, len, 1 or 2).
  std::vector<double> idx(static_cast<size_t>(frames * len));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < len; ++j)
      idx[static_cast<size_t>(f * len + j)] = static_cast<double>(f * step + j);
  Var framed =
      apply("gather",
            {signal, constant(im.graph(), Tensor::from_doubles(DType::kInt64, {frames, len}, idx))},
            {{"axis", int64_t{1}}});
  const int64_t B = st.dims[0];
  const int64_t comps = complex_in ? 2 : 1;
  if (window && !window_value) {
    framed = framed * reshape(cast(*window, st.dtype), {len, 1});
  }
  if (len > kMaxGemmFrame) {
    return Outs{apply("dft", {framed}, {{"axis", int64_t{2}}, {"onesided", int64_t{onesided}}})};
  }
  // The DFT's matrix: row (j, part) of the frame's points, column (bin, re | im).
  std::vector<double> basis(static_cast<size_t>(len * comps * bins * 2));
  const long double two_pi = 2.0L * std::numbers::pi_v<long double>;
  for (int64_t j = 0; j < len; ++j) {
    const double w = window_value ? window_value->load(j) : 1.0;
    for (int64_t k = 0; k < bins; ++k) {
      const long double t =
          two_pi * static_cast<long double>((j * k) % len) / static_cast<long double>(len);
      const double c = static_cast<double>(std::cos(t)) * w,
                   s = static_cast<double>(std::sin(t)) * w;
      // (xr + i xi)(c - i s) = xr c + xi s + i (xi c - xr s)
      const size_t row = static_cast<size_t>(j * comps);
      basis[(row * static_cast<size_t>(bins) + static_cast<size_t>(k)) * 2] = c;
      basis[(row * static_cast<size_t>(bins) + static_cast<size_t>(k)) * 2 + 1] = -s;
      if (complex_in) {
        basis[((row + 1) * static_cast<size_t>(bins) + static_cast<size_t>(k)) * 2] = s;
        basis[((row + 1) * static_cast<size_t>(bins) + static_cast<size_t>(k)) * 2 + 1] = c;
      }
    }
  }
  Var m = constant(im.graph(), Tensor::from_doubles(st.dtype, {len * comps, bins * 2}, basis));
  Var y = matmul(reshape(framed, {B, frames, len * comps}), m);
  return Outs{reshape(y, {B, frames, bins, 2})};
}

}  // namespace

void add_signal_ops(OpTable& t) {
  for (const char* kind : {"hann", "hamming", "blackman"}) {
    const std::string name =
        std::string(1, static_cast<char>(std::toupper(kind[0]))) + (kind + 1) + "Window";
    const std::string k = kind;
    t[name] = {{"output_datatype", "periodic"},
               nullptr,
               [k](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                 return convert_window(im, n, a, k);
               }};
  }
  t["MelWeightMatrix"] = {{"output_datatype"}, nullptr, convert_mel};
  t["DFT"] = {{"axis", "inverse", "onesided"}, nullptr, convert_dft};
  t["STFT"] = {{"onesided"}, nullptr, convert_stft};
}

}  // namespace kiln::onnx_import
