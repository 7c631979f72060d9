#pragma once
// A compiled graph that answers before its module exists. When CompileOptions::generic_start
// is on and the module is not cached, the module compiles on a background thread and calls
// run through the generic tier (compiler/generic/generic_runner.h) until it is loaded; every
// call after that runs the module. Results of the two tiers agree within float rounding
// (the generic tier computes in float32 through OpenBLAS and reference code). Otherwise, or
// on a hit, it is the compiled Function from the start. A generic run still going when the
// module is loaded is dropped between two nodes and the module answers instead.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compile.h"

namespace kiln {

enum class Tier { kNone, kGeneric, kCompiled };
const char* to_string(Tier tier);

class TieredFunction {
 public:
  // `graph` must outlive this object. Errors of the graph itself (and a cached module's
  // load) are thrown here; a background compile's error by the first call after it failed,
  // and by compiled().
  TieredFunction(const Graph& graph, CompileOptions options);
  ~TieredFunction();  // waits for a background compile, which then stores its module
  TieredFunction(const TieredFunction&) = delete;
  TieredFunction& operator=(const TieredFunction&) = delete;

  // Inputs in graph-input order, or by name (a missing or unknown name is an error naming it).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

  // The compiled function; waits for a background compile and rethrows its error.
  Function& compiled();
  // True once no call will run the generic tier again (the module is loaded, or failed).
  bool ready() const;
  // Whether this function started in the generic tier (a miss with generic_start on).
  bool started_generic() const;
  // Whether a generic run threw (then that call and every later one waited for the module).
  bool generic_failed() const;
  // The tier of the last call (kNone before any), how many calls the generic tier answered,
  // and how many generic runs the module overtook (dropped, the module answering instead).
  Tier last_tier() const;
  int generic_runs() const;
  int overtaken_runs() const;
  // The background compile's wall time (0 until it finished, or when there was none).
  double background_ms() const;
  const std::vector<std::string>& output_names() const { return output_names_; }

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<std::string> input_names_, output_names_;
  std::vector<TensorType> input_types_;
};

}  // namespace kiln
