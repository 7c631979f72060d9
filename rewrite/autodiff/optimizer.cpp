#include "rewrite/autodiff/optimizer.h"

#include <cstdlib>

#include "ops/builders.h"
#include "rewrite/autodiff/grad.h"
#include "util/error.h"

namespace kiln {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t c = s.find(',', start);
    out.push_back(s.substr(start, c == std::string::npos ? c : c - start));
    if (c == std::string::npos) return out;
    start = c + 1;
  }
}

}  // namespace

OptimizerOptions OptimizerOptions::parse(const std::string& text) {
  OptimizerOptions o;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "sgd") {
    o.kind = Kind::kSgd;
  } else if (kind == "adam") {
    o.kind = Kind::kAdam;
    o.lr = 1e-3;
  } else {
    throw UserError("optimizer '" + kind + "': expected sgd or adam");
  }
  if (colon == std::string::npos) return o;
  for (const std::string& item : split_commas(text.substr(colon + 1))) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    char* end = nullptr;
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end) {
      throw UserError("optimizer '" + text + "': '" + item + "' is not NAME=NUMBER");
    }
    double* field = key == "lr"             ? &o.lr
                    : key == "momentum"     ? &o.momentum
                    : key == "weight_decay" ? &o.weight_decay
                    : key == "beta1"        ? &o.beta1
                    : key == "beta2"        ? &o.beta2
                    : key == "eps"          ? &o.eps
                                            : nullptr;
    if (!field) throw UserError("optimizer '" + text + "': unknown setting '" + key + "'");
    *field = v;
  }
  return o;
}

std::vector<Variable*> add_optimizer_step(Graph& g, Variable* loss,
                                          const std::vector<Variable*>& params,
                                          const OptimizerOptions& o) {
  const std::vector<Variable*> grads = grad(g, loss, params);
  std::vector<Variable*> state;
  auto state_like = [&](Variable* p, const std::string& suffix) {
    Var s = input(g, p->name + "." + suffix, p->type.dtype, p->type.dims);
    state.push_back(s.var());
    return s;
  };
  Var lr_t;  // Adam's step size with the bias corrections of this step
  if (o.kind == OptimizerOptions::Kind::kAdam) {
    const DType dt = params.empty() ? DType::kFloat32 : params[0]->type.dtype;
    Var t = input(g, "adam.step", dt, {});
    state.push_back(t.var());
    Var t1 = t + 1.0;
    g.add_update(t.var(), t1.var());
    Var b1 = scalar(g, dt, o.beta1), b2 = scalar(g, dt, o.beta2);
    lr_t = scalar(g, dt, o.lr) * sqrt(1.0 - pow(b2, t1)) / (1.0 - pow(b1, t1));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Var p(&g, params[i]), gp(&g, grads[i]);
    if (o.weight_decay != 0) gp = gp + p * o.weight_decay;
    if (o.kind == OptimizerOptions::Kind::kSgd) {
      if (o.momentum != 0) {
        Var v = state_like(params[i], "momentum");
        Var v1 = v * o.momentum + gp;
        g.add_update(v.var(), v1.var());
        gp = v1;
      }
      g.add_update(p.var(), (p - gp * o.lr).var());
    } else {
      Var m = state_like(params[i], "adam_m"), v = state_like(params[i], "adam_v");
      Var m1 = m * o.beta1 + gp * (1 - o.beta1);
      Var v1 = v * o.beta2 + gp * gp * (1 - o.beta2);
      g.add_update(m.var(), m1.var());
      g.add_update(v.var(), v1.var());
      // eps is added to the corrected sqrt(v) as in PyTorch: lr_t * m / (sqrt(v) + eps * sqrt(1 -
      // b2^t)).
      Var t1 = Var(&g, state[0]) + 1.0;
      Var eps_hat =
          scalar(g, p.dtype(), o.eps) * sqrt(1.0 - pow(scalar(g, p.dtype(), o.beta2), t1));
      g.add_update(p.var(), (p - lr_t * m1 / (sqrt(v1) + eps_hat)).var());
    }
  }
  return state;
}

}  // namespace kiln
