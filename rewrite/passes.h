#pragma once
// The rewrite passes. Each takes a graph and returns the rewritten one; each lives in its
// own file. rewrite/pipeline.h runs them as a list.
#include "graph/graph.h"

namespace kiln {
class DeviceCodeTable;
}

namespace kiln {

// lower_conv_transpose.cpp: conv_transpose -> channels-last GEMM + conv_transpose_fold
Graph lower_conv_transpose(const Graph& graph);
Graph fold_constants(const Graph& graph);   // constant_fold.cpp: nodes of constants -> constants
Graph simplify(const Graph& graph);         // simplify.cpp: x*1, x+0, neg(neg x), ...
Graph merge_common(const Graph& graph);     // cse.cpp: identical nodes and constants, once
Graph fuse_layer_norm(const Graph& graph);  // fuse_norm.cpp: the importer's layer-norm chain
Graph layout_nchwc(const Graph& graph);     // layout_nchwc.cpp: conv chains -> blocked NCHW8c
// layout_nhwc_int8.cpp: integer conv chains -> channels-last
Graph layout_nhwc_int8(const Graph& graph);
// compose_reorders.cpp: transpose -> reshape -> transpose -> one transpose (layout_nchwc runs it)
Graph compose_reorders(const Graph& graph);
Graph winograd_convs(const Graph& graph);  // winograd.cpp: blocked 3x3 convs -> F(4x4) or F(2x2)
Graph pack_weights(const Graph& graph);    // pack_weights.cpp: gemm weights -> GEMM panels
// bf16_products.cpp: packed float32 gemm weights -> bfloat16 panels (opt-in)
Graph bf16_products(const Graph& graph);
// bf16_convs.cpp: float32 group-1 2-D convolutions of a weight -> im2col @ W, so the bf16
// pass takes them (opt-in)
Graph bf16_convs(const Graph& graph);
Graph view_matmul_operands(const Graph& graph);  // matmul_views.cpp: head splits -> strides
Graph fuse_attention(const Graph& graph);    // fuse_attention.cpp: matmul, softmax, matmul -> one
Graph fuse_elementwise(const Graph& graph);  // fuse_elementwise.cpp: chains/trees -> one loop
// split_reductions.cpp: a large max/min to one value -> per row, then of the rows
Graph split_full_reductions(const Graph& graph);
Graph fuse_reduce(const Graph& graph);       // fuse_reduce.cpp: elementwise producer -> reduction
Graph fuse_epilogue(const Graph& graph);     // fuse_epilogue.cpp: gemm/conv + bias/activation
Graph remove_dead(const Graph& graph);       // dce.cpp: nodes no output needs
// place_device.cpp: nodes with code in `table` -> that device, transfers at the boundaries.
// Not in the pipeline: compile() runs it for a device backend (compiler/backend.h).
// device_io: the graph's inputs arrive and its outputs leave in device memory.
Graph place_on_device(const Graph& graph, const DeviceCodeTable& table, bool device_io = false);

}  // namespace kiln
