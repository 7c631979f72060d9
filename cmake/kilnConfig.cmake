# find_package(kiln): the installed kiln's CMake targets. Today: kiln::op_library, the C
# header custom-op libraries build against (docs/op-libraries.md).
include("${CMAKE_CURRENT_LIST_DIR}/kilnTargets.cmake")
