#pragma once
// What a cache entry keeps beside its module so that a hit runs no rewrite pass: the program
// the optimized graph became (buffer slots, steps, each step's shape rule by op name and
// props) and how each parameter follows from the constants of the graph as given (the
// ConstantRecipes of folding and weight packing, flattened into preparation steps). It is
// the entry's `plan` file; a loaded plan prepares any weights of the key's shapes.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "runtime/exec/program.h"

namespace kiln {

// One preparation step: output `output` of transform `op` (rewrite/constant_recipe.h) over
// values `inputs`. Values are numbered: the given graph's constants first, in order, then
// each step's result.
struct PrepStep {
  std::string op;
  Attrs props;
  int output = 0;
  std::vector<int> inputs;
};

class ModulePlan {
 public:
  // From the graph compile() built the module from; `sources` is the graph as given, whose
  // constants the recipes number. Throws InternalError for a constant without a recipe.
  static std::shared_ptr<const ModulePlan> from_graph(const Graph& optimized, const Graph& sources);
  // Throws CacheEntryError naming `where` and the byte offset of what is wrong.
  static std::shared_ptr<const ModulePlan> parse(const std::string& text, const std::string& where);
  std::string serialize() const;

  // Checks that the given graph's constants have the dtypes and shapes the plan was made
  // for (UserError naming the constant otherwise).
  void check_sources(const Graph& given) const;
  // Runs the preparation steps on the given graph's constants: each step's result, in order.
  // A failing step is a UserError naming it.
  std::vector<Tensor> prepare(const Graph& given) const;
  // The positions of the given graph's constants that preparation reads: what identifies a
  // weight set whose prepared values can be reused.
  const std::vector<int>& prepared_from() const { return prepared_from_; }
  // What preparing the given graph's constants gives, as the rewrites already computed it
  // into `optimized` (the graph this plan was made from): the steps a parameter reads are
  // filled in, the rest left empty. Seeds a miss's weight set, so it prepares nothing twice.
  std::vector<Tensor> prepared_in(const Graph& optimized) const;
  // The program, its parameters bound: the given graph's constants and prepared values.
  Program program(const Graph& given, const std::vector<Tensor>& prepared) const;
  size_t prep_steps() const { return prep_.size(); }
  // The preparation steps whose values the program reads (its parameters): all a cache of
  // prepared weights needs to keep.
  std::vector<int> kept_steps() const;
  // UserError unless every kept step's value has the dtype and shape of the parameter slot
  // it fills (prepared values read from somewhere else: a cache entry).
  void check_prepared(const std::vector<Tensor>& prepared) const;
  const std::string& step_op(size_t step) const { return step_ops_.at(step).op; }

 private:
  // parse() without turning the wire reader's errors into CacheEntryErrors.
  static std::shared_ptr<const ModulePlan> parse_wire(const std::string& text,
                                                      const std::string& where);
  struct StepOp {
    std::string op;
    Attrs props;
  };
  void finish();  // checks every index, builds the shape rules and prepared_from_

  Program skeleton_;                 // without params
  std::vector<StepOp> step_ops_;     // per step: the op whose infer_shape is its shape rule
  std::vector<TensorType> sources_;  // the given graph's constants: their types
  std::vector<PrepStep> prep_;
  std::vector<std::pair<int, int>> params_;  // slot -> value index
  std::vector<int> prepared_from_;
};

}  // namespace kiln
