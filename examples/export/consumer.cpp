// A C++ program using a model exported with `kiln export`: the C API behind a small RAII
// wrapper. Build (MODEL = the export's --name):
//   c++ -std=c++17 -DMODEL=mlp -DMODEL_H='"mlp.h"' -I DIR consumer.cpp -L DIR -lmlp -Wl,-rpath,DIR
// Run: consumer INPUT.npy... [-- EXPECTED.npy...], as the C consumer.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include MODEL_H
#include "npy_io.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define API(f) CAT(MODEL, f)

namespace {

using Tensor = API(_tensor);

// An output the library allocated, released through it.
struct Output {
  Tensor t{};
  Output() = default;
  Output(const Output&) = delete;
  ~Output() { API(_free_output)(&t); }
  size_t count() const { return npy_count(t.shape, t.ndim); }
  double at(size_t i) const {
    switch (t.dtype) {
      case API(_FLOAT32):
        return static_cast<const float*>(t.data)[i];
      case API(_FLOAT64):
        return static_cast<const double*>(t.data)[i];
      case API(_INT64):
        return static_cast<double>(static_cast<const int64_t*>(t.data)[i]);
      case API(_INT32):
        return static_cast<const int32_t*>(t.data)[i];
      default:
        return static_cast<const uint8_t*>(t.data)[i];
    }
  }
};

class Model {
 public:
  Model() : m_(API(_create)(nullptr), &API(_destroy)) {
    if (!m_) throw std::runtime_error(std::string("create: ") + API(_last_error)());
  }
  std::vector<Output> run(const std::vector<Tensor>& inputs) {
    std::vector<Output> outs(API(_NUM_OUTPUTS));
    std::vector<Tensor> raw(outs.size());
    if (API(_run)(m_.get(), inputs.data(), inputs.size(), raw.data(), raw.size()) != 0) {
      throw std::runtime_error(std::string("run: ") + API(_last_error)());
    }
    for (size_t i = 0; i < raw.size(); ++i) outs[i].t = raw[i];
    return outs;
  }

 private:
  std::unique_ptr<API(_model), void (*)(API(_model)*)> m_;
};

std::unique_ptr<npy_array, void (*)(npy_array*)> read(const char* path) {
  std::unique_ptr<npy_array, void (*)(npy_array*)> a(new npy_array{}, [](npy_array* p) {
    std::free(p->data);
    delete p;
  });
  char err[512];
  if (npy_read(path, a.get(), err, sizeof err)) throw std::runtime_error(err);
  return a;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> args(argv + 1, argv + argc);
  size_t sep = args.size();
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--") sep = i;
  if (sep != API(_NUM_INPUTS)) {
    std::fprintf(stderr, "the model takes %d inputs\n", static_cast<int>(API(_NUM_INPUTS)));
    return 2;
  }
  Model model;
  std::vector<std::unique_ptr<npy_array, void (*)(npy_array*)>> arrays;
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < sep; ++i) {
    arrays.push_back(read(args[i].c_str()));
    Tensor t{};
    t.data = arrays.back()->data;
    t.ndim = arrays.back()->ndim;
    t.dtype = API(_input_dtype)(i);
    std::memcpy(t.shape, arrays.back()->shape, sizeof t.shape);
    inputs.push_back(t);
  }
  std::vector<Output> outs = model.run(inputs);
  bool failed = false;
  for (size_t o = 0; o < outs.size(); ++o) {
    std::printf("%s: rank %d, %zu elements", API(_output_name)(o), static_cast<int>(outs[o].t.ndim),
                outs[o].count());
    if (sep + 1 + o < args.size()) {
      auto want = read(args[sep + 1 + o].c_str());
      if (npy_count(want->shape, want->ndim) != outs[o].count()) {
        std::printf(", expected %zu elements\n", npy_count(want->shape, want->ndim));
        failed = true;
        continue;
      }
      Output expected;  // the expected values read through the same accessor
      expected.t = outs[o].t;
      expected.t.data = want->data;
      double worst = 0;  // the largest |got - want|
      for (size_t k = 0; k < outs[o].count(); ++k) {
        const double a = outs[o].at(k), b = expected.at(k);
        const double diff = std::fabs(a - b);
        if (!(diff <= worst)) worst = diff;
        if (!(diff <= 1e-5 + 1e-4 * std::fabs(b)) && !(std::isnan(a) && std::isnan(b)) && a != b)
          failed = true;
      }
      expected.t.data = nullptr;  // not the library's to free
      std::printf(", max |difference| %g", worst);
    }
    std::printf("\n");
  }
  std::printf(failed ? "MISMATCH\n" : "OK\n");
  return failed ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
