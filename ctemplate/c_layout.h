#pragma once
// Lays out a fragment of generated C by its structure, not by the spaces its emitter put in
// front of each line: one level per open brace, one per braceless `for`/`if`/`while`/`else`
// header awaiting its statement, two for a line inside an unclosed parenthesis. Emitters
// build code from strings; this gives every module one consistent indentation.
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// The lines of `text` (C), each with its indentation in levels from the fragment's own 0.
// Preprocessor lines and the lines a backslash continues are kept verbatim.
struct LaidOutLine {
  int level = 0;
  std::string text;       // without leading blanks, unless verbatim
  bool verbatim = false;  // a preprocessor line: its text as written, at column 0
};
std::vector<LaidOutLine> lay_out_c(std::string_view text);
// The same as text, two spaces a level: what the writer emits at depth 0, so that code whose
// emitters differ only in spacing is the same text (and the same kernel).
std::string lay_out_c_text(std::string_view text);

}  // namespace kiln
