// kiln's Python extension: kiln.Tensor (DLPack both ways), compile / Function, the graph
// builder and the kernel cache. The pure-Python package (python/kiln) builds on it.
#include "python/src/bindings.h"

NB_MODULE(_kiln, m) {
  m.doc() = "kiln's native extension (use the kiln package)";
  kiln::python::bind_errors(m);
  kiln::python::bind_tensor(m);
  kiln::python::bind_function(m);
  kiln::python::bind_graph(m);
  kiln::python::bind_cache(m);
  kiln::python::bind_export(m);
  kiln::python::bind_device(m);
}
