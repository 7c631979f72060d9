#pragma once
// A module that does not compile: every diagnostic mapped to its node and fragment line.
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/diagnostics.h"
#include "util/error.h"

namespace kiln {

class CompileError : public UserError {
 public:
  CompileError(const std::string& message, std::vector<Diagnostic> diagnostics,
               std::filesystem::path kept_source)
      : UserError(message), diagnostics_(std::move(diagnostics)), kept_source_(std::move(kept_source)) {}
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }
  const std::filesystem::path& kept_source() const { return kept_source_; }

 private:
  std::vector<Diagnostic> diagnostics_;
  std::filesystem::path kept_source_;
};

}  // namespace kiln
