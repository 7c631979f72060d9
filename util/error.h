#pragma once
// kiln's two error families: a UserError is something the user can fix (bad model, bad
// shapes, bad op code, bad cache entry); an InternalError is a bug in kiln itself.
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UserError : public Error {
 public:
  using Error::Error;
};

// A valid model asks for something kiln does not implement (an op, an attribute value, a
// dtype); tools such as the ONNX conformance runner count these apart from failures.
class UnsupportedError : public UserError {
 public:
  using UserError::UserError;
};

// An allocation the machine could not make (a shape too large for memory, too many runs at
// once): the user can fix it with a smaller input or a larger machine, so it is a UserError;
// whoever knows the node or the value adds its name.
class OutOfMemoryError : public UserError {
 public:
  using UserError::UserError;
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& what) : Error("internal error: " + what) {}
};

// Throws InternalError when an invariant that kiln itself guarantees does not hold.
void check_internal(bool condition, const std::string& what);

}  // namespace kiln
