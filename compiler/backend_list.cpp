// The backends kiln has: the host, then each device's. Adding a backend adds its folders
// (ops/<name>/, compiler/<name>/, runtime/<name>/) and one line here.
#include "compiler/backend.h"
#include "compiler/cuda/cuda_backend.h"

namespace kiln {

namespace {

// The CPU: every node's C runs here; nothing is placed and no device unit is built.
class HostBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
};

}  // namespace

const std::vector<const Backend*>& all_backends() {
  static const HostBackend host;
  static const std::vector<const Backend*> backends{&host, &cuda_backend()};
  return backends;
}

}  // namespace kiln
