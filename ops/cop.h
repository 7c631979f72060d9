#pragma once
// The code-emitting hooks of an op (Theano's COp). The C linker asks each node's op for
// these; every string returned is C11 and may use the names handed in `CodeNames`/`Sub`.
// Code for other devices is not the op's: each backend registers it per op class
// (ops/device_code.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/op.h"
#include "ops/kernel_args.h"

namespace kiln {

struct CodeNames {
  std::vector<std::string> inputs;   // C expressions of type kiln_tensor *
  std::vector<std::string> outputs;  // outputs arrive allocated and contiguous
};

struct Sub {
  std::string fail = "KILN_FAIL";  // KILN_FAIL("fmt", ...) records a message and jumps to cleanup
  std::string prefix;              // unique per node, e.g. "n3_": prefix every file-scope name
  std::string ctx = "ctx";         // kiln_ctx *
  std::string state = "state";     // the module's state struct (pointer)
  // Set when the code becomes a kernel shared by every node whose code differs only in these
  // values (sizes, offsets, window geometry): value() then reads them from the kernel's
  // argument array `kp`, which the module passes per node.
  KernelArgs* args = nullptr;

  // A size the code may read at run time: the literal, or `kp_<name>`, which the kernel's head
  // reads from its slot of `kp`. Never use one where C needs a constant expression (array
  // bounds, static initializers, case labels).
  std::string value(int64_t v, std::string_view name) const {
    return args ? args->add(v, name) : std::to_string(v);
  }
};

// How a tile-split op divides its output among the parts of a split call: the output is
// images of rows x cols (C expressions), and part p computes the tile kiln_tile_part()
// (kiln_index.h) gives it, of every image. An epilogue then walks the same tiles.
struct SplitTiles {
  std::string rows, cols, row_unit, col_unit;
  // An epilogue run by the op itself on each piece of its tile while the piece is still in
  // cache (COp::c_code_with_epilogue): the piece is image e_n's [e_r0, e_r1) x [e_c0, e_c1),
  // variables of the enclosing code, not the part's whole tile.
  bool piece_in_scope = false;
};

// An epilogue that only clamps (relu: 0 and +inf; clip by two scalars), as C expressions of
// the output's type for its bounds: an op whose kernel stores through a clamp applies it there
// and needs no pass of its own over the output.
struct StoreClamp {
  std::string lo, hi;
};

class COp : public Op {
 public:
  using Op::Op;

  // The fragment computing the outputs from the inputs. Runs inside the node's thunk.
  virtual std::string c_code(const Node& node, const CodeNames& names, const Sub& sub) const = 0;
  // File-scope helpers shared by every node of this op (deduplicated by text). Each kernel's
  // unit has its own copy (LinkMode::kKernels): keep them static, and give data that nodes
  // must share one weak definition.
  virtual std::string c_support_code() const { return ""; }
  // File-scope helpers for one node; names must start with `prefix`.
  virtual std::string c_support_code_apply(const Node& node, const std::string& prefix) const {
    return "";
  }
  // Members of the module state struct for this node (e.g. "double n3_scale;").
  virtual std::string c_state_fields(const Node& node, const std::string& prefix) const {
    return "";
  }
  // Run once when the module loads / unloads; may use sub.fail in init.
  virtual std::string c_init_code_struct(const Node& node, const Sub& sub) const { return ""; }
  virtual std::string c_cleanup_code_struct(const Node& node, const Sub& sub) const { return ""; }
  virtual std::vector<std::string> c_headers() const { return {}; }    // "<math.h>"
  virtual std::vector<std::string> c_libraries() const { return {}; }  // "openblas" -> -lopenblas
  virtual std::vector<std::string> c_compile_args() const { return {}; }
  virtual std::vector<std::string> c_preludes() const { return {}; }  // "kiln_index.h"
  // True when c_code computes only part ctx->part of ctx->n_parts of its outputs (disjoint
  // parts that may run at once), so the executor can split a large call across workers.
  virtual bool c_splittable(const Node& node) const { return false; }
  // For a splittable op that splits by whole units of this many flat output elements, part
  // p taking units kiln_part_range(numel / unit, p, n_parts, 1); 0: it splits the flat
  // output as the elementwise loop does. An epilogue must split the same way.
  virtual int64_t c_split_unit(const Node& node) const { return 0; }
  // Set for a splittable op whose parts take tiles of its output rather than flat runs of
  // units (c_split_unit then only caps how many parts a call gets). `names`: the node's, for
  // expressions of run-time sizes.
  virtual std::optional<SplitTiles> c_split_tiles(const Node& node, const CodeNames& names,
                                                  const Sub& sub) const {
    return std::nullopt;
  }
  // True when c_code_with_epilogue runs an in-place epilogue on pieces of its output as it
  // goes: the epilogue then reads the piece from cache rather than the part's whole tile
  // from memory after it (an expand convolution's 1.2 MB tile: three more passes).
  virtual bool c_inline_epilogue(const Node& node) const { return false; }
  // c_code that runs `epilogue` after each piece of output it computes, with int64_t e_n,
  // e_r0, e_r1, e_c0, e_c1 declared around it: image e_n's rows [e_r0, e_r1) and columns
  // [e_c0, e_c1) of the grid c_split_tiles describes. The pieces cover this part's tile once.
  virtual std::string c_code_with_epilogue(const Node& node, const CodeNames& names, const Sub& sub,
                                           const std::string& epilogue) const {
    return "";
  }
  // True when c_code_with_clamp applies a StoreClamp in its kernel's stores.
  virtual bool c_store_clamp(const Node& node) const { return false; }
  virtual std::string c_code_with_clamp(const Node& node, const CodeNames& names, const Sub& sub,
                                        const StoreClamp& clamp) const {
    return "";
  }
  // Each output element costs many operations, so small calls are worth splitting too.
  virtual bool c_heavy(const Node& node) const { return false; }
  // The code calls a library that runs threads of its own (OpenBLAS): the engine runs no
  // other step beside it, or the two would fight over the same cores.
  virtual bool c_threads_itself() const { return false; }
  // The output shapes come from the values the code computes, not from the input shapes:
  // the code hands its results to the executor (StepSpec::sized_by_run), which plans the
  // steps after it once it has run.
  virtual bool c_sized_by_run() const { return false; }

  // Output 0 is input `k`'s bytes under a new shape (a reshape): the executor binds it as a
  // view where it can (on the device always; on the CPU when input k is a temporary of the
  // run, which is contiguous) and the thunk copies nothing. -1: a buffer of its own.
  virtual int view_of(const Node& node) const { return -1; }
  // The axis (maybe negative) along which output 0 is the inputs one after another (a
  // concat whose thunk skips an input already at its place), or nullopt; see
  // StepSpec::concat_axis.
  virtual std::optional<int> concat_axis() const { return std::nullopt; }
  // True when the outputs live in device memory (placed nodes, to_device transfers).
  virtual bool output_on_device() const { return false; }
  // True when the thunk enqueues device work and completes with its stream
  // (KILN_THUNK_DEVICE): placed nodes and transfers.
  virtual bool enqueues_device_work() const { return false; }
};

}  // namespace kiln
