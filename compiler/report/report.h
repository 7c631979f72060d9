#pragma once
// `kiln report`: one self-contained HTML page about a compiled model: the optimized graph
// as a picture (nodes coloured by kind, edges labelled with dtype and shape), each node's
// generated code with its source-map origins, the rewrite passes and what each changed,
// the cache story (key components, hit or miss, phase and kernel compile times) and, when
// inputs are given, a per-node profile with the slowest nodes marked on the graph.
#include <map>
#include <string>

#include "compiler/compile.h"

namespace kiln {

struct ReportOptions {
  CompileOptions compile;
  std::map<std::string, Tensor> inputs;  // every graph input, or none (then no profile)
  int repeat = 10;                       // profiled runs
};

// The page's data as JSON (what the page embeds and renders).
std::string report_json(const Graph& graph, const ReportOptions& options);
// The page itself: report_json inside a static HTML/JS shell; no network, no external file.
std::string report_html(const Graph& graph, const ReportOptions& options);

}  // namespace kiln
