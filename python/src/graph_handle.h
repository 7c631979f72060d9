#pragma once
// A kiln graph held from Python: variables keep their graph alive.
#include <memory>

#include "ops/builders.h"

namespace kiln::python {

struct PyGraph {
  std::shared_ptr<Graph> graph;
};

struct PyVar {
  std::shared_ptr<Graph> graph;
  Var var;
};

}  // namespace kiln::python
