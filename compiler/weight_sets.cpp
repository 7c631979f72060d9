#include "compiler/weight_sets.h"

#include "compiler/entries/prepared_weights.h"

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

std::shared_ptr<const Program> WeightSets::program(const ModulePlan& plan, const Graph& given,
                                                   PreparedWeights* cache, std::string* how) {
  std::string source = plan.kept_steps().empty() ? "none needed" : "memory";
  struct Report {
    std::string& source;
    std::string* how;
    ~Report() {
      if (how) *how = source;
    }
  } report{source, how};
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
  if (prepared) {
    set.prepared = prepared->prepared;
    if (prepared->seeded) source = "prepared";
  } else if (cache && !plan.kept_steps().empty()) {
    // Another process may have prepared these very weights: their digest finds its entry.
    const std::string digest = weights_digest(plan, given);
    if (auto found = cache->find(plan, digest)) {
      set.prepared = std::move(*found);
      source = "cache";
    } else {
      set.prepared = plan.prepare(given);
      source = "prepared";
      cache->put(plan, digest, set.prepared);
    }
  } else {
    set.prepared = plan.prepare(given);
    if (source != "none needed") source = "prepared";
  }
  auto program = std::make_shared<const Program>(plan.program(given, set.prepared));
  set.program = program;
  set.sources = std::move(sources);
  remember(std::move(set));
  return program;
}

void WeightSets::seed(const ModulePlan& plan, const Graph& given, std::vector<Tensor> prepared,
                      PreparedWeights* cache) {
  if (cache && !plan.kept_steps().empty()) cache->put(plan, weights_digest(plan, given), prepared);
  std::lock_guard lock(mutex_);
  remember(Set{sources_of(given), std::move(prepared), {}, true});
}

}  // namespace kiln
