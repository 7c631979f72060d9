#include "compiler/c/kernel_build.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "cache/cache_store.h"
#include "compiler/entries/remote_entries.h"
#include "compiler/entries/entry_layout.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/sha256.h"
#include "util/strings.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

KeyComponents kernel_components(const Toolchain& toolchain, const CKernel& kernel) {
  KeyComponents c = toolchain.key_components();
  c.emplace_back("kernel.args", join(kernel.compile_args, " "));
  c.emplace_back("kernel.source", sha256_hex(kernel.code.str()));
  return c;
}

// One unit to compile: a kernel not in the cache, or the binding.
struct Job {
  int kernel = -1;        // index into c_kernels; -1: the binding
  bool assemble = false;  // the binding as assembler (binding.c stays as the fallback)
  fs::path source, object;
  std::unique_ptr<WorkFolder> staging;  // a kernel's cache staging folder, when it is stored
  CompileOutcome outcome;
};

// Runs every job's compile in `order`, `jobs` at a time.
void run_jobs(std::vector<Job>& list, const std::vector<size_t>& order, const Toolchain& toolchain,
              const LinkedModule& linked, int jobs) {
  std::atomic<size_t> next{0};
  Progress progress("compiling kernels", static_cast<int>(list.size()));
  struct Stepped {
    Progress& progress;
    ~Stepped() { progress.step(); }
  };
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < list.size();) {
      const Stepped stepped{progress};
      Job& job = list[order[i]];
      const auto& args = job.kernel < 0
                             ? linked.compile_args
                             : linked.c_kernels[static_cast<size_t>(job.kernel)].compile_args;
      try {
        if (job.assemble) {
          job.outcome = toolchain.assemble(job.source.parent_path() / "binding.s", job.object);
          if (job.outcome.ok) continue;
          // No assembler, or one that refuses the text: the C binding says the same.
          if (debug_level() >= 1)
            log_line("binding.s not assembled (" + job.outcome.log + "); compiling binding.c");
        }
        job.outcome = toolchain.compile_object(job.source, job.object, args);
      } catch (const std::exception& e) {
        job.outcome.ok = false;
        job.outcome.log = e.what();
      }
    }
  };
  const size_t threads = std::min(list.size(), static_cast<size_t>(std::max(jobs, 1)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace

int compile_jobs() {
  if (const char* env = std::getenv("KILN_JOBS"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > 1024) {
      throw UserError(std::string("KILN_JOBS: '") + env +
                      "' is not a count of compile jobs (1 to 1024)");
    }
    return static_cast<int>(n);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string kernel_key(const Toolchain& toolchain, const CKernel& kernel) {
  return artifact_key(kernel_components(toolchain, kernel));
}

std::optional<UnitFailure> build_from_kernels(const LinkedModule& linked,
                                              const Toolchain& toolchain, CacheStore* store,
                                              const fs::path& dir, CompileInfo& info) {
  check_internal(linked.mode == LinkMode::kKernels, "build_from_kernels: not a kernel module");
  const auto start = Clock::now();
  const bool cached = store && store->writable();
  KernelReport& report = info.kernels;
  report.kernels = static_cast<int>(linked.c_kernels.size());
  report.jobs = compile_jobs();

  // Kernels already in the cache stay pinned until the module is linked.
  std::vector<CacheEntry> pins;
  std::vector<fs::path> objects(linked.c_kernels.size());
  std::vector<std::string> keys(linked.c_kernels.size());
  std::vector<Job> list;
  const fs::path own = dir / "kernels";
  for (size_t i = 0; i < linked.c_kernels.size(); ++i) {
    const CKernel& k = linked.c_kernels[i];
    keys[i] = kernel_key(toolchain, k);
    if (cached) {
      LookupResult r = store->lookup(keys[i], true);
      // Not here: another machine may have compiled it (for this model or another one).
      if (!r.entry) {
        if (auto fetched = fetch_from_remote(*store, keys[i])) {
          r.entry = std::move(fetched);
          ++report.fetched;
        }
      }
      if (r.entry && r.entry->meta.file("kernel.o")) {
        objects[i] = r.entry->file("kernel.o");
        pins.push_back(std::move(*r.entry));
        ++report.reused;
        continue;
      }
    }
    Job job;
    job.kernel = static_cast<int>(i);
    fs::path folder = own;
    if (cached) {
      job.staging = std::make_unique<WorkFolder>(store->new_staging(keys[i]));
      folder = job.staging->path();
    } else {
      fs::create_directories(own);
    }
    const std::string base = cached ? "kernel" : k.symbol;
    job.source = folder / (base + ".c");
    job.object = folder / (base + ".o");
    write_file_atomic(job.source, k.code.str());
    list.push_back(std::move(job));
  }
  Job binding;
  binding.source = dir / "binding.c";
  binding.object = dir / "binding.o";
  write_file_atomic(binding.source, linked.binding.str());
  if (!linked.binding_asm.empty()) {
    write_file_atomic(dir / "binding.s", linked.binding_asm);
    binding.assemble = true;
  }
  list.push_back(std::move(binding));

  // Longest first (by source size, a fair proxy for compile time): the last job to start is
  // a short one, so the cores finish together.
  std::vector<size_t> sizes;
  for (const Job& job : list) sizes.push_back(fs::file_size(job.source));
  std::vector<size_t> order(list.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  auto t = Clock::now();
  run_jobs(list, order, toolchain, linked, report.jobs);
  info.times.kernels_ms = ms_since(t);

  std::optional<UnitFailure> failure;
  for (Job& job : list) {
    if (!job.outcome.log.empty()) info.compiler_log += job.outcome.log;
    if (job.kernel < 0) {
      info.times.binding_ms = job.outcome.seconds * 1000;
      if (!job.outcome.ok && !failure) {
        failure = UnitFailure{"binding.c", &linked.binding, linked.compile_args, job.outcome.log};
      }
      continue;
    }
    const CKernel& k = linked.c_kernels[static_cast<size_t>(job.kernel)];
    report.compile_ms.emplace_back(k.symbol + " (" + k.op + ")", job.outcome.seconds * 1000);
    if (!job.outcome.ok) {
      if (!failure)
        failure = UnitFailure{k.symbol + ".c", &k.code, k.compile_args, job.outcome.log};
      continue;
    }
    ++report.compiled;
    if (job.outcome.served) ++report.served;
    const size_t i = static_cast<size_t>(job.kernel);
    if (!job.staging) {
      objects[i] = job.object;
      continue;
    }
    // Published even when another unit failed: a good kernel is good for the next build.
    EntryMeta meta;
    meta.key = keys[i];
    meta.label = k.symbol;
    meta.family = kKernelFamily;
    meta.summary = "kernel (" + k.op + ")";
    meta.created = unix_now();
    meta.compile_ms = job.outcome.seconds * 1000;
    meta.components = kernel_components(toolchain, k);
    for (const auto& f : kernel_entry_files()) meta.files.push_back(FileRecord{f, 0, ""});
    CacheEntry entry = store->publish(std::move(*job.staging), std::move(meta));
    upload_to_remote(*store, entry);  // for the next machine's model that shares it
    objects[i] = entry.file("kernel.o");
    pins.push_back(std::move(entry));
  }
  if (failure) return failure;

  t = Clock::now();
  std::vector<fs::path> all{dir / "binding.o"};
  all.insert(all.end(), objects.begin(), objects.end());
  CompileOutcome l = toolchain.link(all, dir / "module.so", linked.libraries);
  info.times.link_ms = ms_since(t);
  std::error_code ec;
  fs::remove(dir / "binding.o", ec);
  fs::remove(dir / "binding.c", ec);
  fs::remove(dir / "binding.s", ec);
  if (!cached) fs::remove_all(own, ec);
  if (!l.ok) return UnitFailure{"module.c", &linked.code, linked.compile_args, l.log};
  if (!l.log.empty()) info.compiler_log += l.log;
  info.times.compile_ms = ms_since(start);
  if (debug_level() >= 2) {
    log_line("kernels: " + std::to_string(report.reused) + " reused, " +
             std::to_string(report.compiled) + " compiled (" + std::to_string(report.jobs) +
             " jobs)");
  }
  return std::nullopt;
}

}  // namespace kiln
