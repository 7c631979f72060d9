#include "frontend/control_node.h"

#include "frontend/control_flow.h"
#include "frontend/model_function.h"
#include "graph/wire_text.h"
#include "runtime/exec/executor.h"
#include "util/error.h"
#include "util/sha256.h"

namespace kiln {

std::string ControlNode::key_of(const RunTimeValueNeeded& need, const CompileOptions& options) {
  WireWriter w("kiln-control-node 1 ");
  w.word(need.kind());
  w.attrs(need.attrs());
  w.num(static_cast<int64_t>(need.types().size()));
  for (const TensorType& t : need.types()) w.type(t);
  for (const std::string& v : need.values()) w.num(v.empty() ? 0 : 1);
  // What the bodies compile with: two models loaded with different options keep their own.
  w.word(options.passes.value_or("(default)"));
  w.word(options.precision);
  w.word(options.device);
  w.word(options.cache_dir.string());
  return sha256_hex(w.take());
}

ControlNode::ControlNode(const RunTimeValueNeeded& need, const std::string& origin,
                         const std::filesystem::path& dir, const CompileOptions& options)
    : kind_(need.kind()),
      where_(origin + ": " + need.kind() + " giving '" + need.outputs().at(0) + "'"),
      key_(key_of(need, options)),
      attrs_(need.attrs()),
      types_(need.types()) {
  for (const std::string& v : need.values()) present_.push_back(!v.empty());
  // Each body compiles as a model of its own (named in its errors by its node).
  for (const char* body : {"body", "then_branch", "else_branch"}) {
    if (!attrs_.count(body)) continue;
    bodies_.emplace_back(
        new ModelFunction(attr_string(attrs_, body), where_ + ": " + body, dir, options));
  }
}

ControlNode::~ControlNode() = default;

std::vector<Tensor> ControlNode::run(const std::vector<const Tensor*>& values) {
  std::lock_guard lock(mutex_);
  const InOrderRuns in_order;  // each iteration's steps on this thread
  // A body's error names the node, the body and the iteration (its type kept: a refused op
  // stays UnsupportedError).
  auto body = [&](size_t k) -> BodyFunction {
    ModelFunction* f = bodies_.at(k).get();
    std::string name = kind_ == "If" ? (k == 0 ? "then_branch" : "else_branch") : "body";
    return [this, f, name, calls = int64_t{0}](const std::vector<Tensor>& args) mutable {
      const int64_t iteration = calls++;
      // Built only on failure: an iteration costs about a microsecond.
      auto at = [&](const char* what) {
        return where_ + ": " + name +
               (kind_ == "If" ? "" : " (iteration " + std::to_string(iteration) + ")") + ": " +
               what;
      };
      try {
        return (*f)(args);
      } catch (const UnsupportedError& e) {
        throw UnsupportedError(at(e.what()));
      } catch (const OutOfMemoryError& e) {
        throw OutOfMemoryError(at(e.what()));
      } catch (const UserError& e) {
        throw UserError(at(e.what()));
      }
    };
  };
  if (kind_ == "Loop") return run_loop(body(0), values, types_, attrs_, where_);
  if (kind_ == "Scan") return run_scan(body(0), values, types_, attrs_, where_);
  if (kind_ == "If") return run_if(body(0), body(1), values, where_);
  throw InternalError(where_ + ": " + kind_ + " is not control flow");
}

std::vector<Tensor> ControlNode::operator()(const std::vector<Tensor>& inputs) {
  std::vector<const Tensor*> values;
  size_t next = 0;
  for (bool present : present_) {
    if (!present) {
      values.push_back(nullptr);
      continue;
    }
    if (next == inputs.size()) break;
    values.push_back(&inputs[next++]);
  }
  if (next != inputs.size() || values.size() != present_.size()) {
    throw InternalError(where_ + ": called with " + std::to_string(inputs.size()) +
                        " inputs for its " + std::to_string(present_.size()) + " positions");
  }
  return run(values);
}

std::shared_ptr<ControlNode> control_node(const RunTimeValueNeeded& need, const std::string& origin,
                                          const std::filesystem::path& dir,
                                          const CompileOptions& options, ControlNodes& made) {
  const std::string key = ControlNode::key_of(need, options);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  auto node = std::make_shared<ControlNode>(need, origin, dir, options);
  made.emplace(key, node);
  return node;
}

bool runs_as_step(const RunTimeValueNeeded& need) {
  return need.kind() == "Loop" || need.kind() == "Scan" || need.kind() == "If";
}

}  // namespace kiln
