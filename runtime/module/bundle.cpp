#include "runtime/module/bundle.h"

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <unordered_map>

#include "runtime/engine/default_engine.h"
#include "runtime/io/safetensors.h"
#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

// Where the library holding `anchor` was loaded from.
std::filesystem::path library_folder(const void* anchor) {
  Dl_info info{};
  if (!anchor || ::dladdr(anchor, &info) == 0 || !info.dli_fname) return {};
  return std::filesystem::absolute(info.dli_fname).parent_path();
}

Safetensors load_weights(const kiln_bundle_image& image, const char* weights_path,
                         std::string& origin) {
  if (!weights_path && image.weights) {
    origin = std::string(image.name) + " (embedded weights)";
    void* bytes = const_cast<void*>(image.weights);
    auto storage = std::make_shared<Storage>(
        bytes, image.weights_size, [](void*) {}, false);
    return parse_safetensors(storage, origin);
  }
  std::filesystem::path path;
  if (weights_path) {
    path = weights_path;
  } else {
    if (!image.weights_file) throw UserError(std::string(image.name) + ": no weights file named");
    path = library_folder(image.anchor) / image.weights_file;
  }
  origin = path.string();
  if (!std::filesystem::exists(path)) {
    throw UserError("weights file '" + origin + "' does not exist (model " + image.name + ")");
  }
  return read_safetensors(path);
}

}  // namespace

Bundle::Bundle(const kiln_bundle_image& image, const char* weights_path) : name_(image.name) {
  description_ =
      BundleDescription::parse(std::string_view(image.description, image.description_size), name_);
  std::string origin;
  Safetensors weights = load_weights(image, weights_path, origin);
  auto id = weights.metadata.find("kiln.bundle");
  if (id == weights.metadata.end()) {
    throw UserError("'" + origin +
                    "' is not the weights of a model kiln exported (no kiln.bundle id)");
  }
  if (id->second != image.id) {
    auto other = weights.metadata.find("kiln.name");
    throw UserError("'" + origin + "' holds the weights of model '" +
                    (other == weights.metadata.end() ? std::string("?") : other->second) +
                    "' (id " + id->second.substr(0, 16) + "), not of " + name_ + " (id " +
                    std::string(image.id).substr(0, 16) + ")");
  }
  std::map<std::string, Tensor> by_name;
  for (auto& [n, t] : weights.tensors) by_name.emplace(n, std::move(t));
  Program program;
  try {
    program = description_.program(by_name);
  } catch (const UserError& e) {
    throw UserError("'" + origin + "': " + e.what());
  }
  auto entry = reinterpret_cast<kiln_module_fn>(image.module);
  auto module = Module::from_entry(entry, name_);
  executor_ = std::make_shared<Executor>(
      std::move(module), std::make_shared<const Program>(std::move(program)), &default_engine());
}

std::vector<Tensor> Bundle::run(const std::vector<Tensor>& inputs) {
  if (!description_.ties.empty()) {
    std::vector<Shape> shapes;
    for (const auto& t : inputs) shapes.push_back(t.shape());
    description_.check_ties(shapes);
  }
  // The executor copies an output that is a weight, an input or another output: the C API
  // promises outputs the library allocated for the caller.
  return executor_->run(inputs);
}

namespace {

thread_local std::string last_error;

// Output tensors handed to the caller, by data address, until freed.
struct Outputs {
  std::mutex mutex;
  std::unordered_multimap<void*, std::shared_ptr<Storage>> held;
};
Outputs& outputs() {
  static Outputs* o = new Outputs();  // never destroyed: outputs may be freed at exit
  return *o;
}

template <class F>
int guarded(F&& f) {
  try {
    f();
    last_error.clear();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown error";
  }
  return 1;
}

}  // namespace
}  // namespace kiln

using kiln::Bundle;
using kiln::Tensor;

