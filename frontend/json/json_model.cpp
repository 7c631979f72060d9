#include "frontend/json/json_model.h"

#include <map>
#include <nlohmann/json.hpp>

#include "frontend/model_files.h"
#include "ops/builders.h"
#include "ops/registry.h"
#include "rewrite/autodiff/grad.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json_text.h"

namespace kiln {
namespace {

using json = nlohmann::json;

class Loader {
 public:
  Loader(std::string origin, std::filesystem::path base)
      : origin_(std::move(origin)), base_(std::move(base)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw UserError(origin_ + ": " + path + ": " + what);
  }

  const json& field(const json& obj, const std::string& path, const char* key,
                    bool required = true) const {
    static const json kNull;
    if (!obj.is_object()) fail(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) fail(path == "(root)" ? std::string(key) : path + "." + key, "missing");
      return kNull;
    }
    return *it;
  }

  std::string string_at(const json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a string, got " + std::string(j.type_name()));
    return j.get<std::string>();
  }

  DType dtype_at(const json& j, const std::string& path) const {
    std::string name = string_at(j, path);
    auto dt = dtype_from_name(name);
    if (!dt) fail(path, "unknown dtype '" + name + "'");
    return *dt;
  }

  std::vector<int64_t> shape_at(const json& j, const std::string& path) const {
    if (!j.is_array()) fail(path, "expected an array of dimensions");
    std::vector<int64_t> dims;
    for (size_t i = 0; i < j.size(); ++i) {
      const json& d = j[i];
      std::string p = path + "[" + std::to_string(i) + "]";
      if (d.is_null() || (d.is_string() && d.get<std::string>() == "?")) {
        dims.push_back(kDynamic);
      } else if (d.is_number_integer() && d.get<int64_t>() >= -1) {
        dims.push_back(d.get<int64_t>());
      } else {
        fail(p, "expected a dimension (integer >= 0, or null / \"?\" for dynamic)");
      }
    }
    return dims;
  }

  AttrValue attr_at(const json& j, const std::string& path) const {
    if (j.is_boolean()) return int64_t(j.get<bool>() ? 1 : 0);
    if (j.is_number_integer()) return j.get<int64_t>();
    if (j.is_number_float()) return j.get<double>();
    if (j.is_string()) return j.get<std::string>();
    if (j.is_array()) {
      bool all_int = true;
      for (size_t i = 0; i < j.size(); ++i) {
        if (!j[i].is_number()) fail(path + "[" + std::to_string(i) + "]", "expected a number");
        all_int = all_int && j[i].is_number_integer();
      }
      if (all_int) return j.get<std::vector<int64_t>>();
      return j.get<std::vector<double>>();
    }
    fail(path, "expected a number, string or list of numbers, got " + std::string(j.type_name()));
  }

  Graph load(const std::string& text) {
    json doc;
    try {
      doc = parse_untrusted_json(text, origin_, 64);
    } catch (const JsonError& e) {
      throw UserError(origin_ + ": byte " + std::to_string(e.offset()) +
                      ": invalid JSON: " + e.reason());
    }
    if (!doc.is_object()) fail("(root)", "expected an object");
    const json& fmt = field(doc, "(root)", "format", false);
    if (!fmt.is_null() && fmt != "kiln-graph") fail("format", "expected \"kiln-graph\"");
    const json& version = field(doc, "(root)", "version", false);
    if (!version.is_null() && version != 1)
      fail("version", "unsupported version (this kiln reads 1)");
    const json& name = field(doc, "(root)", "name", false);
    Graph g(name.is_null() ? std::string("model") : string_at(name, "name"));

    const json& inputs = field(doc, "(root)", "inputs");
    if (!inputs.is_array()) fail("inputs", "expected an array");
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string p = "inputs[" + std::to_string(i) + "]";
      std::string n = string_at(field(inputs[i], p, "name"), p + ".name");
      DType dt = dtype_at(field(inputs[i], p, "dtype"), p + ".dtype");
      auto dims = shape_at(field(inputs[i], p, "shape"), p + ".shape");
      if (g.find_variable(n)) fail(p + ".name", "name '" + n + "' is already used");
      g.add_input(n, TensorType{dt, dims});
    }

    const json& params = field(doc, "(root)", "parameters", false);
    if (!params.is_null()) {
      if (!params.is_array()) fail("parameters", "expected an array");
      for (size_t i = 0; i < params.size(); ++i) {
        std::string p = "parameters[" + std::to_string(i) + "]";
        std::string n = string_at(field(params[i], p, "name"), p + ".name");
        if (g.find_variable(n)) fail(p + ".name", "name '" + n + "' is already used");
        // A weight read from a file is a parameter (bound at run time, never in the code or
        // the cache key); a value written in the model is a constant of the program.
        Tensor value = parameter_value(params[i], p, n);
        if (field(params[i], p, "file", false).is_null()) {
          g.add_constant(value, n);
        } else {
          g.add_parameter(value, n);
        }
      }
    }

