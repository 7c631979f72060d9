#include "ops/grad/derivative.h"

#include <cctype>
#include <cstdlib>

#include "util/error.h"

namespace kiln {
namespace {

// Recursive descent over: cmp := sum [op sum]; sum := term {+|- term};
// term := unary {*|/ unary}; unary := -unary | primary;
// primary := number | name | name(args) | (cmp).
class Parser {
 public:
  Parser(std::string_view text, const DerivativeEnv& env) : s_(text), env_(env) {}

  Var parse() {
    Var v = cmp();
    skip();
    if (i_ != s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InternalError("derivative \"" + std::string(s_) + "\" at offset " + std::to_string(i_) +
                        ": " + what);
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(std::string_view tok) {
    skip();
    if (s_.substr(i_, tok.size()) != tok) return false;
    i_ += tok.size();
    return true;
  }
  Var lit(double v) const { return scalar(env_.g.graph(), env_.g.dtype(), v); }

  Var cmp() {
    Var a = sum_expr();
    static const std::pair<std::string_view, const char*> kOps[] = {
        {"<=", "le"}, {">=", "ge"}, {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {">", "gt"}};
    for (const auto& [tok, op] : kOps) {
      if (eat(tok)) return apply(op, {a, sum_expr()});
    }
    return a;
  }
  Var sum_expr() {
    Var a = term();
    for (;;) {
      if (eat("+")) {
        a = add(a, term());
      } else if (eat("-")) {
        a = sub(a, term());
      } else {
        return a;
      }
    }
  }
  Var term() {
    Var a = unary();
    for (;;) {
      if (eat("*")) {
        a = mul(a, unary());
      } else if (eat("/")) {
        a = div(a, unary());
      } else {
        return a;
      }
    }
  }
  Var unary() {
    if (eat("-")) return neg(unary());
    return primary();
  }
  Var primary() {
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    if (eat("(")) {
      Var v = cmp();
      if (!eat(")")) fail("expected ')'");
      return v;
    }
    const char c = s_[i_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      const std::string rest(s_.substr(i_));
      char* end = nullptr;
      const double v = std::strtod(rest.c_str(), &end);
      i_ += static_cast<size_t>(end - rest.c_str());
      return lit(v);
    }
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != '_') fail("expected a value");
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_'))
      ++i_;
    const std::string name(s_.substr(start, i_ - start));
    if (eat("(")) {
      std::vector<Var> args;
      if (!eat(")")) {
        do {
          args.push_back(cmp());
        } while (eat(","));
        if (!eat(")")) fail("expected ')' after the arguments of " + name);
      }
      return kiln::apply(name, args);
    }
    if (name == "g") return env_.g;
    if (name == "y") return env_.y;
    if (name.size() == 2 && name[0] == 'x' && std::isdigit(static_cast<unsigned char>(name[1]))) {
      const size_t k = static_cast<size_t>(name[1] - '0');
      if (k >= env_.x.size()) fail("no input " + name);
      return env_.x[k];
    }
    const auto p = env_.params.find(name);
    if (p != env_.params.end()) return lit(p->second);
    fail("unknown name '" + name + "'");
  }

  std::string_view s_;
  const DerivativeEnv& env_;
  size_t i_ = 0;
};

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

Var build_derivative(std::string_view expr, const DerivativeEnv& env) {
  return Parser(expr, env).parse();
}

std::vector<std::string> split_derivatives(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t semi = text.find(';', start);
    out.push_back(trim(text.substr(start, semi == std::string_view::npos ? semi : semi - start)));
    if (semi == std::string_view::npos) return out;
    start = semi + 1;
  }
}

}  // namespace kiln
