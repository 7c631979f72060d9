#include "compiler/diagnostics.h"

#include <clang-c/Index.h>

#include "util/fs.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

std::string take(CXString s) {
  const char* c = clang_getCString(s);
  std::string out = c ? c : "";
  clang_disposeString(s);
  return out;
}

}  // namespace

std::vector<Diagnostic> parse_diagnostics(const std::filesystem::path& source,
                                          const std::vector<std::string>& args,
                                          const CodeWriter& map) {
  std::vector<Diagnostic> result;
  std::vector<std::string> lines = split_lines(read_file(source));
  CXIndex index = clang_createIndex(0, 0);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  CXTranslationUnit tu = nullptr;
  CXErrorCode rc = clang_parseTranslationUnit2(index, source.c_str(), argv.data(),
                                               static_cast<int>(argv.size()), nullptr, 0,
                                               CXTranslationUnit_None, &tu);
  if (rc != CXError_Success || !tu) {
    if (debug_level() >= 2) log_line("libclang could not parse " + source.string() + " (code " + std::to_string(rc) + ")");
    clang_disposeIndex(index);
    return result;
  }
  unsigned n = clang_getNumDiagnostics(tu);
  if (debug_level() >= 2) log_line("libclang: " + std::to_string(n) + " diagnostics in " + source.string());
  for (unsigned i = 0; i < n; ++i) {
    CXDiagnostic d = clang_getDiagnostic(tu, i);
    CXDiagnosticSeverity sev = clang_getDiagnosticSeverity(d);
    if (sev < CXDiagnostic_Warning) {
      clang_disposeDiagnostic(d);
      continue;
    }
    CXFile file;
    unsigned line = 0, column = 0, offset = 0;
    clang_getSpellingLocation(clang_getDiagnosticLocation(d), &file, &line, &column, &offset);
    Diagnostic diag;
    diag.severity = sev == CXDiagnostic_Warning ? "warning" : (sev == CXDiagnostic_Fatal ? "fatal" : "error");
    diag.message = take(clang_getDiagnosticSpelling(d));
    diag.line = static_cast<int>(line);
    diag.column = static_cast<int>(column);
    // Diagnostics inside system headers keep line 0 mapping; only our file is mapped.
    std::string fname = file ? take(clang_getFileName(file)) : "";
    if (std::filesystem::path(fname) == source) {
      if (const SourceOrigin* o = map.origin(diag.line)) diag.origin = *o;
      if (line >= 1 && line <= lines.size()) diag.source_line = lines[line - 1];
    }
    result.push_back(std::move(diag));
    clang_disposeDiagnostic(d);
  }
  clang_disposeTranslationUnit(tu);
  clang_disposeIndex(index);
  return result;
}

}  // namespace kiln