    const json& nodes = field(doc, "(root)", "nodes");
    if (!nodes.is_array()) fail("nodes", "expected an array");
    for (size_t i = 0; i < nodes.size(); ++i)
      load_node(g, nodes[i], "nodes[" + std::to_string(i) + "]");

    const json& gradients = field(doc, "(root)", "gradients", false);
    if (!gradients.is_null()) {
      if (!gradients.is_array()) fail("gradients", "expected an array");
      for (size_t i = 0; i < gradients.size(); ++i)
        load_gradient(g, gradients[i], "gradients[" + std::to_string(i) + "]");
    }

    const json& outputs = field(doc, "(root)", "outputs");
    if (!outputs.is_array() || outputs.empty())
      fail("outputs", "expected a non-empty array of names");
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string p = "outputs[" + std::to_string(i) + "]";
      std::string n = string_at(outputs[i], p);
      Variable* v = g.find_variable(n);
      if (!v) fail(p, "unknown variable '" + n + "'");
      g.add_output(v);
    }
    return g;
  }

 private:
  Tensor parameter_value(const json& spec, const std::string& p, const std::string& name) {
    const json& file = field(spec, p, "file", false);
    const json& value = field(spec, p, "value", false);
    if (file.is_null() == value.is_null()) {
      fail(p, "give exactly one of \"file\" (a .npy or .safetensors path) or \"value\"");
    }
    const json& tensor = field(spec, p, "tensor", false);
    Tensor t;
    if (!file.is_null()) {
      // A model may be someone else's: its files stay inside its folder (the rule ONNX
      // external data follows), regular files only.
      std::filesystem::path f;
      try {
        f = file_beside_model(base_, string_at(file, p + ".file"), "");
      } catch (const UserError& e) {
        fail(p + ".file", e.what());
      }
      if (!tensor.is_null() && !is_safetensors_path(f)) {
        fail(p + ".tensor", "only a .safetensors file holds named tensors");
      }
      try {
        if (is_safetensors_path(f)) {
          // One mapping per file, however many parameters it holds.
          auto& held = safetensors_[f.string()];
          if (held.tensors.empty()) held = read_safetensors(f);
          t = tensor.is_null() ? held.at(name, f.string())
                               : held.at(string_at(tensor, p + ".tensor"), f.string());
        } else {
          t = read_npy(f);
        }
      } catch (const UserError& e) {
        fail(p + ".file", e.what());
      }
    } else {
      const json& dtj = field(spec, p, "dtype", false);
      DType dt = dtj.is_null() ? DType::kFloat32 : dtype_at(dtj, p + ".dtype");
      std::vector<double> values;
      std::vector<int64_t> shape;
      if (value.is_number() || value.is_boolean()) {
        values.push_back(value.get<double>());
      } else if (value.is_array()) {
        for (size_t k = 0; k < value.size(); ++k) {
          if (!value[k].is_number())
            fail(p + ".value[" + std::to_string(k) + "]", "expected a number");
          values.push_back(value[k].get<double>());
        }
        shape = {static_cast<int64_t>(values.size())};
      } else {
        fail(p + ".value", "expected a number or a flat list of numbers");
      }
      const json& sj = field(spec, p, "shape", false);
      if (!sj.is_null()) {
        shape = shape_at(sj, p + ".shape");
        for (int64_t d : shape) {
          if (d < 0) fail(p + ".shape", "a parameter's shape must be fully known");
        }
        auto nbytes = checked_nbytes(shape, DType::kInt8);
        if (!nbytes) fail(p + ".shape", "has more elements than fit in 64 bits");
        if (*nbytes != values.size()) {
          fail(p + ".shape", "holds " + std::to_string(*nbytes) + " elements but value has " +
                                 std::to_string(values.size()));
        }
      }
      t = Tensor::from_doubles(dt, shape, values);
    }
    const json& dtj = field(spec, p, "dtype", false);
    if (!dtj.is_null() && dtype_at(dtj, p + ".dtype") != t.dtype()) {
      fail(p + ".dtype", "says " + string_at(dtj, p + ".dtype") + " but the data is " +
                             std::string(dtype_name(t.dtype())));
    }
    return t;
  }

  // {"cost": NAME, "wrt": [NAME, ...], "outputs": [NAME, ...]}: reverse-mode gradients of
  // the scalar cost (rewrite/autodiff/grad.h), named for later use (outputs, nodes after them).
  void load_gradient(Graph& g, const json& spec, const std::string& p) const {
    const std::string cost_name = string_at(field(spec, p, "cost"), p + ".cost");
    Variable* cost = g.find_variable(cost_name);
    if (!cost) fail(p + ".cost", "unknown variable '" + cost_name + "'");
    const json& wj = field(spec, p, "wrt");
    const json& oj = field(spec, p, "outputs");
    if (!wj.is_array() || wj.empty()) fail(p + ".wrt", "expected a non-empty array of names");
    if (!oj.is_array() || oj.size() != wj.size())
      fail(p + ".outputs", "expected one name per wrt entry");
    std::vector<Variable*> wrt;
    for (size_t k = 0; k < wj.size(); ++k) {
      const std::string wp = p + ".wrt[" + std::to_string(k) + "]";
      const std::string n = string_at(wj[k], wp);
      Variable* v = g.find_variable(n);
      if (!v) fail(wp, "unknown variable '" + n + "'");
      wrt.push_back(v);
    }
    std::vector<Variable*> grads;
    try {
      grads = grad(g, cost, wrt);
    } catch (const UserError& e) {
      fail(p, e.what());
    }
    for (size_t k = 0; k < grads.size(); ++k) {
      const std::string op = p + ".outputs[" + std::to_string(k) + "]";
      const std::string n = string_at(oj[k], op);
      if (g.find_variable(n)) fail(op, "name '" + n + "' is already used");
      // A gradient that is an existing value (the seed, an input) gets a copy to carry the name.
      Variable* v = grads[k];
      if (v->kind != VarKind::kNodeOutput || v == cost) v = reshape(Var(&g, v), v->type.dims).var();
      g.rename(v, n);
    }
  }

  void load_node(Graph& g, const json& spec, const std::string& p) const {
    std::string op = string_at(field(spec, p, "op"), p + ".op");
    const json& nj = field(spec, p, "name", false);
    std::string node_name = nj.is_null() ? "" : string_at(nj, p + ".name");
    const json& ins = field(spec, p, "inputs");
    if (!ins.is_array()) fail(p + ".inputs", "expected an array of names");
    std::vector<Variable*> inputs;
    for (size_t k = 0; k < ins.size(); ++k) {
      std::string ip = p + ".inputs[" + std::to_string(k) + "]";
      std::string n = string_at(ins[k], ip);
      Variable* v = g.find_variable(n);
      if (!v) fail(ip, "unknown variable '" + n + "' (defined nowhere before this node)");
      inputs.push_back(v);
    }
    const json& outs = field(spec, p, "outputs");
    if (!outs.is_array() || outs.empty())
      fail(p + ".outputs", "expected a non-empty array of names");
    std::vector<std::string> out_names;
    for (size_t k = 0; k < outs.size(); ++k) {
      std::string n = string_at(outs[k], p + ".outputs[" + std::to_string(k) + "]");
      if (g.find_variable(n))
        fail(p + ".outputs[" + std::to_string(k) + "]", "name '" + n + "' is already used");
      out_names.push_back(n);
    }
    Attrs attrs;
    const json& aj = field(spec, p, "attrs", false);
    if (!aj.is_null()) {
      if (!aj.is_object()) fail(p + ".attrs", "expected an object");
      for (auto it = aj.begin(); it != aj.end(); ++it) {
        attrs[it.key()] = attr_at(it.value(), p + ".attrs." + it.key());
      }
    }
    std::shared_ptr<const Op> created;
    try {
      created = OpRegistry::instance().create(op, attrs);
    } catch (const AttrError& e) {
      fail(p + ".attrs." + e.attr(), e.detail());
    } catch (const UserError& e) {
      fail(p + ".op", e.what());
    }
    Node* node;
    try {
      node = g.add_node(created, inputs, node_name, out_names);
    } catch (const UserError& e) {
      fail(p, e.what());
    }
    if (node->outputs.size() != out_names.size()) {
      fail(p + ".outputs", "op '" + op + "' has " + std::to_string(node->outputs.size()) +
                               " outputs, " + std::to_string(out_names.size()) + " names given");
    }
  }

  std::string origin_;
  std::filesystem::path base_;
  std::map<std::string, Safetensors> safetensors_;  // by path: files parameters read
};

}  // namespace

Graph parse_json_model(const std::string& text, const std::string& origin,
                       const std::filesystem::path& base_dir) {
  return Loader(origin, base_dir).load(text);
}

Graph load_json_model(const std::filesystem::path& path) {
  return parse_json_model(read_file(path), path.string(), path.parent_path());
}

}  // namespace kiln
