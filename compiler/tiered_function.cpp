#include "compiler/tiered_function.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "compiler/backend.h"
#include "compiler/generic/generic_runner.h"
#include "ops/cop.h"
#include "util/error.h"
#include "util/log.h"
#include "util/strings.h"

namespace kiln {
namespace {

bool generic_start_wanted(const CompileOptions& options) {
  if (options.generic_start) return *options.generic_start;
  const char* env = std::getenv("KILN_GENERIC_START");
  if (!env || !*env || std::string(env) == "1") return true;
  if (std::string(env) == "0") return false;
  throw UserError(std::string("KILN_GENERIC_START: '") + env + "' is not 0 or 1");
}

}  // namespace

const char* to_string(Tier tier) {
  switch (tier) {
    case Tier::kNone:
      return "none";
    case Tier::kGeneric:
      return "generic";
    case Tier::kCompiled:
      return "compiled";
  }
  return "?";
}

struct TieredFunction::State {
  std::unique_ptr<GenericRunner> runner;  // null when the function started compiled
  std::thread worker;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::optional<Function> function;  // set once, never reset: a pointer to it stays valid
  std::exception_ptr error;
  bool done = false;
  Tier last = Tier::kNone;
  int generic_runs = 0;
  int overtaken = 0;  // generic runs dropped when the module became ready
  bool generic_failed = false;  // a generic run threw: later calls wait for the module
  double background_ms = 0;

  // The compiled function when it is there (rethrowing a failed compile), else null.
  Function* current() {
    std::lock_guard lock(mutex);
    if (!done) return nullptr;
    if (error) std::rethrow_exception(error);
    return &*function;
  }
};

TieredFunction::TieredFunction(const Graph& graph, CompileOptions options)
    : state_(std::make_shared<State>()) {
  for (const Variable* v : graph.inputs()) {
    input_names_.push_back(v->name);
    input_types_.push_back(v->type);
  }
  const size_t n_out = graph.outputs().size();
  for (size_t i = 0; i < n_out; ++i) output_names_.push_back(graph.outputs()[i]->name);
  // Only a host graph without state updates has a generic tier; only a miss needs one. Nodes
  // that keep state across calls (random draws' run counter) have none in `perform`, so a
  // generic tier would repeat their first call's numbers.
  bool stateful = false;
  for (const auto& node : graph.nodes()) {
    const auto* op = dynamic_cast<const COp*>(node->op.get());
    stateful = stateful || (op && !op->c_state_fields(*node, "n_").empty());
  }
  const bool tiered = generic_start_wanted(options) && backend_named(options.device).is_host() &&
                      !options.device_io && graph.updates().empty() && !stateful &&
                      !is_cached(graph, options);
  options.generic_start = false;
  if (!tiered) {
    state_->function.emplace(compile(graph, options));
    state_->done = true;
    return;
  }
  // Non-owning: the caller keeps the graph alive, and the destructor joins the compile.
  state_->runner = std::make_unique<GenericRunner>(
      std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &graph));
  if (debug_level() >= 1) {
    log_line("tier: '" + graph.name() +
             "' runs in the generic tier while its module compiles in the background");
  }
  State* s = state_.get();
  s->worker = std::thread([s, &graph, options] {
    const auto start = std::chrono::steady_clock::now();
    std::optional<Function> built;
    std::exception_ptr error;
    try {
      built.emplace(compile(graph, options));
    } catch (...) {
      error = std::current_exception();
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard lock(s->mutex);
      if (built) s->function.emplace(std::move(*built));
      s->error = error;
      s->background_ms = ms;
      s->done = true;
    }
    s->changed.notify_all();
    if (debug_level() >= 1) {
      log_line("tier: the module of '" + graph.name() + "' " +
               (error ? "failed to compile" : "is ready") + " after " + format_double(ms) +
               " ms in the background; later calls run " + (error ? "nothing" : "it"));
    }
  });
}

TieredFunction::~TieredFunction() {
  if (state_->worker.joinable()) state_->worker.join();
}

std::vector<Tensor> TieredFunction::operator()(const std::vector<Tensor>& inputs) {
  if (Function* f = state_->current()) {
    std::vector<Tensor> out = (*f)(inputs);
    std::lock_guard lock(state_->mutex);
    state_->last = Tier::kCompiled;
    return out;
  }
  // A generic run that the module overtakes is dropped for the module's: a first result is
  // never much later than the compile and one compiled run. A generic run that fails (a bad
  // input, a node whose op has no reference code) leaves the answer to the module, so a
  // caller meets the module's results and diagnostics, never the generic tier's.
  std::optional<std::vector<Tensor>> out;
  const bool tried = !generic_failed();
  bool failed = false;
  if (tried) {
    try {
      out = state_->runner->run_until(inputs, [this] { return ready(); });
    } catch (const std::exception& e) {
      failed = true;
      std::lock_guard lock(state_->mutex);
      state_->generic_failed = true;
      if (debug_level() >= 1) {
        log_line(std::string("tier: the generic run failed, the module answers instead: ") +
                 e.what());
      }
    }
  }
  const bool generic = out.has_value();
  if (!generic) out = compiled()(inputs);  // waits for the module, or rethrows its error
  std::lock_guard lock(state_->mutex);
  state_->last = generic ? Tier::kGeneric : Tier::kCompiled;
  if (generic)
    ++state_->generic_runs;
  else if (tried && !failed)
    ++state_->overtaken;
  return *out;
}

std::vector<Tensor> TieredFunction::run(const std::map<std::string, Tensor>& inputs) {
  return (*this)(inputs_in_order(input_names_, input_types_, inputs));
}

Function& TieredFunction::compiled() {
  {
    std::unique_lock lock(state_->mutex);
    state_->changed.wait(lock, [&] { return state_->done; });
  }
  return *state_->current();
}

bool TieredFunction::ready() const {
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

bool TieredFunction::started_generic() const { return state_->runner != nullptr; }

bool TieredFunction::generic_failed() const {
  std::lock_guard lock(state_->mutex);
  return state_->generic_failed;
}

Tier TieredFunction::last_tier() const {
  std::lock_guard lock(state_->mutex);
  return state_->last;
}

int TieredFunction::generic_runs() const {
  std::lock_guard lock(state_->mutex);
  return state_->generic_runs;
}

int TieredFunction::overtaken_runs() const {
  std::lock_guard lock(state_->mutex);
  return state_->overtaken;
}

double TieredFunction::background_ms() const {
  std::lock_guard lock(state_->mutex);
  return state_->background_ms;
}

}  // namespace kiln
