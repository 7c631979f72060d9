#pragma once
// The one text format kiln writes for data it reads back from files others may have touched
// (a cache entry's module plan, the custom-op bindings a module carries): words as
// "<length>:<bytes>", integers in decimal, reals as C99 hex floats (exact; inf and nan
// survive), each followed by one blank, and sections that start a line. The reader accepts
// exactly that (blanks between values may be runs of spaces and newlines) and refuses the rest with
// a WireError naming the text and the byte.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "graph/attrs.h"
#include "graph/tensor_type.h"
#include "util/error.h"

namespace kiln {

class WireError : public UserError {
 public:
  using UserError::UserError;
};

class WireWriter {
 public:
  explicit WireWriter(std::string_view magic) : out_(magic) {}
  void word(std::string_view s);
  void num(int64_t v);
  void real(double v);
  void ints(const std::vector<int>& v);  // count, then each
  void attrs(const Attrs& attrs);        // count, then name, kind (i f s I F) and value each
  void type(const TensorType& t);        // dtype, rank, dims
  void section(std::string_view name);   // a new line, then the name as a word
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  // Refuses text that does not start with `magic`; `where` names the text in every error.
  WireReader(const std::string& text, std::string_view magic, std::string where);
  [[noreturn]] void fail(const std::string& what) const;

  int64_t num(const char* what);
  // An integer in [0, limit).
  int index(const char* what, int64_t limit);
  // A count of items that follow, each at least two bytes: one larger than the rest of the
  // text could hold, or than `limit`, is refused before anything is allocated for it.
  size_t count(const char* what, int64_t limit = std::numeric_limits<int64_t>::max());
  double real(const char* what);
  std::string word(const char* what);
  void expect(const char* section);  // the word `section`, or an error naming it
  std::vector<int> ints(const char* what, int64_t limit);
  Attrs attrs();
  DType dtype();
  std::vector<int64_t> dims(int64_t max_rank = std::numeric_limits<int64_t>::max());
  TensorType type(int64_t max_rank = std::numeric_limits<int64_t>::max());
  void finish();  // nothing but blanks may follow

 private:
  void skip_blanks();
  std::string_view token(const char* what);
  const std::string& text_;
  std::string where_;
  size_t pos_ = 0;
};

}  // namespace kiln
