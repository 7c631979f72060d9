// kiln's C++ errors as a Python hierarchy: kiln.Error (a RuntimeError) with UserError,
// UnsupportedError (a UserError) and InternalError below it, each carrying kiln's message.
#include "python/src/bindings.h"
#include "util/error.h"

namespace kiln::python {

void bind_errors(nb::module_& m) {
  // Translators run newest first: the base goes first so a derived error finds its own.
  static nb::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static nb::exception<UserError> user(m, "UserError", error);
  static nb::exception<UnsupportedError> unsupported(m, "UnsupportedError", user);
  static nb::exception<InternalError> internal(m, "InternalError", error);
}

}  // namespace kiln::python
