// kiln's in-process C compiler: clang's driver, front end and code generator run inside the
// kiln process, so a kernel compile does not start a compiler process. Starting clang 14 costs
// ~35 ms (mapping and relocating libLLVM) of a 40-120 ms kernel compile; kiln loads this
// library (dlopen) only when a kernel must be compiled, so cache hits never pay for LLVM.
//
// The command line is the one kiln would run as a process; the driver turns it into the same
// cc1 invocation clang's own executable runs in-process, so objects are byte-identical.
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

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

// Outcomes of kiln_clang_compile (kiln's compiler/c/inprocess_cc.h reads them).
constexpr int kCompiled = 0;
constexpr int kFailed = 1;      // diagnostics in the log: the code does not compile
constexpr int kNotHandled = 2;  // not one plain compile job, or a crash: run the process

int compile(const std::vector<const char*>& argv, const char* installed_dir, std::string& log) {
  llvm::raw_string_ostream os(log);
  llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> driver_opts = new clang::DiagnosticOptions();
  auto* driver_printer = new clang::TextDiagnosticPrinter(os, driver_opts.get());
  driver_printer->setPrefix("clang");
  clang::DiagnosticsEngine driver_diags(new clang::DiagnosticIDs(), driver_opts.get(),
                                        driver_printer);
  clang::driver::Driver driver(argv[0], llvm::sys::getDefaultTargetTriple(), driver_diags);
  // As the executable does: the resource dir from its real path, library paths from the name
  // it was started by.
  if (installed_dir && *installed_dir) driver.setInstalledDir(installed_dir);
  std::unique_ptr<clang::driver::Compilation> c(driver.BuildCompilation(argv));
  if (!c || driver_diags.hasErrorOccurred()) {
    os.flush();
    return kNotHandled;
  }
  const clang::driver::JobList& jobs = c->getJobs();
  if (jobs.size() != 1 || std::strcmp(jobs.begin()->getCreator().getName(), "clang") != 0) {
    return kNotHandled;
  }
  const llvm::opt::ArgStringList& cc1 = jobs.begin()->getArguments();

  auto ci = std::make_unique<clang::CompilerInstance>();
  clang::DiagnosticsEngine setup_diags(new clang::DiagnosticIDs(), driver_opts.get(),
                                       new clang::TextDiagnosticPrinter(os, driver_opts.get()));
  if (!clang::CompilerInvocation::CreateFromArgs(ci->getInvocation(), cc1, setup_diags, argv[0])) {
    os.flush();
    return kFailed;
  }
  // cc1 leaks its ASTs on purpose (the process exits next); here the process lives on.
  ci->getFrontendOpts().DisableFree = false;
  ci->getCodeGenOpts().DisableFree = false;
  ci->createDiagnostics(new clang::TextDiagnosticPrinter(os, &ci->getDiagnosticOpts()), true);
  // "N warnings generated." goes to the verbose stream, stderr by default: the log here.
  ci->setVerboseOutputStream(os);
  // The object goes to memory, then to its file here: a file clang opens itself is registered
  // for removal on a signal, which installs LLVM's signal handlers and an alternate signal
  // stack in this process (not LLVM's to own; AddressSanitizer's own stack collides with it).
  const std::string output = ci->getFrontendOpts().OutputFile;
  if (output.empty() || output == "-") return kNotHandled;
  llvm::SmallVector<char, 0> object;
  ci->setOutputStream(std::make_unique<llvm::raw_svector_ostream>(object));
  bool ok = false;
  // A fatal error in the backend exits through the recovery context instead of the process.
  llvm::CrashRecoveryContext recovery;
  if (!recovery.RunSafely([&] { ok = clang::ExecuteCompilerInvocation(ci.get()); })) {
    return kNotHandled;
  }
  if (ok) {
    std::error_code ec;
    llvm::raw_fd_ostream file(output, ec);
    if (!ec) {
      file.write(object.data(), object.size());
      file.close();
      ec = file.error();
    }
    if (ec) {
      os << "clang: error: cannot write '" << output << "': " << ec.message() << "\n";
      ok = false;
    }
  }
  os.flush();
  return ok ? kCompiled : kFailed;
}

}  // namespace

extern "C" {

// The version line `clang --version` prints first, e.g. "Debian clang version 14.0.6".
__attribute__((visibility("default"))) const char* kiln_clang_version() {
  static const std::string version = clang::getClangFullVersion();
  return version.c_str();
}

// The folder of the clang executable these libraries belong to (<llvm>/bin beside the
// <llvm>/lib that holds libclang-cpp): kiln runs in-process only what that clang would run.
__attribute__((visibility("default"))) const char* kiln_clang_bin_dir() {
  static const std::string dir = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&clang::getClangFullVersion), &info) == 0 ||
        !info.dli_fname)
      return std::string();
    char* real = realpath(info.dli_fname, nullptr);
    if (!real) return std::string();
    std::string lib(real);
    free(real);
    const size_t slash = lib.rfind('/');
    if (slash == std::string::npos) return std::string();
    const std::string lib_dir = lib.substr(0, slash);
    const size_t up = lib_dir.rfind('/');
    return up == std::string::npos ? std::string() : lib_dir.substr(0, up) + "/bin";
  }();
  return dir.c_str();
}

// Compiles the driver command line argv (argv[0]: the clang executable's real path); the
// diagnostics, as clang prints them, go to sink. Returns kCompiled, kFailed or kNotHandled.
__attribute__((visibility("default"))) int kiln_clang_compile(
    int argc, const char* const* argv, const char* installed_dir,
    void (*sink)(void* context, const char* text, size_t size), void* context) {
  static std::once_flag targets;
  std::call_once(targets, [] {
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    llvm::InitializeAllAsmParsers();
  });
  std::vector<const char*> args(argv, argv + argc);
  // The process's stderr may be a terminal; a compiler behind a pipe never colours.
  args.push_back("-fno-color-diagnostics");
  std::string log;
  int result = kNotHandled;
  try {
    result = compile(args, installed_dir, log);
  } catch (...) {
    result = kNotHandled;
  }
  if (sink && !log.empty()) sink(context, log.data(), log.size());
  return result;
}

}  // extern "C"
