#include "runtime/module/bundle_description.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_text.h"
#include "util/strings.h"

namespace kiln {
namespace {

using nlohmann::json;

const char* kind_name(SlotKind k) {
  switch (k) {
    case SlotKind::kInput:
      return "input";
    case SlotKind::kParam:
      return "param";
    case SlotKind::kTemp:
      return "temp";
  }
  return "?";
}

json rule_json(const DimRule& r) {
  if (r.input < 0) return r.value;
  return json::array({r.input, r.dim, r.mul, r.div});
}

}  // namespace

std::string BundleDescription::to_json() const {
  json slots_j = json::array();
  for (const auto& s : slots) {
    slots_j.push_back({{"name", s.name},
                       {"dtype", dtype_name(s.dtype)},
                       {"dims", s.dims},
                       {"kind", kind_name(s.kind)}});
  }
  json params_j = json::array();
  for (const auto& [slot, tensor] : params) params_j.push_back({slot, tensor});
  json steps_j = json::array();
  for (const auto& st : steps) {
    json shapes = json::array();
    for (const auto& out : st.shapes) {
      json dims = json::array();
      for (const auto& r : out) dims.push_back(rule_json(r));
      shapes.push_back(dims);
    }
    steps_j.push_back({{"thunk", st.thunk},
                       {"inputs", st.inputs},
                       {"outputs", st.outputs},
                       {"label", st.label},
                       {"shapes", shapes}});
  }
  json doc = {{"format", "kiln-bundle"}, {"version", 1},          {"name", name},
              {"slots", slots_j},        {"inputs", input_slots}, {"outputs", output_slots},
              {"params", params_j},      {"steps", steps_j},      {"ties", ties}};
  return json_text(doc);
}

BundleDescription BundleDescription::parse(std::string_view text, const std::string& origin) {
  auto bad = [&](const std::string& what) -> UserError {
    return UserError(origin + ": bad program description: " + what);
  };
  // An integer field: converting any other number (1e90) to an integer would be undefined.
  auto int64_of = [&](const json& v) -> int64_t {
    if (!v.is_number_integer()) throw bad("expected an integer, got " + json_excerpt(v));
    return v.get<int64_t>();
  };
  auto int_of = [&](const json& v) -> int {
    const int64_t i = int64_of(v);
    if (i < INT32_MIN || i > INT32_MAX)
      throw bad("expected a 32-bit integer, got " + json_excerpt(v));
    return static_cast<int>(i);
  };
  BundleDescription d;
  try {
    json doc = parse_untrusted_json(text, origin);
    if (doc.at("format") != "kiln-bundle" || doc.at("version") != 1) throw bad("not kiln-bundle 1");
    d.name = doc.at("name").get<std::string>();
    for (const auto& s : doc.at("slots")) {
      SlotSpec spec;
      spec.name = s.at("name").get<std::string>();
      auto dt = dtype_from_name(s.at("dtype").get<std::string>());
      if (!dt) throw bad("slot '" + spec.name + "' has an unknown dtype");
      spec.dtype = *dt;
      spec.dims = s.at("dims").get<std::vector<int64_t>>();
      const std::string kind = s.at("kind").get<std::string>();
      spec.kind = kind == "input"   ? SlotKind::kInput
                  : kind == "param" ? SlotKind::kParam
                                    : SlotKind::kTemp;
      d.slots.push_back(std::move(spec));
    }
    const int n = static_cast<int>(d.slots.size());
    auto slot_list = [&](const json& j, const std::string& where) {
      std::vector<int> v = j.get<std::vector<int>>();
      for (int s : v)
        if (s < 0 || s >= n)
          throw bad(where + " names slot " + std::to_string(s) + " of " + std::to_string(n));
      return v;
    };
    d.input_slots = slot_list(doc.at("inputs"), "inputs");
    d.output_slots = slot_list(doc.at("outputs"), "outputs");
    for (const auto& p : doc.at("params")) {
      int slot = int_of(p.at(0));
      if (slot < 0 || slot >= n) throw bad("a parameter names slot " + std::to_string(slot));
      d.params.emplace_back(slot, p.at(1).get<std::string>());
    }
    for (const auto& s : doc.at("steps")) {
      BundleStep st;
      st.thunk = int_of(s.at("thunk"));
      st.label = s.at("label").get<std::string>();
      st.inputs = slot_list(s.at("inputs"), "step '" + st.label + "'");
      st.outputs = slot_list(s.at("outputs"), "step '" + st.label + "'");
      const json& shapes = s.at("shapes");
      if (shapes.size() != st.outputs.size())
        throw bad("step '" + st.label + "' has no shape per output");
      for (size_t o = 0; o < shapes.size(); ++o) {
        std::vector<DimRule> dims;
        for (const auto& r : shapes[o]) {
          DimRule rule;
          if (r.is_number_integer()) {
            rule.value = int64_of(r);
          } else {
            rule.input = int_of(r.at(0));
            rule.dim = int_of(r.at(1));
            rule.mul = int64_of(r.at(2));
            rule.div = int64_of(r.at(3));
            if (rule.input < 0 || rule.input >= static_cast<int>(st.inputs.size()) ||
                rule.dim < 0 || rule.mul <= 0 || rule.div <= 0) {
              throw bad("step '" + st.label + "' has a bad shape rule " + json_excerpt(r));
            }
          }
          dims.push_back(rule);
        }
        if (dims.size() != d.slots[st.outputs[o]].dims.size()) {
          throw bad("step '" + st.label + "' output " + std::to_string(o) + " has the wrong rank");
        }
        st.shapes.push_back(std::move(dims));
      }
      d.steps.push_back(std::move(st));
    }
    d.ties = doc.at("ties").get<std::vector<std::vector<std::pair<int, int>>>>();
    for (const auto& group : d.ties) {
      for (const auto& [input, dim] : group) {
        if (input < 0 || input >= static_cast<int>(d.input_slots.size()) || dim < 0 ||
            dim >= static_cast<int>(d.slots[d.input_slots[input]].dims.size())) {
          throw bad("a tie names input " + std::to_string(input) + " dimension " +
                    std::to_string(dim));
        }
      }
    }
  } catch (const json::exception& e) {
    throw bad(e.what());
  }
  return d;
}

void BundleDescription::check_ties(const std::vector<Shape>& input_shapes) const {
  for (const auto& group : ties) {
    const auto& [i0, d0] = group[0];
    for (const auto& [i, d] : group) {
      if (input_shapes.at(i).size() <= static_cast<size_t>(std::max(d, d0)) ||
          input_shapes.at(i0).size() <= static_cast<size_t>(d0)) {
        continue;  // a wrong rank: the executor's own check names it
      }
      if (input_shapes[i][d] != input_shapes[i0][d0]) {
        throw UserError("input '" + slots[input_slots[i]].name + "' dimension " +
                        std::to_string(d) + " is " + std::to_string(input_shapes[i][d]) +
                        " but input '" + slots[input_slots[i0]].name + "' dimension " +
                        std::to_string(d0) + " is " + std::to_string(input_shapes[i0][d0]) +
                        ": this exported model needs them equal");
      }
    }
  }
}

Program BundleDescription::program(const std::map<std::string, Tensor>& weights) const {
  Program p;
  p.slots = slots;
  p.input_slots = input_slots;
  p.output_slots = output_slots;
  for (const auto& [slot, tensor] : params) {
    auto it = weights.find(tensor);
    const SlotSpec& spec = slots[static_cast<size_t>(slot)];
    if (it == weights.end()) throw UserError("the weights have no tensor '" + tensor + "'");
    const Tensor& t = it->second;
    if (t.dtype() != spec.dtype || t.shape() != spec.dims) {
      throw UserError("weights tensor '" + tensor + "' is " + t.describe() + ", the model needs " +
                      std::string(dtype_name(spec.dtype)) + " " + dims_to_string(spec.dims));
    }
    p.params.emplace_back(slot, t);
  }
  for (const auto& st : steps) {
    StepSpec spec;
    spec.thunk = st.thunk;
    spec.inputs = st.inputs;
    spec.outputs = st.outputs;
    spec.label = st.label;
    spec.infer_shape = shape_rule_of(st);
    p.steps.push_back(std::move(spec));
  }
  return p;
}

ShapeRule shape_rule_of(const BundleStep& step) {
  return [shapes = step.shapes, label = step.label](const std::vector<Shape>& in) {
    std::vector<Shape> out;
    out.reserve(shapes.size());
    for (const auto& rules : shapes) {
      Shape s;
      s.reserve(rules.size());
      for (const DimRule& r : rules) {
        if (r.input < 0) {
          s.push_back(r.value);
          continue;
        }
        if (static_cast<size_t>(r.input) >= in.size() ||
            static_cast<size_t>(r.dim) >= in[r.input].size()) {
          throw UserError(label + ": an input has a smaller rank than the model was exported for");
        }
        const int64_t x = in[r.input][r.dim] * r.mul;
        if (x % r.div != 0) {
          throw UserError(label + ": dimension " + std::to_string(in[r.input][r.dim]) + " times " +
                          std::to_string(r.mul) + " is not divisible by " + std::to_string(r.div));
        }
        s.push_back(x / r.div);
      }
      out.push_back(std::move(s));
    }
    return out;
  };
}

}  // namespace kiln
