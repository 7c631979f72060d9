# find_package(kiln): the installed kiln's CMake targets.
#   kiln::kiln        the C++ API (libkiln.so): #include <kiln/kiln.h> for load_model,
#                     compile, Function, the graph builder, grad and training
#   kiln::op_library  the C header custom-op libraries build against (docs/op-libraries.md)
include("${CMAKE_CURRENT_LIST_DIR}/kilnTargets.cmake")
