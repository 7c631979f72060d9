// kiln.cache's native half: the kernel cache as `kiln cache` shows it (stats, ls, verify,
// gc), on the folder compile() uses.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "cache/cache_store.h"
#include "python/src/bindings.h"
#include "util/fs.h"

namespace kiln::python {
namespace {

std::shared_ptr<CacheStore> store(const std::optional<std::string>& dir) {
  return CacheStore::open(dir ? std::filesystem::path(*dir) : cache_root());
}

}  // namespace

void bind_cache(nb::module_& m) {
  using namespace nb::literals;
  m.def("cache_root", [] { return cache_root().string(); });
  m.def(
      "cache_stats",
      [](std::optional<std::string> dir) {
        const IndexTotals t = store(dir)->stats();
        nb::dict d;
        d["entries"] = t.entries;
        d["bytes"] = t.bytes;
        d["hits"] = t.hits;
        d["misses"] = t.misses;
        d["compiles"] = t.compiles;
        d["saved_ms"] = t.saved_ms;
        d["kernels"] = t.kernels;
        d["kernel_bytes"] = t.kernel_bytes;
        d["kernel_hits"] = t.kernel_hits;
        d["kernel_compiles"] = t.kernel_compiles;
        return d;
      },
      "dir"_a = nb::none());
  m.def(
      "cache_ls",
      [](std::optional<std::string> dir) {
        nb::list out;
        for (const IndexRow& r : store(dir)->list()) {
          nb::dict d;
          d["key"] = r.key;
          d["label"] = r.label;
          d["family"] = r.family;
          d["size"] = r.size;
          d["created"] = r.created;
          d["last_used"] = r.last_used;
          d["compile_ms"] = r.compile_ms;
          d["hits"] = r.hits;
          out.append(d);
        }
        return out;
      },
      "dir"_a = nb::none());
  m.def(
      "cache_verify",
      [](std::optional<std::string> dir) {
        VerifyReport r;
        auto s = store(dir);
        {
          nb::gil_scoped_release release;
          r = s->verify_all();
        }
        nb::dict d;
        d["good"] = r.good;
        d["bad"] = r.bad;
        return d;
      },
      "dir"_a = nb::none());
  m.def(
      "cache_gc",
      [](std::optional<uint64_t> max_size, std::optional<double> max_age_s,
         std::optional<std::string> dir) {
        GcReport r;
        auto s = store(dir);
        {
          nb::gil_scoped_release release;
          r = s->gc(max_size, max_age_s);
        }
        nb::dict d;
        d["removed"] = r.removed;
        d["removed_bytes"] = r.removed_bytes;
        d["in_use"] = r.in_use;
        return d;
      },
      "max_size"_a = nb::none(), "max_age_s"_a = nb::none(), "dir"_a = nb::none());
}

}  // namespace kiln::python
