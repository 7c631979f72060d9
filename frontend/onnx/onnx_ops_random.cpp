// The ONNX importer's random ops: RandomUniform, RandomNormal, their Like forms, Bernoulli,
// Multinomial and training-mode Dropout, all kiln's Philox-keyed ops (ops/random.h). An op's stream
// is a hash of its first output's name (stable across loads and unique within a graph), so ops that
// share a seed draw different numbers; an op without a seed takes 0.
#include <onnx/onnx_pb.h>

#include <cstring>

#include "frontend/onnx/onnx_op_support.h"
#include "frontend/onnx/onnx_tensor.h"
#include "util/error.h"

namespace kiln::onnx_import {
namespace {

int64_t stream_of(const onnx::NodeProto& n) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : n.output(0)) h = (h ^ c) * 16777619u;
  return h;
}

// ONNX's float seed as a 64-bit key: its bits, so every distinct seed is a distinct key.
int64_t seed_of(const Attrs& a) {
  if (!a.count("seed")) return 0;
  const double s = attr_float(a, "seed", 0.0);
  int64_t bits = 0;
  std::memcpy(&bits, &s, sizeof bits);
  return bits;
}

std::string dtype_attr(const Attrs& a, DType fallback, const std::string& what) {
  if (!a.count("dtype")) return std::string(dtype_name(fallback));
  const auto dt = dtype_from_onnx(static_cast<int>(attr_int(a, "dtype")));
  if (!dt || (*dt != DType::kFloat32 && *dt != DType::kFloat64 && what == "random")) {
    throw UnsupportedError(what + " of dtype " +
                           onnx_dtype_name(static_cast<int>(attr_int(a, "dtype"))) +
                           " (FLOAT and DOUBLE are supported)");
  }
  return std::string(dtype_name(*dt));
}

Outs convert_random(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a, bool normal,
                    bool like) {
  Attrs p{{"seed", seed_of(a)}, {"stream", stream_of(n)}};
  if (normal) {
    p["mean"] = attr_float(a, "mean", 0.0);
    p["scale"] = attr_float(a, "scale", 1.0);
  } else {
    p["low"] = attr_float(a, "low", 0.0);
    p["high"] = attr_float(a, "high", 1.0);
  }
  const char* op = normal ? "random_normal" : "random_uniform";
  if (like) {
    Var x = im.in(n, 0);
    p["dtype"] = dtype_attr(a, is_float(x.dtype()) ? x.dtype() : DType::kFloat32, "random");
    return Outs{apply(op, {x}, p)};
  }
  p["dtype"] = dtype_attr(a, DType::kFloat32, "random");
  p["shape"] = attr_ints(a, "shape");
  return Outs{apply_in(im.graph(), op, {}, p)};
}

}  // namespace

Outs convert_training_dropout(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
  Var x = im.in(n, 0);
  Attrs p{{"seed", seed_of(a)}, {"stream", stream_of(n)}};
  std::vector<Var> ins{x};
  if (OnnxImporter::has_input(n, 1)) {
    if (const Tensor* r = im.known(n.input(1))) {
      p["ratio"] = r->load(0);
    } else {
      ins.push_back(im.in(n, 1));
    }
  }
  std::vector<Var> outs = apply_multi("dropout_train", ins, p);
  Outs result{outs[0]};
  if (n.output_size() > 1 && !n.output(1).empty()) result.push_back(outs[1]);
  return result;
}

void add_random_ops(OpTable& t) {
  t["RandomUniform"] = {{"dtype", "high", "low", "seed", "shape"},
                        nullptr,
                        [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                          return convert_random(im, n, a, false, false);
                        }};
  t["RandomNormal"] = {{"dtype", "mean", "scale", "seed", "shape"},
                       nullptr,
                       [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                         return convert_random(im, n, a, true, false);
                       }};
  t["RandomUniformLike"] = {{"dtype", "high", "low", "seed"},
                            nullptr,
                            [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                              return convert_random(im, n, a, false, true);
                            }};
  t["RandomNormalLike"] = {{"dtype", "mean", "scale", "seed"},
                           nullptr,
                           [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                             return convert_random(im, n, a, true, true);
                           }};
  t["Multinomial"] = {{"dtype", "sample_size", "seed"},
                      nullptr,
                      [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
                        Var x = im.in(n, 0);
                        Attrs p{{"seed", seed_of(a)},
                                {"stream", stream_of(n)},
                                {"dtype", dtype_attr(a, DType::kInt32, "Multinomial")},
                                {"sample_size", attr_int(a, "sample_size", 1)}};
                        return Outs{apply("multinomial", {x}, p)};
                      }};
  t["Bernoulli"] = {
      {"dtype", "seed"}, nullptr, [](OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a) {
        Var x = im.in(n, 0);
        Attrs p{{"seed", seed_of(a)},
                {"stream", stream_of(n)},
                {"dtype", dtype_attr(a, x.dtype(), "Bernoulli")}};
        return Outs{apply("bernoulli", {x}, p)};
      }};
}

}  // namespace kiln::onnx_import
