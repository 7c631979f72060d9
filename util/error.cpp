#include "util/error.h"

namespace kiln {

void check_internal(bool condition, const std::string& what) {
  if (!condition) throw InternalError(what);
}

}  // namespace kiln
