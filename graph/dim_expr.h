#pragma once
// A dimension known only at run time, as an integer expression over the dimensions of a
// node's inputs: "#1.0" is dimension 0 of input 1; constants, + - * / % and min(a, b),
// max(a, b) combine them. Ops whose output shape follows values a model computes from
// shapes (ONNX's Shape -> Gather -> Concat -> Reshape) keep these in their props, so one
// compiled module serves every size of a dynamic dimension and the cache key holds the rule.
//
// "/" truncates toward zero (C and ONNX integer Div); "%" takes the divisor's sign (ONNX Mod).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/tensor_type.h"
#include "runtime/tensor.h"

namespace kiln {

class DimExpr {
 public:
  DimExpr() : DimExpr(constant(0)) {}
  static DimExpr constant(int64_t v);
  static DimExpr dim(int input, int d);
  // Folds constants and the identities x+0, x*1, x/1.
  static DimExpr binary(char op, const DimExpr& a, const DimExpr& b);  // + - * / % m(in) M(ax)
  // Throws UserError naming the text and the offset of what does not parse.
  static DimExpr parse(std::string_view text);

  std::optional<int64_t> value() const;             // the constant, when there are no leaves
  std::optional<std::pair<int, int>> leaf() const;  // (input, dim) when it is one dimension
  // Throws UserError on a division by zero or a missing input dimension.
  int64_t eval(const std::vector<Shape>& inputs) const;
  // nullopt when a leaf's dimension is dynamic.
  std::optional<int64_t> eval_static(const std::vector<TensorType>& inputs) const;
  std::string str() const;
  // A C expression (int64_t) reading `inputs[k]->shape[d]` for each leaf.
  std::string c_expr(const std::vector<std::string>& inputs) const;
  // The same expression with each leaf's input index k replaced by remap(k).
  template <class F>
  DimExpr remap(F&& remap_input) const;
  void leaves(std::vector<std::pair<int, int>>& out) const;
  int max_input() const;  // the highest input index a leaf reads, -1 without leaves

  bool operator==(const DimExpr& o) const { return str() == o.str(); }

 private:
  struct Node {
    char op = 'c';  // 'c' constant, 'd' dimension, else the binary operator
    int64_t value = 0;
    int input = 0, dim = 0;
    std::shared_ptr<const Node> a, b;
  };
  explicit DimExpr(std::shared_ptr<const Node> n) : n_(std::move(n)) {}
  template <class Leaf>
  static std::optional<int64_t> eval_with(const Node& n, Leaf&& leaf);
  std::shared_ptr<const Node> n_;
};

// A list of expressions as one prop string: "#0.0;197;(#1.1*6)".
std::string dim_exprs_to_string(const std::vector<DimExpr>& exprs);
std::vector<DimExpr> parse_dim_exprs(const std::string& text);

template <class F>
DimExpr DimExpr::remap(F&& remap_input) const {
  if (n_->op == 'c') return *this;
  if (n_->op == 'd') return dim(remap_input(n_->input), n_->dim);
  return binary(n_->op, DimExpr(n_->a).remap(remap_input), DimExpr(n_->b).remap(remap_input));
}

}  // namespace kiln
