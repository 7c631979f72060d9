// Runs the ONNX backend node tests: for every case (DIR/test_*/model.onnx with
// test_data_set_*/input_*.pb and output_*.pb) whose ops kiln supports, compiles the model,
// runs each data set and compares with the expected outputs (float32 and narrower: rtol
// 1e-3, atol 1e-5; float64: rtol 1e-9, atol 1e-12; exact for integers and booleans).
// Every case runs in a process of its own, so a crash is that case's failure. Prints
// "N passed, N failed, N refused" — failed: a wrong value, an error that is not a clear
// refusal, or a crash; refused: kiln's UnsupportedError naming what it lacks — and every
// failure; exits 1 when a case fails.
//
// With --expect FILE (tests/onnx_expected.txt), the outcome of every case must be the one
// listed: "pass NAME", or "refuse NAME: reason". A listed pass that fails or is refused, a
// listed refusal that now passes, and a case the list does not know are each a failure, so
// a regression that starts refusing cases cannot hide among the unsupported ones.
// --write-expected FILE writes the list from this run.
//
// A case whose model draws random numbers (Bernoulli, the Random* ops, training Dropout)
// expects numpy's draws, which no other generator reproduces: its outputs must have the
// expected dtype and shape, every element must equal the expected one or be 0 where one of
// the two draws dropped it (a kept value scaled exactly as numpy's), and an output of zeros
// and ones must stay zeros and ones. tests/random_test.cpp checks the draws' distributions.
//
//   onnx_conformance [--jobs N] [--filter SUBSTR] [--list-unsupported]
//                    [--expect FILE | --write-expected FILE] DIR
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compile.h"
#include "compiler/entries/background_stores.h"
#include "frontend/model_function.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_tensor.h"
#include "util/error.h"
#include "util/fs.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

enum class Outcome { kPassed, kFailed, kUnsupported };

struct Result {
  std::string name;
  Outcome outcome = Outcome::kPassed;
  std::string detail;
};

// NumPy has no bfloat16: the node tests store bfloat16 tensors as their uint16 bit patterns.
Tensor as_bits(const Tensor& t, DType dtype) {
  if (t.dtype() == DType::kUInt16 && dtype == DType::kBFloat16)
    return Tensor(t.contiguous().storage(), 0, DType::kBFloat16, t.shape(),
                  t.contiguous().strides());
  return t;
}

// The random cases' rule (see the top of the file).
std::string compare_draws(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return "dtype and shape " + got.describe() + ", expected " + want.describe();
  bool binary = true;
  for (int64_t i = 0; i < want.numel(); ++i) binary = binary && (want.load(i) == 0 || want.load(i) == 1);
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.load(i), w = want.load(i);
    const bool ok = binary ? (g == 0 || g == 1) : (g == 0 || w == 0 || std::fabs(g - w) <= 1e-5 + 1e-3 * std::fabs(w));
    if (!ok) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %lld is %.17g, expected %.17g or a dropped 0",
                    static_cast<long long>(i), g, w);
      return buf;
    }
  }
  return "";
}

