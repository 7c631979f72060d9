#include "compiler/entries/prepared_weights.h"

#include "compiler/entries/background_stores.h"
#include "compiler/entries/remote_entries.h"
#include "compiler/value_digest.h"
#include "runtime/io/safetensors.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sha256.h"

namespace kiln {

namespace {

constexpr const char* kFile = "prepared.safetensors";

std::string step_name(int step) { return "step" + std::to_string(step); }

}  // namespace

std::string weights_digest(const ModulePlan& plan, const Graph& given) {
  std::vector<const Variable*> constants;
  for (int i : plan.prepared_from())
    constants.push_back(given.constants().at(static_cast<size_t>(i)));
  const std::vector<std::string> digests = constant_digests(constants);
  Sha256 h;
  h.update("kiln-weights-v3\n");
  for (size_t k = 0; k < constants.size(); ++k) {
    const Variable* c = constants[k];
    std::string head =
        std::to_string(plan.prepared_from()[k]) + ' ' + std::string(dtype_name(c->type.dtype));
    for (int64_t d : c->value->shape()) head += ' ' + std::to_string(d);
    head += ' ' + digests[k] + '\n';
    h.update(head);
  }
  return h.hex_digest();
}

PreparedWeights::PreparedWeights(std::shared_ptr<CacheStore> store, std::string module_key)
    : store_(std::move(store)), module_key_(std::move(module_key)) {}

KeyComponents PreparedWeights::components(const std::string& digest) const {
  return {{"kind", "prepared weights 1"}, {"module", module_key_}, {"weights", digest}};
}

std::string PreparedWeights::key(const std::string& digest) const {
  return artifact_key(components(digest));
}

std::optional<std::vector<Tensor>> PreparedWeights::find(const ModulePlan& plan,
                                                         const std::string& digest) {
  const std::string k = key(digest);
  wait_for_background_store(k);
  LookupResult r = store_->lookup(k, true);
  if (!r.entry) r.entry = fetch_from_remote(*store_, k);  // another machine may have them
  if (!r.entry) return std::nullopt;
  // The files are the ones the entry records (verified); what they hold must also be what
  // this plan's program reads, or the entry is bad.
  std::vector<Tensor> prepared(plan.prep_steps());
  try {
    Safetensors file = read_safetensors(r.entry->file(kFile));
    for (int step : plan.kept_steps()) {
      const Tensor& t = file.at(step_name(step), kFile);
      prepared[static_cast<size_t>(step)] = t;
    }
    if (file.tensors.size() != plan.kept_steps().size())
      throw CacheEntryError(std::string(kFile) + " holds values this plan does not read");
    plan.check_prepared(prepared);
  } catch (const UserError& e) {
    r.entry.reset();  // unpinned, so it can be moved aside
    store_->discard_bad(k, std::string("prepared weights: ") + e.what());
    return std::nullopt;
  }
  if (debug_level() >= 2) log_line("cache: prepared weights hit " + r.entry->dir.string());
  // The tensors map the file: an eviction that removes it later leaves the mapping intact.
  return prepared;
}

void PreparedWeights::put(const ModulePlan& plan, const std::string& digest,
                          const std::vector<Tensor>& prepared) {
  if (!store_->publish_blocker().empty()) return;
  const std::string k = key(digest);
  std::vector<std::pair<std::string, Tensor>> tensors;
  try {
    if (store_->lookup(k, false).entry) return;  // another process stored it first
    for (int step : plan.kept_steps()) {
      const Tensor& t = prepared.at(static_cast<size_t>(step));
      if (!t.defined()) return;  // not all at hand: nothing to store
      tensors.emplace_back(step_name(step), t);
    }
  } catch (const Error& e) {
    warn(std::string("could not store the prepared weights in the cache: ") + e.what());
    return;
  }
  EntryMeta meta;
  meta.key = k;
  meta.label = "prepared weights";
  meta.family = kPreparedFamily;
  meta.summary = std::to_string(tensors.size()) + " prepared values for module " + module_key_;
  meta.created = unix_now();
  meta.components = components(digest);
  meta.files = {FileRecord{kFile, 0, ""}};
  // Written behind the caller: the values are the set's own (never written again).
  store_in_background(
      k, [store = store_, tensors = std::move(tensors), meta = std::move(meta)]() mutable {
        try {
          WorkFolder staging = store->new_staging(meta.key);
          write_safetensors(staging.path() / kFile, tensors);
          upload_to_remote(*store, store->publish(std::move(staging), std::move(meta)));
        } catch (const std::exception& e) {
          warn(std::string("could not store the prepared weights in the cache: ") + e.what());
        }
      });
}

}  // namespace kiln
