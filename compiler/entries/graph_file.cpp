#include "compiler/entries/graph_file.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "compiler/value_digest.h"
#include "ops/registry.h"
#include "util/error.h"

namespace kiln {

namespace {

using Json = nlohmann::json;

// Doubles as C99 hex floats: exact, with -0.0, inf and nan (JSON numbers have neither).
std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

double from_exact(const Json& j) {
  const std::string s = j.get<std::string>();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') throw UserError("'" + s + "' is not a number");
  return v;
}

Json attr_json(const AttrValue& v) {
  Json j;
  if (const auto* i = std::get_if<int64_t>(&v)) {
    j["i"] = *i;
  } else if (const auto* d = std::get_if<double>(&v)) {
    j["f"] = exact(*d);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    j["s"] = *s;
  } else if (const auto* is = std::get_if<std::vector<int64_t>>(&v)) {
    j["is"] = *is;
  } else {
    Json fs = Json::array();
    for (double d : std::get<std::vector<double>>(v)) fs.push_back(exact(d));
    j["fs"] = fs;
  }
  return j;
}

AttrValue attr_value(const Json& j) {
  if (j.contains("i")) return j.at("i").get<int64_t>();
  if (j.contains("f")) return from_exact(j.at("f"));
  if (j.contains("s")) return j.at("s").get<std::string>();
  if (j.contains("is")) return j.at("is").get<std::vector<int64_t>>();
  std::vector<double> out;
  for (const Json& d : j.at("fs")) out.push_back(from_exact(d));
  return out;
}

std::string tensor_name(const Variable* v) { return "t" + std::to_string(v->id); }

}  // namespace

std::optional<GraphFiles> graph_files(const Graph& graph) {
  GraphFiles out;
  Json steps = Json::array();
  int next_node = 0;
  for (const auto& owned : graph.variables()) {
    const Variable* v = owned.get();
    if (v->recipe || v->on_device) return std::nullopt;
    if (v->kind == VarKind::kInput) {
      steps.push_back(Json{{"input", v->name},
                           {"dtype", std::string(dtype_name(v->type.dtype))},
                           {"dims", v->type.dims}});
    } else if (v->kind == VarKind::kConstant) {
      if (!v->value) return std::nullopt;
      steps.push_back(Json{{"constant", v->name}, {"parameter", v->parameter}});
      out.tensors.emplace_back(tensor_name(v), v->value->contiguous());
      if (!v->known_digest.sha256.empty() && v->known_digest.data == v->value->data() &&
          v->value->is_contiguous())
        out.digests["digest." + tensor_name(v)] = v->known_digest.sha256;
    } else if (v->output_index == 0) {
      const Node* n = v->owner;
      // Nodes must come back in the order they were made, each right where its outputs begin.
      if (!n || n->id != next_node) return std::nullopt;
      ++next_node;
      Json props = Json::object();
      for (const auto& [name, value] : n->op->props()) props[name] = attr_json(value);
      Json ins = Json::array(), outs = Json::array();
      for (const Variable* in : n->inputs) ins.push_back(in->id);
      for (const Variable* o : n->outputs) outs.push_back(o->name);
      steps.push_back(Json{{"node", n->op->name()},
                           {"props", props},
                           {"name", n->name},
                           {"inputs", ins},
                           {"outputs", outs}});
    }
  }
  if (next_node != static_cast<int>(graph.nodes().size())) return std::nullopt;
  Json outputs = Json::array(), updates = Json::array();
  for (const Variable* v : graph.outputs()) outputs.push_back(v->id);
  for (const auto& [state, value] : graph.updates()) updates.push_back({state->id, value->id});
  const Json doc{{"format", "kiln graph 1"},
                 {"name", graph.name()},
                 {"steps", steps},
                 {"outputs", outputs},
                 {"updates", updates}};
  // Names that are not UTF-8 would be replaced: the graph would not come back the same.
  try {
    out.structure = doc.dump(-1, ' ', false, Json::error_handler_t::strict);
  } catch (const Json::exception&) {
    return std::nullopt;
  }
  return out;
}

void add_value_digests(GraphFiles& files) {
  std::vector<Tensor> values;
  std::vector<std::string> names;
  for (const auto& [name, t] : files.tensors) {
    if (files.digests.count("digest." + name)) continue;  // known already
    values.push_back(t);
    names.push_back(name);
  }
  const std::vector<std::string> digests = value_digests(values, false);
  for (size_t i = 0; i < digests.size(); ++i) files.digests["digest." + names[i]] = digests[i];
}

Graph graph_from_files(const std::string& structure, const Safetensors& tensors,
                       const std::string& origin) {
  try {
    const Json doc = Json::parse(structure);
    if (doc.at("format") != "kiln graph 1")
      throw UserError("format " + doc.at("format").dump() + " is not 'kiln graph 1'");
    Graph g(doc.at("name").get<std::string>());
    const Json& steps = doc.at("steps");
    std::vector<Variable*> vars;
    vars.reserve(steps.size() * 2);
    const auto var = [&](const Json& id) {
      const auto i = id.get<int64_t>();
      if (i < 0 || static_cast<size_t>(i) >= vars.size())
        throw UserError("reference to variable " + std::to_string(i) + " before it exists");
      return vars[static_cast<size_t>(i)];
    };
    for (const Json& step : steps) {
      if (step.contains("input")) {
        const std::string dt = step.at("dtype").get<std::string>();
        const auto dtype = dtype_from_name(dt);
        if (!dtype) throw UserError("unknown dtype '" + dt + "'");
        vars.push_back(
            g.add_input(step.at("input").get<std::string>(),
                        TensorType{*dtype, step.at("dims").get<std::vector<int64_t>>()}));
      } else if (step.contains("constant")) {
        const std::string name = step.at("constant").get<std::string>();
        const Tensor& value =
            tensors.at("t" + std::to_string(vars.size()), origin + ": constant '" + name + "'");
        Variable* v = step.at("parameter").get<bool>() ? g.add_parameter(value, name)
                                                       : g.add_constant(value, name);
        auto digest = tensors.metadata.find("digest.t" + std::to_string(vars.size()));
        if (digest != tensors.metadata.end())
          v->known_digest = Variable::KnownDigest{v->value->data(), digest->second};
        vars.push_back(v);
      } else {
        Attrs props;
        for (const auto& [name, value] : step.at("props").items()) props[name] = attr_value(value);
        std::vector<Variable*> ins;
        for (const Json& id : step.at("inputs")) ins.push_back(var(id));
        Node* n = g.add_node(
            OpRegistry::instance().create(step.at("node").get<std::string>(), props), ins,
            step.at("name").get<std::string>(), step.at("outputs").get<std::vector<std::string>>());
        vars.insert(vars.end(), n->outputs.begin(), n->outputs.end());
      }
    }
    std::vector<Variable*> outputs;
    for (const Json& id : doc.at("outputs")) outputs.push_back(var(id));
    g.set_outputs(outputs);
    for (const Json& u : doc.at("updates")) g.add_update(var(u.at(0)), var(u.at(1)));
    return g;
  } catch (const Json::exception& e) {
    throw UserError(origin + ": " + e.what());
  } catch (const UserError& e) {
    throw UserError(origin + ": " + e.what());
  }
}

bool same_graph(const Graph& a, const Graph& b) {
  if (a.name() != b.name() || a.variables().size() != b.variables().size() ||
      a.nodes().size() != b.nodes().size() || a.to_string() != b.to_string())
    return false;
  for (size_t i = 0; i < a.variables().size(); ++i) {
    const Variable &x = *a.variables()[i], &y = *b.variables()[i];
    if (x.id != y.id || x.name != y.name || x.kind != y.kind || !(x.type == y.type) ||
        x.parameter != y.parameter || x.output_index != y.output_index ||
        x.value.has_value() != y.value.has_value())
      return false;
    if (x.value) {
      const Tensor tx = x.value->contiguous(), ty = y.value->contiguous();
      if (tx.dtype() != ty.dtype() || tx.shape() != ty.shape()) return false;
      // The same bytes in memory are equal; only copies are compared.
      if (tx.data() != ty.data() && std::memcmp(tx.data(), ty.data(), tx.nbytes()) != 0)
        return false;
    }
  }
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node &x = *a.nodes()[i], &y = *b.nodes()[i];
    if (!(*x.op == *y.op) || x.name != y.name || x.inputs.size() != y.inputs.size()) return false;
    for (size_t k = 0; k < x.inputs.size(); ++k)
      if (x.inputs[k]->id != y.inputs[k]->id) return false;
  }
  for (size_t i = 0; i < a.outputs().size(); ++i)
    if (b.outputs().size() != a.outputs().size() || a.outputs()[i]->id != b.outputs()[i]->id)
      return false;
  if (a.updates().size() != b.updates().size()) return false;
  for (size_t i = 0; i < a.updates().size(); ++i) {
    if (a.updates()[i].first->id != b.updates()[i].first->id ||
        a.updates()[i].second->id != b.updates()[i].second->id)
      return false;
  }
  return true;
}

}  // namespace kiln
