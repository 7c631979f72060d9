# find_package(kiln): the installed kiln's CMake targets.
#   kiln::kiln        the C++ API (libkiln.so): load_model, compile, Function, the graph
#                     builder; headers as "compiler/compile.h", "frontend/model_loader.h"
#   kiln::op_library  the C header custom-op libraries build against (docs/op-libraries.md)
include("${CMAKE_CURRENT_LIST_DIR}/kilnTargets.cmake")
