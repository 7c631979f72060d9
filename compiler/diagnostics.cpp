#include "compiler/diagnostics.h"

#include <clang-c/Index.h>
#include <dlfcn.h>

#include <mutex>

#include "util/fs.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

// libclang is opened on the first failed compile, not linked: in the global symbol scope
// its LLVM copy made every module dlopen ~2 ms slower, on the warm path that matters most.
struct LibClang {
#define KILN_CLANG_FN(name) decltype(&::name) name = nullptr;
#define KILN_CLANG_FNS                                                                         \
  KILN_CLANG_FN(clang_createIndex)                                                             \
  KILN_CLANG_FN(clang_disposeIndex) KILN_CLANG_FN(clang_parseTranslationUnit2)                 \
      KILN_CLANG_FN(clang_disposeTranslationUnit) KILN_CLANG_FN(clang_getNumDiagnostics)       \
          KILN_CLANG_FN(clang_getDiagnostic) KILN_CLANG_FN(clang_disposeDiagnostic)            \
              KILN_CLANG_FN(clang_getDiagnosticSeverity)                                       \
                  KILN_CLANG_FN(clang_getDiagnosticLocation)                                   \
                      KILN_CLANG_FN(clang_getSpellingLocation)                                 \
                          KILN_CLANG_FN(clang_getDiagnosticSpelling)                           \
                              KILN_CLANG_FN(clang_getFileName) KILN_CLANG_FN(clang_getCString) \
                                  KILN_CLANG_FN(clang_disposeString)
  KILN_CLANG_FNS
#undef KILN_CLANG_FN
  bool ok = false;
};

const LibClang& libclang() {
  static LibClang lib;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* name :
         {KILN_LIBCLANG_PATH, "libclang-14.so.1", "libclang.so.1", "libclang.so"}) {
      if ((h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!h) {
      warn(
          "libclang not found: compile errors are shown as the compiler printed them, not mapped "
          "to nodes");
      return;
    }
    bool all = true;
#define KILN_CLANG_FN(name)                                           \
  lib.name = reinterpret_cast<decltype(lib.name)>(::dlsym(h, #name)); \
  all = all && lib.name;
    KILN_CLANG_FNS
#undef KILN_CLANG_FN
    lib.ok = all;
  });
  return lib;
}

std::string take(const LibClang& lib, CXString s) {
  const char* c = lib.clang_getCString(s);
  std::string out = c ? c : "";
  lib.clang_disposeString(s);
  return out;
}

}  // namespace

std::vector<Diagnostic> parse_diagnostics(const std::filesystem::path& source,
                                          const std::vector<std::string>& args,
                                          const CodeWriter& map) {
  std::vector<Diagnostic> result;
  const LibClang& lib = libclang();
  if (!lib.ok) return result;
  std::vector<std::string> lines = split_lines(read_file(source));
  CXIndex index = lib.clang_createIndex(0, 0);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  CXTranslationUnit tu = nullptr;
  CXErrorCode rc = lib.clang_parseTranslationUnit2(index, source.c_str(), argv.data(),
                                                   static_cast<int>(argv.size()), nullptr, 0,
                                                   CXTranslationUnit_None, &tu);
  if (rc != CXError_Success || !tu) {
    if (debug_level() >= 2)
      log_line("libclang could not parse " + source.string() + " (code " + std::to_string(rc) +
               ")");
    lib.clang_disposeIndex(index);
    return result;
  }
  unsigned n = lib.clang_getNumDiagnostics(tu);
  if (debug_level() >= 2)
    log_line("libclang: " + std::to_string(n) + " diagnostics in " + source.string());
  for (unsigned i = 0; i < n; ++i) {
    CXDiagnostic d = lib.clang_getDiagnostic(tu, i);
    CXDiagnosticSeverity sev = lib.clang_getDiagnosticSeverity(d);
    if (sev < CXDiagnostic_Warning) {
      lib.clang_disposeDiagnostic(d);
      continue;
    }
    CXFile file;
    unsigned line = 0, column = 0, offset = 0;
    lib.clang_getSpellingLocation(lib.clang_getDiagnosticLocation(d), &file, &line, &column,
                                  &offset);
    Diagnostic diag;
    diag.severity =
        sev == CXDiagnostic_Warning ? "warning" : (sev == CXDiagnostic_Fatal ? "fatal" : "error");
    diag.message = take(lib, lib.clang_getDiagnosticSpelling(d));
    diag.line = static_cast<int>(line);
    diag.column = static_cast<int>(column);
    // Diagnostics inside system headers keep line 0 mapping; only our file is mapped.
    std::string fname = file ? take(lib, lib.clang_getFileName(file)) : "";
    if (std::filesystem::path(fname) == source) {
      if (const SourceOrigin* o = map.origin(diag.line)) diag.origin = *o;
      if (line >= 1 && line <= lines.size()) diag.source_line = lines[line - 1];
    }
    result.push_back(std::move(diag));
    lib.clang_disposeDiagnostic(d);
  }
  lib.clang_disposeTranslationUnit(tu);
  lib.clang_disposeIndex(index);
  return result;
}

}  // namespace kiln
