#pragma once
// Maps a failed unit's diagnostics, as the C compiler printed them ("FILE.c:LINE:COL: error:
// ..."), through the unit's source map to the node and the fragment line that produced each.
// Read from the compiler's own output, not by parsing the unit again in this process: a unit
// that crashes a parser (a 600 KB line, nesting past any limit, an op library's fragment)
// then costs a clear compile error, never kiln itself.
#include <string>
#include <vector>

#include "ctemplate/code_writer.h"

namespace kiln {

struct Diagnostic {
  std::string severity;  // "error", "warning", "fatal"
  std::string message;
  int line = 0, column = 0;  // in the generated source
  SourceOrigin origin;       // node -1 when the line is linker boilerplate
  std::string source_line;   // the offending generated line (cut to a few hundred bytes)
};

// The diagnostics in `log` (clang's or gcc's output for one unit): those in the unit itself
// (a .c file) are mapped through `map`; those in headers keep no origin. Messages and source
// lines are cut short, so a huge line cannot make a huge error.
std::vector<Diagnostic> parse_diagnostics(const std::string& log, const CodeWriter& map);

}  // namespace kiln
