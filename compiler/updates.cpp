#include "compiler/updates.h"

#include <algorithm>
#include <queue>

#include "ops/scalar_table.h"
#include "rewrite/graph_copy.h"
#include "util/error.h"

namespace kiln {
namespace {

bool elementwise_step(const std::string& op) {
  return op == "fused_elementwise" || find_scalar_op(op) != nullptr;
}

// Steps in an order that keeps every data dependency and puts each in-place writer after
// the other readers of the state it overwrites; empty when no such order exists.
std::vector<size_t> order_steps(const Program& p, const std::vector<std::pair<size_t, int>>& writers) {
  const size_t n = p.steps.size();
  std::vector<int> producer(p.slots.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    for (int s : p.steps[i].outputs) producer[static_cast<size_t>(s)] = static_cast<int>(i);
  }
  std::vector<std::vector<size_t>> after(n);
  std::vector<int> pending(n, 0);
  auto edge = [&](size_t from, size_t to) {
    after[from].push_back(to);
    ++pending[to];
  };
  for (size_t i = 0; i < n; ++i) {
    for (int s : p.steps[i].inputs) {
      if (const int q = producer[static_cast<size_t>(s)]; q >= 0) edge(static_cast<size_t>(q), i);
    }
  }
  for (const auto& [writer, state] : writers) {
    for (size_t i = 0; i < n; ++i) {
      if (i == writer) continue;
      const auto& in = p.steps[i].inputs;
      if (std::find(in.begin(), in.end(), state) != in.end()) edge(i, writer);
    }
  }
  // Kahn's algorithm, lowest original position first: the order changes only where it must.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (!pending[i]) ready.push(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t j : after[i]) {
      if (--pending[j] == 0) ready.push(j);
    }
  }
  if (order.size() != n) order.clear();
  return order;
}

}  // namespace

std::vector<std::pair<int, int>> update_positions(const Graph& graph) {
  std::vector<std::pair<int, int>> out;
  const auto& inputs = graph.inputs();
  int k = static_cast<int>(graph.outputs().size());
  for (const auto& [state, value] : graph.updates()) {
    const auto it = std::find(inputs.begin(), inputs.end(), state);
    check_internal(it != inputs.end(), "update of '" + state->name + "': not an input");
    out.emplace_back(static_cast<int>(it - inputs.begin()), k++);
  }
  return out;
}

Graph with_update_outputs(const Graph& graph) {
  GraphCopy copy(graph);
  for (const Variable* in : graph.inputs()) copy.map(in);
  for (const auto& node : graph.nodes()) copy.copy(*node);
  std::vector<Variable*> values;
  for (const auto& [state, value] : graph.updates()) values.push_back(copy.map(value));
  Graph out = copy.finish();
  std::vector<Variable*> outs = out.outputs();
  outs.insert(outs.end(), values.begin(), values.end());
  out.set_outputs(outs);
  return out;
}

std::shared_ptr<const Program> program_with_updates(std::shared_ptr<const Program> program,
                                                    const ModulePlan& plan,
                                                    const std::vector<std::pair<int, int>>& updates) {
  if (updates.empty()) return program;
  auto p = std::make_shared<Program>(*program);
  std::vector<int> writer_of(p->slots.size(), -1);
  for (size_t i = 0; i < p->steps.size(); ++i) {
    for (int s : p->steps[i].outputs) writer_of[static_cast<size_t>(s)] = static_cast<int>(i);
  }
  std::vector<std::pair<size_t, int>> writers;  // in-place candidates: step, state slot
  for (const auto& [input, output] : updates) {
    ProgramUpdate u{output, input, false};
    const int value = p->output_slots.at(static_cast<size_t>(output));
    const int state = p->input_slots.at(static_cast<size_t>(input));
    const int w = writer_of[static_cast<size_t>(value)];
    // The value must be a step's own output, named by no other output, of the state's shape.
    const bool one_output = std::count(p->output_slots.begin(), p->output_slots.end(), value) == 1;
    // A step that reads the state while writing it must be elementwise (element i read
    // before it is written); a step that does not read it may be anything.
    const auto& reads = w >= 0 ? p->steps[static_cast<size_t>(w)].inputs : std::vector<int>{};
    const bool reads_state = std::find(reads.begin(), reads.end(), state) != reads.end();
    if (w >= 0 && one_output && (!reads_state || elementwise_step(plan.step_op(static_cast<size_t>(w)))) &&
        p->slots[static_cast<size_t>(value)].dims == p->slots[static_cast<size_t>(state)].dims &&
        !p->slots[static_cast<size_t>(value)].on_device) {
      u.in_place = true;
      writers.emplace_back(static_cast<size_t>(w), state);
    }
    p->updates.push_back(u);
  }
  // Drop in-place candidates from the last until an order exists (a reader of an old value
  // that needs a new one cannot run first).
  std::vector<size_t> order = order_steps(*p, writers);
  while (order.empty() && !writers.empty()) {
    const int state = writers.back().second;
    writers.pop_back();
    for (ProgramUpdate& u : p->updates) {
      if (p->input_slots[static_cast<size_t>(u.input)] == state) u.in_place = false;
    }
    order = order_steps(*p, writers);
  }
  check_internal(!order.empty(), "the program's steps have no topological order");
  std::vector<StepSpec> steps;
  for (size_t i : order) steps.push_back(p->steps[i]);
  p->steps = std::move(steps);
  return p;
}

}  // namespace kiln
