#include "tests/helpers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "util/strings.h"

namespace kiln::testing {

namespace {
// kiln remembers the compiler probe in the user's default cache: tests (and the kiln
// processes they start) use a folder of the build instead, emptied by test_cache_reset.
const bool kTestHomeCache = [] {
  ::setenv("XDG_CACHE_HOME", KILN_TEST_HOME_CACHE, 1);
  return true;
}();
}  // namespace

Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) {
    x = dist(rng);
    if (dtype == DType::kBool)
      x = x > (lo + hi) / 2 ? 1 : 0;
    else if (!is_float(dtype))
      x = std::round(x);
  }
  return Tensor::from_doubles(dtype, shape, v);
}

Tensor non_contiguous(const Tensor& t) {
  if (t.ndim() < 2) {
    // Every other element of a buffer twice as long.
    Shape big = t.shape();
    if (big.empty()) return t;
    big[0] *= 2;
    Tensor b = Tensor::zeros(t.dtype(), big);
    Tensor view = b.slice(0, 0, big[0], 2);
    copy_into(t, view);
    return view;
  }
  // Store the transpose contiguously, then view it transposed back.
  std::vector<int> perm(static_cast<size_t>(t.ndim()));
  for (int i = 0; i < t.ndim(); ++i) perm[static_cast<size_t>(i)] = t.ndim() - 1 - i;
  Tensor stored = t.permute(perm).clone();
  return stored.permute(perm);
}

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double rtol,
                                         double atol) {
  if (actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure()
           << "dtype " << dtype_name(actual.dtype()) << " vs " << dtype_name(expected.dtype());
  }
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << dims_to_string(actual.shape()) << " vs "
                                         << dims_to_string(expected.shape());
  }
  const bool exact = !is_float(actual.dtype());
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (exact) {
      if (actual.load_int(i) != expected.load_int(i)) {
        return ::testing::AssertionFailure() << "element " << i << ": " << actual.load_int(i)
                                             << " vs expected " << expected.load_int(i);
      }
      continue;
    }
    double a = actual.load(i), e = expected.load(i);
    if (std::isnan(e) && std::isnan(a)) continue;
    if (std::isinf(e) || std::isinf(a)) {
      if (a == e) continue;
    } else if (std::fabs(a - e) <= atol + rtol * std::fabs(e)) {
      continue;
    }
    return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs expected " << e;
  }
  return ::testing::AssertionSuccess();
}

namespace {

// The folders temp_dir made in this process. A run whose tests all passed removes them as it
// exits; a failing run keeps them to be looked at (a whole suite left gigabytes behind).
std::vector<std::filesystem::path>& made_folders() {
  static std::vector<std::filesystem::path> folders;
  return folders;
}

pid_t g_owner = 0;  // a forked child that exits must not remove its parent's folders

void remove_made_folders() {
  if (::getpid() != g_owner) return;
  const auto* unit = ::testing::UnitTest::GetInstance();
  if (!unit || !unit->Passed()) return;
  std::error_code ec;
  for (const auto& dir : made_folders()) std::filesystem::remove_all(dir, ec);
}

}  // namespace

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kiln-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  static std::once_flag registered;
  std::call_once(registered, [] {
    g_owner = ::getpid();
    made_folders();  // constructed first, so destroyed after the handler has run
    std::atexit(remove_made_folders);
  });
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  made_folders().push_back(dir);
  return dir.string();
}

std::string kiln_binary() {
  const char* other = std::getenv("KILN_TEST_BINARY");
  return other && *other ? other : KILN_BINARY;
}

ProcessResult kiln_env(const std::vector<std::string>& env, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(kiln_binary());
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv);
}

}  // namespace kiln::testing
