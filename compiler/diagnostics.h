#pragma once
// Parses a failed module with libclang and maps each diagnostic through the source map to
// the node and the fragment line that produced it.
#include <filesystem>
#include <string>
#include <vector>

#include "ctemplate/code_writer.h"

namespace kiln {

struct Diagnostic {
  std::string severity;   // "error", "warning", "fatal"
  std::string message;
  int line = 0, column = 0;  // in the generated source
  SourceOrigin origin;       // node -1 when the line is linker boilerplate
  std::string source_line;   // the offending generated line
};

std::vector<Diagnostic> parse_diagnostics(const std::filesystem::path& source,
                                          const std::vector<std::string>& args,
                                          const CodeWriter& map);

}  // namespace kiln
