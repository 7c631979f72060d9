// kiln.export's native half: a graph built in Python (kiln.export lowers a PyTorch program
// into one) written as kiln export's standalone library: libNAME.so, NAME.h, the weights.
#include <nanobind/stl/string.h>

#include "compiler/export/export.h"
#include "python/src/bindings.h"
#include "python/src/graph_handle.h"

namespace kiln::python {

void bind_export(nb::module_& m) {
  m.def(
      "export_graph",
      [](const PyGraph& g, const std::string& out_dir, const std::string& name,
         bool embed_weights) {
        ExportOptions o;
        o.out_dir = out_dir;
        o.name = name;
        o.embed_weights = embed_weights;
        ExportResult r;
        {
          nb::gil_scoped_release release;
          r = export_model(*g.graph, o);
        }
        nb::dict d;
        d["name"] = r.name;
        d["library"] = r.library.string();
        d["header"] = r.header.string();
        d["weights"] = r.weights.string();
        d["readme"] = r.readme.string();
        d["links_blas"] = r.links_blas;
        d["dynamic_dims"] = r.dynamic_dims;
        return d;
      },
      nb::arg("graph"), nb::arg("out_dir"), nb::arg("name") = "", nb::arg("embed_weights") = true,
      "Writes the graph as a standalone library (kiln export); returns the files written.");
}

}  // namespace kiln::python
