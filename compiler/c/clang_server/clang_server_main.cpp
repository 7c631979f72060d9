// kiln-clang-server: clang's driver, front end and code generator in a process that stays,
// compiling one C unit after another for a kiln process. Starting clang 14 costs ~35 ms
// (mapping and relocating libLLVM) of a 40-120 ms kernel compile; a server pays it once.
// A process of its own, not a library inside kiln: one compile at a time, no LLVM state in
// kiln's address space, and a crash costs kiln one fallback to a clang process.
//
// Protocol over stdin/stdout (native byte order, the same host), see compiler/c/clang_server.h:
//   hello (server):    str version, str bin_dir
//   request (kiln):    u32 argc, argc x str   (argv[0]: the clang executable's real path,
//                      then the installed dir the driver should assume, then the arguments)
//   response (server): i32 status, str diagnostics
// where str is u32 length + bytes. The server exits at end of input.
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Basic/Version.h>
#include <clang/Driver/Compilation.h>
#include <clang/Driver/Driver.h>
#include <clang/Driver/Job.h>
#include <clang/Driver/Tool.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/FrontendTool/Utils.h>
#include <llvm/Support/CrashRecoveryContext.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

// Response statuses (compiler/c/clang_server.cpp reads them).
constexpr int32_t kCompiled = 0;
constexpr int32_t kFailed = 1;      // diagnostics say why: the code does not compile
constexpr int32_t kNotHandled = 2;  // not one plain compile job: kiln runs a clang process

bool read_all(void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(0, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool write_all(const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(1, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_str(std::string& s) {
  uint32_t size = 0;
  if (!read_all(&size, sizeof size) || size > (64u << 20)) return false;
  s.resize(size);
  return read_all(s.data(), size);
}

bool write_str(const std::string& s) {
  const auto size = static_cast<uint32_t>(s.size());
  return write_all(&size, sizeof size) && write_all(s.data(), s.size());
}

// The folder of the clang executable these libraries belong to (<llvm>/bin beside the
// <llvm>/lib holding libclang-cpp): kiln uses the server only in place of that clang.
std::string bin_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&clang::getClangFullVersion), &info) == 0 ||
      !info.dli_fname)
    return {};
  char* real = realpath(info.dli_fname, nullptr);
  if (!real) return {};
  std::string lib(real);
  free(real);
  const size_t slash = lib.rfind('/');
  if (slash == std::string::npos) return {};
  const std::string lib_dir = lib.substr(0, slash);
  const size_t up = lib_dir.rfind('/');
  return up == std::string::npos ? std::string() : lib_dir.substr(0, up) + "/bin";
}

int32_t compile(const std::vector<const char*>& argv, const char* installed_dir, std::string& log) {
  llvm::raw_string_ostream os(log);
  llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> opts = new clang::DiagnosticOptions();
  auto* driver_printer = new clang::TextDiagnosticPrinter(os, opts.get());
  driver_printer->setPrefix("clang");
  clang::DiagnosticsEngine driver_diags(new clang::DiagnosticIDs(), opts.get(), driver_printer);
  clang::driver::Driver driver(argv[0], llvm::sys::getDefaultTargetTriple(), driver_diags);
  // As the executable does: the resource dir from its real path, library paths from the name
  // it was started by.
  if (*installed_dir) driver.setInstalledDir(installed_dir);
  std::unique_ptr<clang::driver::Compilation> c(driver.BuildCompilation(argv));
  if (!c || driver_diags.hasErrorOccurred()) return kNotHandled;
  const clang::driver::JobList& jobs = c->getJobs();
  if (jobs.size() != 1 || std::strcmp(jobs.begin()->getCreator().getName(), "clang") != 0)
    return kNotHandled;

  auto ci = std::make_unique<clang::CompilerInstance>();
  clang::DiagnosticsEngine setup_diags(new clang::DiagnosticIDs(), opts.get(),
                                       new clang::TextDiagnosticPrinter(os, opts.get()));
  if (!clang::CompilerInvocation::CreateFromArgs(ci->getInvocation(), jobs.begin()->getArguments(),
                                                 setup_diags, argv[0])) {
    os.flush();
    return kFailed;
  }
  // cc1 leaks its ASTs on purpose (its process exits next); this one compiles on.
  ci->getFrontendOpts().DisableFree = false;
  ci->getCodeGenOpts().DisableFree = false;
  ci->createDiagnostics(new clang::TextDiagnosticPrinter(os, &ci->getDiagnosticOpts()), true);
  // "N warnings generated." goes to the verbose stream (stderr by default): the log.
  ci->setVerboseOutputStream(os);
  bool ok = false;
  // A fatal error in the backend exits through the recovery context, not the process.
  llvm::CrashRecoveryContext recovery;
  if (!recovery.RunSafely([&] { ok = clang::ExecuteCompilerInvocation(ci.get()); }))
    return kNotHandled;
  os.flush();
  return ok ? kCompiled : kFailed;
}

}  // namespace

int main() {
  llvm::InitializeAllTargets();
  llvm::InitializeAllTargetMCs();
  llvm::InitializeAllAsmPrinters();
  llvm::InitializeAllAsmParsers();
  if (!write_str(clang::getClangFullVersion()) || !write_str(bin_dir())) return 1;
  for (;;) {
    uint32_t argc = 0;
    if (!read_all(&argc, sizeof argc)) return 0;  // kiln is done
    if (argc < 2 || argc > 4096) return 1;
    std::vector<std::string> args(argc);
    for (auto& a : args) {
      if (!read_str(a)) return 1;
    }
    std::vector<const char*> argv{args[0].c_str()};
    for (size_t i = 2; i < args.size(); ++i) argv.push_back(args[i].c_str());
    // kiln's stderr may be a terminal; a compiler behind a pipe never colours.
    argv.push_back("-fno-color-diagnostics");
    std::string log;
    int32_t status = kNotHandled;
    try {
      status = compile(argv, args[1].c_str(), log);
    } catch (...) {
      status = kNotHandled;
    }
    if (!write_all(&status, sizeof status) || !write_str(log)) return 1;
  }
}
