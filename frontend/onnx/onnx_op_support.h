#pragma once
// What the ONNX converters of every family share: attribute and output checks, reshapes whose
// target holds dynamic dimensions, and the consumers of symbolic shape values (onnx_sym.h).
#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_sym.h"
#include "graph/dim_expr.h"
#include "ops/builders.h"

namespace kiln {
// A graph input's or output's declared type; throws UnsupportedError (naming `where`) for
// values that are not tensors, element types kiln lacks and unknown ranks.
TensorType onnx_value_type(const onnx::ValueInfoProto& v, const std::string& where);
// Declares `t` on v; each dynamic dimension gets its own dim_param, dim_prefix + "_" + index.
void set_onnx_value_type(onnx::ValueInfoProto* v, const TensorType& t,
                         const std::string& dim_prefix);
}  // namespace kiln

namespace kiln::onnx_import {

using Outs = std::vector<Var>;
using Ints = std::vector<int64_t>;
using OpTable = std::map<std::string, OnnxOpSpec>;

int64_t rank_axis(int64_t axis, int rank);

const onnx::AttributeProto* tensor_attr(const onnx::NodeProto& n, const std::string& name);

std::string attr_problem(const std::string& name, const std::string& value, const std::string& why);

// A check that allows at most `n` outputs.
std::vector<std::string> max_outputs(const onnx::NodeProto& n, int count, const std::string& why);

// Reshape whose target may hold dynamic dimensions: each output dimension is static, the
// input's dimension at the same index (0), or the single inferred one (-1).
Var reshape_to(Var x, const Ints& dims, const std::vector<int>& source);

// A symbolic input of a node that reads run-time dimensions: nullopt unless the input is
// symbolic (known values take the ordinary, constant path).
std::optional<SymValue> symbolic_in(OnnxImporter& im, const onnx::NodeProto& n, int i);

// Bounds far past any dimension clamp the same way; these fit a dimension expression.
int64_t clamp_bound(int64_t v);

// The op `name` on `data` (may be null) plus the variables the expressions read, with
// `props` and each expression list in `lists` written as a prop string.
Var apply_with_dims(OnnxImporter& im, const std::string& name, std::optional<Var> data, Attrs props,
                    const std::vector<std::pair<std::string, std::vector<DimExpr>>>& lists);

Var reshape_symbolic(OnnxImporter& im, Var x, const SymValue& target, bool allowzero);

Var expand_symbolic(OnnxImporter& im, Var x, const SymValue& target);

// Slice whose starts or ends follow dynamic dimensions; nullopt when axes or steps do too.
std::optional<Var> slice_symbolic(OnnxImporter& im, const onnx::NodeProto& n, Var x);

// A known or symbolic integral scalar for Range (a float value must be a whole number).
std::optional<DimExpr> range_bound(OnnxImporter& im, const onnx::NodeProto& n, int i);

OnnxOpSpec elementwise(const std::string& op, std::vector<std::string> attrs = {});

Var scalar_like(Var x, double v);

Ints static_dims(const TensorType& t, const std::string& what);

// Input x with a dimension of size 1 inserted at `axis` (static or dynamic dimensions).
Var unsqueeze_at(Var x, int axis);

// A constant tensor of `shape` whose element at `at` (row-major coordinates) is f(at).
Var index_constant(Graph& g, DType dt, const Ints& shape,
                   const std::function<double(const Ints&)>& f);

// Each family's converters, into the table (onnx_ops_<family>.cpp).
void add_elementwise_ops(OpTable& t);
void add_nn_ops(OpTable& t);
void add_reduce_ops(OpTable& t);
void add_shape_ops(OpTable& t);
void add_value_ops(OpTable& t);
void add_composite_ops(OpTable& t);
void add_quant_ops(OpTable& t);
void add_signal_ops(OpTable& t);  // onnx_ops_signal.cpp
void add_random_ops(OpTable& t);  // onnx_ops_random.cpp
void add_control_ops(OpTable& t);   // onnx_control.cpp: Loop, Scan
void add_training_ops(OpTable& t);  // onnx_ops_training.cpp: ai.onnx.preview.training
// A node's graph attribute; throws naming the node's op when it is missing.
const onnx::GraphProto& graph_attr(const onnx::NodeProto& n, const std::string& name);
// The names a graph reads from enclosing scopes, in the order of first use (`seen` dedupes
// across calls).
void free_names(const onnx::GraphProto& g, std::set<std::string> defined,
                std::vector<std::string>& out, std::set<std::string>& seen);
// An If whose condition is computed at run time: throws RunTimeValueNeeded with both branches
// as models of their own, for the caller to run between stages (onnx_control.cpp).
[[noreturn]] void stage_if(OnnxImporter& im, const onnx::NodeProto& n);
// Dropout in training mode (onnx_ops_random.cpp): kiln's dropout_train.
Outs convert_training_dropout(OnnxImporter& im, const onnx::NodeProto& n, const Attrs& a);

}  // namespace kiln::onnx_import
