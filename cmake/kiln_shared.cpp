// libkiln.so is kiln's archives linked whole (CMakeLists.txt, kiln_shared); a shared
// library target needs one source of its own.
