#include "cli/model_inputs.h"

#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/strings.h"

namespace kiln::cli {

Flag input_flag() {
  return {"--input", "-i", "NAME=FILE",
          "one per graph input: NAME=FILE.npy, NAME=FILE.safetensors (the file's\n"
          "tensor NAME, else its only tensor), or FILE.safetensors (every tensor of\n"
          "the file named like a graph input)",
          true};
}

InputSpecs parse_input_specs(const CommandLine& line) {
  InputSpecs specs;
  const std::vector<std::string> given = line.values("--input");
  specs.any = !given.empty();
  for (const auto& spec : given) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos && is_safetensors_path(spec)) {
      specs.bundles.push_back(spec);
      continue;
    }
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw UsageError{"kiln " + line.command() +
                       ": --input expects NAME=FILE.npy, NAME=FILE.safetensors or "
                       "FILE.safetensors, got '" +
                       spec + "'"};
    }
    if (!specs.files.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second) {
      throw UsageError{"kiln " + line.command() + ": input '" + spec.substr(0, eq) +
                       "' given twice"};
    }
  }
  return specs;
}

std::map<std::string, Tensor> read_inputs(const InputSpecs& specs,
                                          const std::vector<ModelInput>& model_inputs,
                                          const std::string& command, bool optional) {
  const auto& files = specs.files;
  // A sequence input x is given element by element, as x[0], x[1], ...
  auto is_input = [&](const std::string& name) {
    for (const auto& v : model_inputs) {
      if (holds_sequence(v.kind)) {
        if (name.size() > v.name.size() + 2 && name.rfind(v.name + "[", 0) == 0 &&
            name.back() == ']')
          return true;
      } else if (v.name == name) {
        return true;
      }
    }
    return false;
  };
  std::map<std::string, Tensor> inputs;
  for (const auto& path : specs.bundles) {
    Safetensors st = read_safetensors(path);
    for (auto& [name, tensor] : st.tensors) {
      if (!is_input(name)) continue;  // a weights file may hold more than the inputs
      if (files.count(name) || inputs.count(name)) {
        throw UsageError{"kiln " + command + ": input '" + name + "' given twice (again in " +
                         path + ")"};
      }
      inputs[name] = tensor;
    }
  }
  for (const auto& [name, file] : files) {
    if (is_input(name)) continue;
    std::vector<std::string> names;
    for (const auto& v : model_inputs) {
      names.push_back(
          v.kind == ValueKind::kTensor
              ? v.name + " (" + v.type.to_string() + ")"
              : v.name + " (a " + value_kind_name(v.kind) + " of " + v.type.to_string() +
                    (holds_sequence(v.kind) ? ": " + element_name(v.name, 0) + ", ...)" : ")"));
    }
    throw UserError("unknown input '" + name + "'; the model takes " + join(names, ", "));
  }
  if (!(optional && !specs.any)) {
    for (const auto& v : model_inputs) {
      if (v.kind != ValueKind::kTensor) continue;  // a sequence may be empty, an optional absent
      if (!files.count(v.name) && !inputs.count(v.name)) {
        throw UserError("missing input '" + v.name + "': expected " + v.type.to_string() +
                        "; pass --input " + v.name + "=FILE.npy");
      }
    }
  }
  for (const auto& [name, file] : files) inputs[name] = read_tensor_file(file, name);
  return inputs;
}

std::map<std::string, Tensor> read_inputs(const InputSpecs& specs, const Graph& g,
                                          const std::string& command, bool optional) {
  std::vector<ModelInput> model_inputs;
  for (const auto* v : g.inputs()) model_inputs.push_back({v->name, v->type});
  return read_inputs(specs, model_inputs, command, optional);
}

// file_name_for keeps [A-Za-z0-9._-] (so output "y" is y.npy), makes every other byte '_' and
// never leaves DIR ("../x", "/abs", NUL); two values that would share a file are an error
// naming both, never an overwrite.
std::vector<std::filesystem::path> value_files(const std::string& dir,
                                               const std::vector<std::string>& names,
                                               const std::string& prefix) {
  std::vector<std::filesystem::path> paths;
  std::map<std::string, std::string> taken;
  for (const auto& name : names) {
    const std::string file = prefix + file_name_for(name) + ".npy";
    if (auto [it, fresh] = taken.emplace(file, name); !fresh) {
      throw UserError("outputs " + in_quotes(it->second) + " and " + in_quotes(name) +
                      " would both be written to " + file +
                      "; use --output-format safetensors, which keeps names as they are");
    }
    paths.push_back(std::filesystem::path(dir) / file);
  }
  return paths;
}

void create_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError("cannot create output directory '" + dir + "': " + ec.message());
}

}  // namespace kiln::cli
