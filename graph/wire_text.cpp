#include "graph/wire_text.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace kiln {

void WireWriter::word(std::string_view s) {
  out_.append(std::to_string(s.size())).append(":").append(s).append(" ");
}

void WireWriter::num(int64_t v) { out_.append(std::to_string(v)).append(" "); }

void WireWriter::real(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  out_.append(buf).append(" ");
}

void WireWriter::ints(const std::vector<int>& v) {
  num(static_cast<int64_t>(v.size()));
  for (int i : v) num(i);
}

void WireWriter::attrs(const Attrs& attrs) {
  num(static_cast<int64_t>(attrs.size()));
  for (const auto& [name, value] : attrs) {
    word(name);
    if (const auto* i = std::get_if<int64_t>(&value)) {
      word("i");
      num(*i);
    } else if (const auto* f = std::get_if<double>(&value)) {
      word("f");
      real(*f);
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      word("s");
      word(*s);
    } else if (const auto* is = std::get_if<std::vector<int64_t>>(&value)) {
      word("I");
      num(static_cast<int64_t>(is->size()));
      for (int64_t x : *is) num(x);
    } else {
      const auto& fs = std::get<std::vector<double>>(value);
      word("F");
      num(static_cast<int64_t>(fs.size()));
      for (double x : fs) real(x);
    }
  }
}

void WireWriter::type(const TensorType& t) {
  num(static_cast<int64_t>(t.dtype));
  num(static_cast<int64_t>(t.dims.size()));
  for (int64_t d : t.dims) num(d);
}

void WireWriter::section(std::string_view name) {
  out_.append("\n");
  word(name);
}

WireReader::WireReader(const std::string& text, std::string_view magic, std::string where)
    : text_(text), where_(std::move(where)) {
  if (text_.compare(0, magic.size(), magic) != 0) {
    fail("does not start with '" + std::string(magic.substr(0, magic.find_last_not_of(" \n") + 1)) +
         "'");
  }
  pos_ = magic.size();
}

void WireReader::fail(const std::string& what) const {
  throw WireError(where_ + ": byte " + std::to_string(pos_) + ": " + what);
}

void WireReader::skip_blanks() {
  while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
}

std::string_view WireReader::token(const char* what) {
  skip_blanks();
  size_t end = pos_;
  while (end < text_.size() && text_[end] != ' ' && text_[end] != '\n') ++end;
  if (end == pos_) fail(std::string("expected ") + what);
  // Every value ends with a blank: text cut anywhere is refused, even after a whole number.
  if (end == text_.size()) fail(std::string("text ends inside ") + what);
  std::string_view t(text_.data() + pos_, end - pos_);
  pos_ = end;
  return t;
}

int64_t WireReader::num(const char* what) {
  std::string_view t = token(what);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) fail(std::string("bad number for ") + what);
  return v;
}

int WireReader::index(const char* what, int64_t limit) {
  const int64_t v = num(what);
  if (v < 0 || v >= limit) fail(std::string(what) + " " + std::to_string(v) + " out of range");
  return static_cast<int>(v);
}

size_t WireReader::count(const char* what, int64_t limit) {
  const int64_t n = num(what);
  if (n < 0 || n > limit || static_cast<size_t>(n) > (text_.size() - pos_) / 2 + 1) {
    fail(std::string("bad count for ") + what);
  }
  return static_cast<size_t>(n);
}

double WireReader::real(const char* what) {
  const std::string t(token(what));
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) fail(std::string("bad real for ") + what);
  return v;
}

std::string WireReader::word(const char* what) {
  skip_blanks();
  const size_t colon = text_.find(':', pos_);
  if (colon == std::string::npos || colon == pos_ || colon - pos_ > 12) {
    fail(std::string("expected ") + what);
  }
  int64_t n = 0;
  for (size_t i = pos_; i < colon; ++i) {
    if (text_[i] < '0' || text_[i] > '9') fail(std::string("expected ") + what);
    n = n * 10 + (text_[i] - '0');
  }
  if (static_cast<size_t>(n) > text_.size() - colon - 1) {
    fail(std::string(what) + " runs past the end");
  }
  pos_ = colon + 1 + static_cast<size_t>(n);
  // A word ends at a blank, as every value does.
  if (pos_ == text_.size() || (text_[pos_] != ' ' && text_[pos_] != '\n')) {
    fail(std::string("expected a blank after ") + what);
  }
  return text_.substr(colon + 1, static_cast<size_t>(n));
}

void WireReader::expect(const char* section) {
  const size_t at = pos_;
  if (word(section) != section) {
    pos_ = at;
    fail(std::string("expected section '") + section + "'");
  }
}

std::vector<int> WireReader::ints(const char* what, int64_t limit) {
  std::vector<int> v(count(what));
  for (int& i : v) i = index(what, limit);
  return v;
}

Attrs WireReader::attrs() {
  Attrs attrs;
  const size_t n = count("attributes");
  for (size_t i = 0; i < n; ++i) {
    std::string name = word("attribute name");
    const std::string tag = word("attribute kind");
    if (tag == "i") {
      attrs[name] = num("attribute");
    } else if (tag == "f") {
      attrs[name] = real("attribute");
    } else if (tag == "s") {
      attrs[name] = word("attribute");
    } else if (tag == "I") {
      std::vector<int64_t> v(count("attribute"));
      for (auto& x : v) x = num("attribute");
      attrs[name] = std::move(v);
    } else if (tag == "F") {
      std::vector<double> v(count("attribute"));
      for (auto& x : v) x = real("attribute");
      attrs[name] = std::move(v);
    } else {
      fail("unknown attribute kind '" + tag + "'");
    }
  }
  return attrs;
}

DType WireReader::dtype() {
  const int64_t d = num("dtype");
  if (d < 0 || d > static_cast<int64_t>(DType::kUInt64)) fail("bad dtype " + std::to_string(d));
  return static_cast<DType>(d);
}

std::vector<int64_t> WireReader::dims(int64_t max_rank) {
  std::vector<int64_t> d(count("rank", max_rank));
  for (auto& x : d) {
    x = num("dimension");
    if (x < kDynamic) fail("bad dimension " + std::to_string(x));
  }
  return d;
}

TensorType WireReader::type(int64_t max_rank) {
  TensorType t;
  t.dtype = dtype();
  t.dims = dims(max_rank);
  return t;
}

void WireReader::finish() {
  skip_blanks();
  if (pos_ != text_.size()) fail("unexpected text at the end");
}

}  // namespace kiln
