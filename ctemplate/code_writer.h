#pragma once
// Builds generated source line by line with indentation, and remembers for every line
// which node and which line of which fragment produced it (the source map).
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct SourceOrigin {
  int node = -1;         // -1: linker boilerplate or shared support code
  std::string fragment;  // "c_code", "support_code", "init_code", "prelude kiln_index.h", ...
  int fragment_line = 0; // 1-based line within that fragment
};

class CodeWriter {
 public:
  void line(std::string_view text = "");
  // Appends a multi-line fragment of C laid out by its braces (lay_out_c), under the
  // writer's own indentation; each line is mapped to (node, kind, line).
  void fragment(std::string_view text, int node, std::string_view kind);
  // Appends a hand-written file (a prelude) as it is, mapped like a fragment.
  void verbatim(std::string_view text, int node, std::string_view kind);
  void indent() { ++depth_; }
  void dedent() { if (depth_ > 0) --depth_; }

  const std::string& str() const { return text_; }
  int line_count() const { return static_cast<int>(origins_.size()); }
  // Origin of a 1-based line of the output; nullptr when out of range.
  const SourceOrigin* origin(int line) const;
  const std::vector<SourceOrigin>& origins() const { return origins_; }

 private:
  void emit(std::string_view text, SourceOrigin origin);
  std::string text_;
  std::vector<SourceOrigin> origins_;
  int depth_ = 0;
};

}  // namespace kiln
