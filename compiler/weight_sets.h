#pragma once
// The programs of one loaded module, per weight set. A weight set is the given graph's
// constant tensors (by storage, dtype and shape: new values mean new tensors). Preparing a
// set (ModulePlan::prepare: folding, packing) happens once; the prepared values of the last
// few sets are kept, and a program bound to a set is shared while some Function uses it.
#include <memory>
#include <mutex>
#include <vector>

#include "compiler/module_plan.h"

namespace kiln {

class PreparedWeights;

class WeightSets {
 public:
  // The program bound to `given`'s constants (which must fit the plan: UserError naming the
  // constant otherwise). A set not prepared in this process is looked up in `cache` (when
  // given) before it is prepared, and stored there after.
  // `how` (when given) says where the prepared values came from (CompileInfo::weights).
  std::shared_ptr<const Program> program(const ModulePlan& plan, const Graph& given,
                                         PreparedWeights* cache = nullptr,
                                         std::string* how = nullptr);
  // Records what a miss's rewrites prepared for `given`'s weights (ModulePlan::prepared_in),
  // and stores it in `cache` (when given) for the next process.
  void seed(const ModulePlan& plan, const Graph& given, std::vector<Tensor> prepared,
            PreparedWeights* cache = nullptr);

 private:
  struct Source {
    std::weak_ptr<Storage> storage;  // a freed storage expires, so a reused address is no match
    const void* data = nullptr;
    DType dtype = DType::kFloat32;
    Shape shape;
  };
  struct Set {
    std::vector<Source> sources;  // every constant of the given graph
    std::vector<Tensor> prepared;
    std::weak_ptr<const Program> program;
    bool seeded = false;  // prepared by the compile that just ran (reported as "prepared")
  };
  static constexpr size_t kSets = 2;
  static std::vector<Source> sources_of(const Graph& given);
  // Equal at `which` positions (all when null), and still alive.
  static bool same(const std::vector<Source>& a, const std::vector<Source>& b,
                   const std::vector<int>* which);
  void remember(Set set);

  std::mutex mutex_;
  std::vector<Set> sets_;  // most recent first
};

}  // namespace kiln