std::string compare(const Tensor& got_in, const Tensor& want_in) {
  const Tensor got =
      got_in.dtype() == DType::kBFloat16 ? as_bits(got_in, DType::kBFloat16) : got_in;
  const Tensor want = as_bits(want_in, got_in.dtype());
  if (got.dtype() != want.dtype()) {
    return "dtype " + std::string(dtype_name(got.dtype())) + ", expected " +
           std::string(dtype_name(want.dtype()));
  }
  if (got.shape() != want.shape())
    return "shape " + got.describe() + ", expected " + want.describe();
  const bool exact = !is_float(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (exact) {
      if (got.load_int(i) != want.load_int(i)) {
        return "element " + std::to_string(i) + " is " + std::to_string(got.load_int(i)) +
               ", expected " + std::to_string(want.load_int(i));
      }
      continue;
    }
    const double g = got.load(i), w = want.load(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    // Compared at the output type's precision: bfloat16 keeps 8 significant bits, so one
    // unit in the last place (2^-7 relative) separates rounding from truncation (the node
    // tests of ONNX 1.12 truncate float32 to bfloat16; kiln rounds to nearest even, as
    // onnxruntime and later ONNX versions do).
    const bool f64 = want.dtype() == DType::kFloat64, bf16 = want.dtype() == DType::kBFloat16;
    const double atol = f64 ? 1e-12 : 1e-5, rtol = f64 ? 1e-9 : bf16 ? 1.0 / 128 : 1e-3;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %lld is %.17g, expected %.17g",
                    static_cast<long long>(i), g, w);
      return buf;
    }
  }
  return "";
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0 && e.path().extension() == ".pb") {
      files.emplace_back(std::stoi(n.substr(prefix.size())), e.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<fs::path> out;
  for (auto& f : files) out.push_back(f.second);
  return out;
}

// Cases whose expected outputs contradict their own model: refused with the reason, rather
// than counted as kiln's failure. Each was checked by hand: with the model corrected as said,
// kiln's outputs match the expected ones.
const std::map<std::string, std::string>& data_quirks() {
  static const std::map<std::string, std::string> q{
      {"test_adam_multiple",
       "the expected outputs use epsilon = 0.01, which the model's Adam node does not set "
       "(the schema's default is 1e-6); with epsilon = 0.01 added, kiln matches them"}};
  return q;
}

// One data set of a model taking or giving sequences or optionals: each value compared
// element by element, an empty optional only with an empty one.
void run_composite_set(ModelFunction& f, const fs::path& set, const std::vector<ValueKind>& kinds) {
  std::map<std::string, ModelValue> inputs;
  const auto in_files = sorted_files(set, "input_");
  for (size_t i = 0; i < in_files.size() && i < f.inputs().size(); ++i)
    inputs[f.inputs()[i].name] = load_onnx_value_file(in_files[i], f.inputs()[i].kind);
  const std::vector<ModelValue> got = f.run_values(inputs);
  const auto out_files = sorted_files(set, "output_");
  if (got.size() != out_files.size()) {
    throw UserError(std::to_string(got.size()) + " outputs, expected " +
                    std::to_string(out_files.size()));
  }
  for (size_t k = 0; k < out_files.size(); ++k) {
    const ModelValue want = load_onnx_value_file(out_files[k], kinds.at(k));
    const std::string where = set.filename().string() + " output " + std::to_string(k);
    if (got[k].structure().str() != want.structure().str())
      throw UserError(where + " is " + got[k].describe() + ", expected " + want.describe());
    for (size_t e = 0; e < want.tensors.size(); ++e) {
      const std::string diff = compare(got[k].tensors[e], want.tensors[e]);
      if (!diff.empty()) throw UserError(where + " element " + std::to_string(e) + ": " + diff);
    }
  }
}

Result run_case(const fs::path& dir) {
  Result r{dir.filename().string(), Outcome::kPassed, ""};
  if (auto q = data_quirks().find(r.name); q != data_quirks().end()) {
    r.outcome = Outcome::kUnsupported;
    r.detail = "the case's data contradicts its model: " + q->second;
    return r;
  }
  std::unique_ptr<ModelFunction> model;
  try {
    // A model whose graph depends on an input's value is built per data set's values.
    model = std::make_unique<ModelFunction>(dir / "model.onnx");
  } catch (const UnsupportedError& e) {
    r.outcome = Outcome::kUnsupported;
    r.detail = e.what();
    return r;
  } catch (const Error& e) {
    r.outcome = Outcome::kFailed;
    r.detail = std::string("load: ") + e.what();
    return r;
  }
  try {
    ModelFunction& f = *model;
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
        sets.push_back(e.path());
    }
    std::sort(sets.begin(), sets.end());
    // Sequences and optionals go through run_values; tensors through the positional call.
    const std::vector<ValueKind> out_kinds =
        onnx_output_kinds(read_file(dir / "model.onnx"), (dir / "model.onnx").string());
    bool composite = false;
    for (const ModelInput& in : f.inputs()) composite = composite || in.kind != ValueKind::kTensor;
    for (ValueKind k : out_kinds) composite = composite || k != ValueKind::kTensor;
    for (const auto& set : sets) {
      if (composite) {
        run_composite_set(f, set, out_kinds);
        continue;
      }
      std::vector<Tensor> inputs;
      for (const auto& p : sorted_files(set, "input_")) {
        const size_t i = inputs.size();
        Tensor t = load_onnx_tensor_file(p);
        if (i < f.inputs().size()) {
          t = as_bits(t, f.inputs()[i].type.dtype);
          if (!f.inputs()[i].type.accepts(t.shape())) {
            // The case's own data contradicts its model; kiln checks inputs against it.
            throw UnsupportedError(set.filename().string() + " input " + std::to_string(i) +
                                   " is " + t.describe() + " but the model declares " +
                                   f.inputs()[i].type.to_string());
          }
        }
        inputs.push_back(t);
      }
      auto got = f(inputs);
      bool draws = false;  // the variant that ran draws random numbers
      for (const auto& node : f.graph().nodes()) {
        const std::string& op = node->op->name();
        draws = draws || op == "random_uniform" || op == "random_normal" || op == "bernoulli" ||
                op == "dropout_train";
      }
      auto expected = sorted_files(set, "output_");
      if (got.size() != expected.size()) {
        throw UserError(std::to_string(got.size()) + " outputs, expected " +
                        std::to_string(expected.size()));
      }
      for (size_t k = 0; k < expected.size(); ++k) {
        const Tensor want = load_onnx_tensor_file(expected[k]);
        std::string diff = draws ? compare_draws(got[k], want) : compare(got[k], want);
        if (!diff.empty()) {
          throw UserError(set.filename().string() + " output " + std::to_string(k) + " '" +
                          f.output_names()[k] + "': " + diff);
        }
      }
    }
  } catch (const UnsupportedError& e) {
    // A variant built with the data set's input values may still use what kiln lacks.
    r.outcome = Outcome::kUnsupported;
    r.detail = e.what();
  } catch (const Error& e) {
    r.outcome = Outcome::kFailed;
    r.detail = e.what();
  }
  return r;
}

