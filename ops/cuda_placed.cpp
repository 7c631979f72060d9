#include "ops/cuda_placed.h"

namespace kiln {

CudaPlaced::CudaPlaced(std::shared_ptr<const COp> inner)
    : COp("cuda:" + inner->name(), inner->props()), inner_(std::move(inner)) {}

std::string CudaPlaced::c_code(const Node& node, const CodeNames& names, const Sub& sub) const {
  return inner_->cuda_code(node, names, sub).launch;
}

}  // namespace kiln
