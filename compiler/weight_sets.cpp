#include "compiler/weight_sets.h"

namespace kiln {

std::vector<WeightSets::Source> WeightSets::sources_of(const Graph& given) {
  std::vector<Source> out;
  out.reserve(given.constants().size());
  for (const Variable* c : given.constants()) {
    Source s;
    if (c->value) {
      s.storage = c->value->storage();
      s.data = c->value->data();
      s.dtype = c->value->dtype();
      s.shape = c->value->shape();
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool WeightSets::same(const std::vector<Source>& a, const std::vector<Source>& b,
                      const std::vector<int>* which) {
  if (a.size() != b.size()) return false;
  auto equal = [&](size_t i) {
    return a[i].data == b[i].data && a[i].dtype == b[i].dtype && a[i].shape == b[i].shape &&
           !a[i].storage.expired();
  };
  if (which) {
    for (int i : *which) {
      if (!equal(static_cast<size_t>(i))) return false;
    }
    return true;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (!equal(i)) return false;
  }
  return true;
}

void WeightSets::remember(Set set) {
  sets_.insert(sets_.begin(), std::move(set));
  if (sets_.size() > kSets) sets_.pop_back();
}

std::shared_ptr<const Program> WeightSets::program(const ModulePlan& plan, const Graph& given) {
  std::vector<Source> sources = sources_of(given);
  std::lock_guard lock(mutex_);
  for (Set& set : sets_) {
    if (!same(set.sources, sources, nullptr)) continue;
    if (auto p = set.program.lock()) return p;
  }
  plan.check_sources(given);
  const Set* prepared = nullptr;
  for (const Set& set : sets_) {
    if (same(set.sources, sources, &plan.prepared_from())) {
      prepared = &set;
      break;
    }
  }
  Set set;
  set.prepared = prepared ? prepared->prepared : plan.prepare(given);
  auto program = std::make_shared<const Program>(plan.program(given, set.prepared));
  set.program = program;
  set.sources = std::move(sources);
  remember(std::move(set));
  return program;
}

void WeightSets::seed(const Graph& given, std::vector<Tensor> prepared) {
  std::lock_guard lock(mutex_);
  remember(Set{sources_of(given), std::move(prepared), {}});
}

}  // namespace kiln
