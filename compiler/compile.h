#pragma once
// compile(): graph -> key -> (memo | cache hit | rewrites -> stitched C -> clang -> publish)
// -> Function.
#include <filesystem>
#include <optional>
#include <string>

#include "compiler/c/toolchain.h"
#include "compiler/function.h"
#include "graph/graph.h"

namespace kiln {

struct CompileOptions {
  ToolchainConfig toolchain;
  // The cache folder; empty: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
  // Failed sources are kept under <cache>/failed/<key>/.
  std::filesystem::path cache_dir;
  // Empty: on unless KILN_CACHE=0. Off: build in <cache>/scratch, never store or reuse.
  std::optional<bool> use_cache;
  // On a miss, put the nearest existing entry and what differs into info().cache_note.
  bool explain = false;
  // Runs the function's thunks; null: the process-wide default_engine() (KILN_ENGINE,
  // KILN_ENGINE_WORKERS). Must outlive the Function.
  Engine* engine = nullptr;
  // Smallest part (in elements) of a split thunk call; 0: Executor::kSplitGrain.
  int64_t split_grain = 0;
  // Fill outputs and temporaries with 0xFF bytes before each run (a debugging aid: an
  // element no thunk wrote reads as NaN or -1, not as stale data).
  bool poison_buffers = false;
  // Rewrite passes to run, e.g. "-fusion,-cse" or "none" (see rewrite/pipeline.h);
  // empty: $KILN_PASSES, else all.
  std::optional<std::string> passes;
  // "f32" (the model's own precision) or "bf16": products by model weights run on bfloat16
  // operands with float32 sums (AVX512-BF16's vdpbf16ps; a float32 fallback on CPUs without
  // it), everything else in float32 (rewrite/cpu/bf16_products.cpp); the passes spec then
  // gains "bf16". CPU only. Empty: $KILN_PRECISION, else f32.
  std::string precision;
  // "cpu", or "cuda": nodes with CUDA code run on the CUDA device (a GPU, or the emulator
  // with KILN_CUDA_DEVICE=emulator), with transfers where values cross (rewrite/place_cuda).
  std::string device = "cpu";
  // With device "cuda": the function takes its inputs and returns its outputs in device
  // memory (runtime/device/device_tensor.h moves tensors there and back), so a caller
  // chaining functions on the GPU copies nothing through the host.
  bool device_io = false;
  // Build the module from kernels (compiler/c/kernel_build.h): each distinct node code is
  // compiled once, in parallel, and cached on its own, so models share kernels. Off: the
  // whole graph as one translation unit, as before kernels. Empty: on unless KILN_KERNELS=0.
  std::optional<bool> kernel_units;
  // TieredFunction (compiler/tiered_function.h) only: on a cache miss, answer calls through
  // the generic tier while the module compiles in the background. Empty: on unless
  // KILN_GENERIC_START=0.
  std::optional<bool> generic_start;
};

// The graph as given is keyed (compiler/graph_key.h) together with the toolchain, the rewrite
// passes the options enable (with their versions) and the device; a memo or cache hit runs
// no pass: the entry's plan rebuilds the program and prepares the graph's weights for it
// (once per weight set; compiler/module_plan.h).
Function compile(const Graph& graph, const CompileOptions& options = {});

// True when compile() would build nothing: the module is loaded in this process, or a
// verified entry for it is in the local cache (the remote tier is not asked).
bool is_cached(const Graph& graph, const CompileOptions& options = {});

// Forgets every module this process loaded (and unpins their cache entries once no
// Function uses them); the next compile of a graph goes back to the disk cache.
void clear_compile_memo();

// The stitched C source of a graph, exactly as compile() would build it; with nodes placed on
// a device, the device unit (kernels.cu) after it under its own banner.
std::string generate_source(const Graph& graph, const CompileOptions& options = {});
// The same as a person reads it (`kiln source`): each prelude, the module ABI header among
// them, shown as a one-line stub naming it and its length.
std::string readable_source(const Graph& graph, const CompileOptions& options = {});

// The graph compile() builds a module from: `graph` after the rewrite passes.
Graph optimized_graph(const Graph& graph, const CompileOptions& options = {});

// The passes spec `options` run: their spec (or $KILN_PASSES), with "bf16" added at
// precision bf16. Throws UserError for a precision other than f32 and bf16, or bf16 on a
// device other than the CPU.
std::optional<std::string> effective_passes(const CompileOptions& options);

struct LinkedModule;
// What `kiln export` ships (compiler/export/export.h): the module as one C unit (thunk i runs step
// thunk i of the program), the program with its weights prepared (folded, packed), and the
// optimized graph both came from. CPU only; nothing is cached.
struct StandaloneModule {
  std::string key;
  std::shared_ptr<const LinkedModule> linked;
  Program program;
  std::shared_ptr<const Graph> graph;
};
StandaloneModule standalone_module(const Graph& graph, const CompileOptions& options = {});

}  // namespace kiln
