# Run by `cmake --install` (CMakeLists.txt): installs include/kiln/kiln.h, kiln's C++ API,
# and the headers it includes, found by asking the compiler for kiln.h's dependencies at
# install time, so the set follows the code. No other internal header is installed.
# Needs KILN_SOURCE_DIR, KILN_CXX and KILN_INCLUDEDIR (relative to the install prefix).
set(prefix "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
execute_process(
  COMMAND ${KILN_CXX} -std=c++20 -MM -I${KILN_SOURCE_DIR} -I${KILN_SOURCE_DIR}/include
          ${KILN_SOURCE_DIR}/include/kiln/kiln.h
  OUTPUT_VARIABLE deps ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "listing the headers kiln.h needs failed: ${err}")
endif()
string(REGEX REPLACE "\\\\\n" " " deps "${deps}")
string(REGEX REPLACE "^[^:]*:" "" deps "${deps}")
separate_arguments(deps UNIX_COMMAND "${deps}")
set(count 0)
foreach(f ${deps})
  file(REAL_PATH "${f}" f BASE_DIRECTORY "${KILN_SOURCE_DIR}")
  file(RELATIVE_PATH rel "${KILN_SOURCE_DIR}" "${f}")
  if(rel MATCHES "^\\.\\." OR IS_ABSOLUTE "${rel}")
    continue()  # a system or dependency header
  endif()
  if(rel MATCHES "^include/kiln/")
    string(REGEX REPLACE "^include/kiln/" "" rel "${rel}")
  endif()
  get_filename_component(dir "${rel}" DIRECTORY)
  file(INSTALL "${f}" DESTINATION "${prefix}/${KILN_INCLUDEDIR}/kiln/${dir}")
  math(EXPR count "${count} + 1")
endforeach()
message(STATUS "kiln: ${count} public headers (include/kiln/kiln.h and what it includes)")
