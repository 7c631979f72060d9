#include "graph/dim_expr.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <stdexcept>

#include "util/error.h"
#include "util/strings.h"

namespace kiln {
namespace {

int64_t apply_op(char op, int64_t a, int64_t b) {
  switch (op) {
    case '+':
      return a + b;
    case '-':
      return a - b;
    case '*':
      return a * b;
    case '/':
      if (b == 0) throw UserError("a dimension expression divides by zero");
      return a / b;
    case '%': {
      if (b == 0) throw UserError("a dimension expression takes a remainder by zero");
      const int64_t r = a % b;
      return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
    }
    case 'm':
      return std::min(a, b);
    default:
      return std::max(a, b);
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  DimExpr parse_all() {
    DimExpr e = sum();
    skip();
    if (pos_ != text_.size()) fail("unexpected '" + std::string(1, text_[pos_]) + "'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError("dimension expression '" + std::string(text_) + "' at offset " +
                    std::to_string(pos_) + ": " + why);
  }
  void skip() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  int64_t number() {
    skip();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_) fail("expected a number");
    try {
      return std::stoll(std::string(text_.substr(start, pos_ - start)));
    } catch (const std::out_of_range&) {
      fail("the number does not fit in 64 bits");
    }
  }
  DimExpr sum() {
    DimExpr e = product();
    for (;;) {
      if (eat('+'))
        e = DimExpr::binary('+', e, product());
      else if (eat('-'))
        e = DimExpr::binary('-', e, product());
      else
        return e;
    }
  }
  DimExpr product() {
    DimExpr e = atom();
    for (;;) {
      if (eat('*'))
        e = DimExpr::binary('*', e, atom());
      else if (eat('/'))
        e = DimExpr::binary('/', e, atom());
      else if (eat('%'))
        e = DimExpr::binary('%', e, atom());
      else
        return e;
    }
  }
  DimExpr atom() {
    if (++depth_ > 64) fail("nested too deeply");
    DimExpr e = atom_inner();
    --depth_;
    return e;
  }
  DimExpr atom_inner() {
    if (eat('(')) {
      DimExpr e = sum();
      if (!eat(')')) fail("expected ')'");
      return e;
    }
    if (eat('-')) return DimExpr::binary('-', DimExpr::constant(0), atom());
    if (eat('#')) {
      const int64_t input = number();
      if (!eat('.')) fail("expected '.' after the input index");
      const int64_t d = number();
      if (input > 1024 || d > 16) fail("input or dimension index out of range");
      return DimExpr::dim(static_cast<int>(input), static_cast<int>(d));
    }
    skip();
    for (const char* fn : {"min", "max"}) {
      if (text_.substr(pos_, 3) == fn) {
        pos_ += 3;
        if (!eat('(')) fail("expected '('");
        DimExpr a = sum();
        if (!eat(',')) fail("expected ','");
        DimExpr b = sum();
        if (!eat(')')) fail("expected ')'");
        return DimExpr::binary(fn[1] == 'i' ? 'm' : 'M', a, b);
      }
    }
    return DimExpr::constant(number());
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

DimExpr DimExpr::constant(int64_t v) {
  auto n = std::make_shared<Node>();
  n->value = v;
  return DimExpr(n);
}

DimExpr DimExpr::dim(int input, int d) {
  auto n = std::make_shared<Node>();
  n->op = 'd';
  n->input = input;
  n->dim = d;
  return DimExpr(n);
}

DimExpr DimExpr::binary(char op, const DimExpr& a, const DimExpr& b) {
  const auto va = a.value(), vb = b.value();
  if (va && vb) return constant(apply_op(op, *va, *vb));
  if ((op == '+' && vb == 0) || (op == '-' && vb == 0) || ((op == '*' || op == '/') && vb == 1))
    return a;
  if ((op == '+' && va == 0) || (op == '*' && va == 1)) return b;
  auto n = std::make_shared<Node>();
  n->op = op;
  n->a = a.n_;
  n->b = b.n_;
  return DimExpr(n);
}

DimExpr DimExpr::parse(std::string_view text) { return Parser(text).parse_all(); }

std::optional<int64_t> DimExpr::value() const {
  if (n_->op == 'c') return n_->value;
  return std::nullopt;
}

std::optional<std::pair<int, int>> DimExpr::leaf() const {
  if (n_->op == 'd') return std::make_pair(n_->input, n_->dim);
  return std::nullopt;
}

template <class Leaf>
std::optional<int64_t> DimExpr::eval_with(const Node& n, Leaf&& leaf) {
  if (n.op == 'c') return n.value;
  if (n.op == 'd') return leaf(n.input, n.dim);
  auto a = eval_with(*n.a, leaf);
  auto b = eval_with(*n.b, leaf);
  if (!a || !b) return std::nullopt;
  return apply_op(n.op, *a, *b);
}

int64_t DimExpr::eval(const std::vector<Shape>& inputs) const {
  auto leaf = [&](int input, int d) -> std::optional<int64_t> {
    if (input >= static_cast<int>(inputs.size()) ||
        d >= static_cast<int>(inputs[static_cast<size_t>(input)].size())) {
      throw UserError("dimension expression " + str() + " reads dimension " + std::to_string(d) +
                      " of input " + std::to_string(input) + ", which does not exist");
    }
    return inputs[static_cast<size_t>(input)][static_cast<size_t>(d)];
  };
  try {
    return *eval_with(*n_, leaf);
  } catch (const UserError& e) {
    std::string sizes;
    for (const Shape& s : inputs) sizes += (sizes.empty() ? "" : ", ") + dims_to_string(s);
    throw UserError(std::string(e.what()) + ": " + str() + " with input shapes " + sizes);
  }
}

std::optional<int64_t> DimExpr::eval_static(const std::vector<TensorType>& inputs) const {
  return eval_with(*n_, [&](int input, int d) -> std::optional<int64_t> {
    if (input >= static_cast<int>(inputs.size()) ||
        d >= inputs[static_cast<size_t>(input)].rank()) {
      throw UserError("dimension expression " + str() + " reads dimension " + std::to_string(d) +
                      " of input " + std::to_string(input) + ", which does not exist");
    }
    const int64_t v = inputs[static_cast<size_t>(input)].dims[static_cast<size_t>(d)];
    return v == kDynamic ? std::nullopt : std::optional<int64_t>(v);
  });
}

std::string DimExpr::str() const {
  if (n_->op == 'c') return std::to_string(n_->value);
  if (n_->op == 'd') return "#" + std::to_string(n_->input) + "." + std::to_string(n_->dim);
  const std::string a = DimExpr(n_->a).str(), b = DimExpr(n_->b).str();
  if (n_->op == 'm' || n_->op == 'M')
    return std::string(n_->op == 'm' ? "min(" : "max(") + a + "," + b + ")";
  return "(" + a + n_->op + b + ")";
}

std::string DimExpr::c_expr(const std::vector<std::string>& inputs) const {
  if (n_->op == 'c') {
    if (n_->value == INT64_MIN) return "INT64_MIN";  // its literal would overflow
    return "INT64_C(" + std::to_string(n_->value) + ")";
  }
  if (n_->op == 'd') {
    check_internal(n_->input < static_cast<int>(inputs.size()), "dimension expression input");
    return inputs[static_cast<size_t>(n_->input)] + "->shape[" + std::to_string(n_->dim) + "]";
  }
  const std::string a = DimExpr(n_->a).c_expr(inputs), b = DimExpr(n_->b).c_expr(inputs);
  switch (n_->op) {
    case 'm':
      return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
    case 'M':
      return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
    case '%':
      // The divisor's sign, as ONNX Mod; shape rules ran first, so b is not 0.
      return "((" + a + " % " + b + " + " + b + ") % " + b + ")";
    default:
      return "(" + a + " " + n_->op + " " + b + ")";
  }
}

void DimExpr::leaves(std::vector<std::pair<int, int>>& out) const {
  if (n_->op == 'd') {
    out.emplace_back(n_->input, n_->dim);
  } else if (n_->op != 'c') {
    DimExpr(n_->a).leaves(out);
    DimExpr(n_->b).leaves(out);
  }
}

int DimExpr::max_input() const {
  std::vector<std::pair<int, int>> ls;
  leaves(ls);
  int m = -1;
  for (const auto& [input, d] : ls) m = std::max(m, input);
  return m;
}

std::string dim_exprs_to_string(const std::vector<DimExpr>& exprs) {
  std::string s;
  for (size_t i = 0; i < exprs.size(); ++i) s += (i ? ";" : "") + exprs[i].str();
  return s;
}

std::vector<DimExpr> parse_dim_exprs(const std::string& text) {
  std::vector<DimExpr> out;
  if (text.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(';', start);
    out.push_back(DimExpr::parse(std::string_view(text).substr(
        start, end == std::string::npos ? std::string::npos : end - start)));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace kiln