extern "C" {

void* kiln_bundle_create(const kiln_bundle_image* image, const char* weights_path) {
  Bundle* made = nullptr;
  kiln::guarded([&] {
    if (!image) throw kiln::UserError("no model image");
    made = new Bundle(*image, weights_path);
  });
  return made;
}

int kiln_bundle_run(void* bundle, const kiln_bundle_tensor* inputs, size_t n_inputs,
                    kiln_bundle_tensor* outputs, size_t n_outputs) {
  return kiln::guarded([&] {
    if (!bundle) throw kiln::UserError("run: no model (create failed?)");
    auto* b = static_cast<Bundle*>(bundle);
    const auto& d = b->description();
    if (n_inputs != d.input_slots.size()) {
      throw kiln::UserError(b->name() + ": expected " + std::to_string(d.input_slots.size()) +
                            " inputs, got " + std::to_string(n_inputs));
    }
    if (n_outputs != d.output_slots.size()) {
      throw kiln::UserError(b->name() + ": expected room for " +
                            std::to_string(d.output_slots.size()) + " outputs, got " +
                            std::to_string(n_outputs));
    }
    if ((n_inputs && !inputs) || (n_outputs && !outputs))
      throw kiln::UserError("run: NULL tensor array");
    std::vector<Tensor> in;
    for (size_t i = 0; i < n_inputs; ++i) {
      const kiln_bundle_tensor& t = inputs[i];
      const std::string what =
          "input " + std::to_string(i) + " ('" + d.slots[d.input_slots[i]].name + "')";
      if (t.ndim < 0 || t.ndim > KILN_BUNDLE_MAX_DIMS) {
        throw kiln::UserError(what + ": rank " + std::to_string(t.ndim) + " is out of range");
      }
      if (t.dtype < 0 || t.dtype > static_cast<int32_t>(kiln::DType::kUInt64)) {
        throw kiln::UserError(what + ": unknown dtype code " + std::to_string(t.dtype));
      }
      kiln::Shape shape(t.shape, t.shape + t.ndim);
      for (int64_t s : shape)
        if (s < 0) throw kiln::UserError(what + ": negative dimension " + std::to_string(s));
      const auto dtype = static_cast<kiln::DType>(t.dtype);
      auto bytes = kiln::checked_nbytes(shape, dtype);
      if (!bytes)
        throw kiln::UserError(what + ": shape " + kiln::dims_to_string(shape) + " is too large");
      if (*bytes && !t.data) throw kiln::UserError(what + ": data is NULL");
      auto storage = std::make_shared<kiln::Storage>(
          t.data, *bytes, [](void*) {}, false);
      in.emplace_back(storage, 0, dtype, shape, kiln::contiguous_strides(shape));
    }
    std::vector<Tensor> out = b->run(in);
    auto& held = kiln::outputs();
    std::lock_guard<std::mutex> lock(held.mutex);
    for (size_t i = 0; i < out.size(); ++i) {
      Tensor t = out[i].is_contiguous() ? out[i] : out[i].contiguous();
      if (t.ndim() > KILN_BUNDLE_MAX_DIMS) throw kiln::InternalError("output rank over the limit");
      kiln_bundle_tensor& o = outputs[i];
      std::memset(&o, 0, sizeof o);
      o.data = t.data();
      o.ndim = t.ndim();
      o.dtype = static_cast<int32_t>(t.dtype());
      for (int k = 0; k < t.ndim(); ++k) o.shape[k] = t.shape()[k];
      held.held.emplace(o.data, t.storage());
    }
  });
}

void kiln_bundle_free_output(kiln_bundle_tensor* output) {
  if (!output || !output->data) return;
  auto& held = kiln::outputs();
  std::lock_guard<std::mutex> lock(held.mutex);
  auto it = held.held.find(output->data);
  if (it != held.held.end()) held.held.erase(it);
  output->data = nullptr;
}

void kiln_bundle_destroy(void* bundle) { delete static_cast<Bundle*>(bundle); }

const char* kiln_bundle_error(void) { return kiln::last_error.c_str(); }

}  // extern "C"