// Each case runs in a child process of its own (up to `jobs` at once), so a crash in one
// (a signal, an abort) becomes that case's failure instead of ending the run. The parent
// stays single-threaded, so forking it is safe.
std::vector<Result> run_isolated(const std::vector<fs::path>& cases, unsigned jobs) {
  std::vector<Result> results(cases.size());
  struct Child {
    pid_t pid;
    int fd;
    size_t index;
    std::string out;
  };
  std::vector<Child> running;
  size_t next = 0;
  auto start = [&](size_t i) {
    int fds[2];
    if (pipe(fds) != 0) throw Error("pipe failed");
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) throw Error("fork failed");
    if (pid == 0) {
      close(fds[0]);
      const Result r = run_case(cases[i]);
      // The imported model's cache entry is written behind the load: _exit would leave its
      // thread unjoined (ThreadSanitizer reports it) and its staging folder behind.
      kiln::wait_for_background_stores();
      // Kept under a pipe's buffer, so the child never waits for the parent to read.
      const std::string msg =
          std::to_string(static_cast<int>(r.outcome)) + "\n" + r.detail.substr(0, 16384);
      for (size_t off = 0; off < msg.size();) {
        const ssize_t w = write(fds[1], msg.data() + off, msg.size() - off);
        if (w <= 0) break;
        off += static_cast<size_t>(w);
      }
      _exit(0);
    }
    close(fds[1]);
    running.push_back({pid, fds[0], i, ""});
  };
  while (next < cases.size() || !running.empty()) {
    while (running.size() < jobs && next < cases.size()) start(next++);
    // Reap whichever child ends first; its short message is already in its pipe.
    int status = 0;
    const pid_t done = waitpid(-1, &status, 0);
    auto it = std::find_if(running.begin(), running.end(),
                           [&](const Child& ch) { return ch.pid == done; });
    if (it == running.end()) continue;
    Child c = *it;
    running.erase(it);
    char buf[4096];
    for (ssize_t got; (got = read(c.fd, buf, sizeof buf)) > 0;)
      c.out.append(buf, static_cast<size_t>(got));
    close(c.fd);
    Result& r = results[c.index];
    r.name = cases[c.index].filename().string();
    const size_t nl = c.out.find('\n');
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && nl != std::string::npos) {
      r.outcome = static_cast<Outcome>(std::stoi(c.out.substr(0, nl)));
      r.detail = c.out.substr(nl + 1);
    } else {
      r.outcome = Outcome::kFailed;
      r.detail = WIFSIGNALED(status) ? "crashed: " + std::string(strsignal(WTERMSIG(status)))
                                     : "the case's process exited with status " +
                                           std::to_string(WEXITSTATUS(status));
    }
  }
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  std::string filter, dir;
  bool list_unsupported = false;
  std::string expect_file, write_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--expect" && i + 1 < argc) {
      expect_file = argv[++i];
    } else if (a == "--write-expected" && i + 1 < argc) {
      write_file = argv[++i];
    } else if (a == "--jobs" && i + 1 < argc) {
      jobs = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (a == "--list-unsupported") {
      list_unsupported = true;
    } else if (!a.empty() && a[0] != '-' && dir.empty()) {
      dir = a;
    } else {
      std::fprintf(stderr,
                   "usage: onnx_conformance [--jobs N] [--filter SUBSTR] [--list-unsupported] "
                   "[--expect FILE | --write-expected FILE] DIR\n");
      return 2;
    }
  }
  if (dir.empty() || !fs::is_directory(dir)) {
    std::fprintf(stderr, "onnx_conformance: '%s' is not a folder of ONNX node tests\n",
                 dir.c_str());
    return 2;
  }
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (fs::exists(e.path() / "model.onnx") &&
        e.path().filename().string().find(filter) != std::string::npos) {
      cases.push_back(e.path());
    }
  }
  std::sort(cases.begin(), cases.end());
  if (cases.empty()) {
    std::fprintf(stderr, "onnx_conformance: no cases in %s\n", dir.c_str());
    return 2;
  }
  std::vector<Result> results = run_isolated(cases, jobs);
  size_t passed = 0, failed = 0, unsupported = 0;
  for (const auto& r : results) {
    if (r.outcome == Outcome::kPassed) ++passed;
    if (r.outcome == Outcome::kUnsupported) {
      ++unsupported;
      if (list_unsupported) std::printf("UNSUPPORTED %s: %s\n", r.name.c_str(), r.detail.c_str());
    }
  }
  for (const auto& r : results) {
    if (r.outcome != Outcome::kFailed) continue;
    ++failed;
    std::printf("FAILED %s: %s\n", r.name.c_str(), r.detail.c_str());
  }
  size_t unexpected = 0;
  if (!expect_file.empty()) {
    // NAME -> true (must pass) / false (is refused).
    std::map<std::string, bool> expected;
    std::ifstream in(expect_file);
    if (!in) {
      std::fprintf(stderr, "onnx_conformance: cannot read %s\n", expect_file.c_str());
      return 2;
    }
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.empty() || line[0] == '#') continue;
      std::string kind = line.substr(0, line.find(' '));
      std::string rest = line.substr(std::min(line.size(), kind.size() + 1));
      std::string name = rest.substr(0, rest.find(':'));
      if ((kind != "pass" && kind != "refuse") || name.empty()) {
        std::fprintf(stderr, "%s:%d: expected 'pass NAME' or 'refuse NAME: reason'\n",
                     expect_file.c_str(), line_no);
        return 2;
      }
      expected[name] = kind == "pass";
    }
    for (const auto& r : results) {
      auto it = expected.find(r.name);
      std::string why;
      if (it == expected.end()) {
        why = "not in " + expect_file + " (add it)";
      } else if (it->second && r.outcome == Outcome::kUnsupported) {
        why = "listed to pass, now refused: " + r.detail;
      } else if (!it->second && r.outcome == Outcome::kPassed) {
        why = "listed as refused, now passes: update " + expect_file;
      } else if (!it->second && r.outcome == Outcome::kFailed) {
        why = "listed as refused, now fails instead";
      }
      if (why.empty()) continue;
      ++unexpected;
      std::printf("UNEXPECTED %s: %s\n", r.name.c_str(), why.c_str());
    }
    if (filter.empty()) {
      for (const auto& [name, pass] : expected) {
        bool seen = false;
        for (const auto& r : results) seen = seen || r.name == name;
        if (!seen) {
          ++unexpected;
          std::printf("UNEXPECTED %s: listed in %s but not generated\n", name.c_str(),
                      expect_file.c_str());
        }
      }
    }
  }
  if (!write_file.empty()) {
    std::ofstream out(write_file);
    out << "# The ONNX backend node tests kiln must pass, and those it refuses with the reason.\n"
           "# Checked by onnx_conformance --expect; regenerate with --write-expected.\n";
    for (const auto& r : results) {
      if (r.outcome == Outcome::kPassed) out << "pass " << r.name << "\n";
      if (r.outcome == Outcome::kUnsupported) {
        std::string reason = r.detail.substr(0, r.detail.find('\n'));
        // Paths differ between machines; keep the part after the model file name.
        if (auto at = reason.find("model.onnx: "); at != std::string::npos)
          reason = reason.substr(at + 12);
        out << "refuse " << r.name << ": " << reason << "\n";
      }
    }
    if (!out) {
      std::fprintf(stderr, "onnx_conformance: cannot write %s\n", write_file.c_str());
      return 2;
    }
  }
  std::printf("%zu passed, %zu failed, %zu refused\n", passed, failed, unsupported);
  if (!expect_file.empty())
    std::printf("%zu outcomes differ from %s\n", unexpected, expect_file.c_str());
  return failed == 0 && unexpected == 0 ? 0 : 1;
}
