#include "compiler/value_digest.h"

#include <algorithm>
#include <array>

#include "runtime/engine/default_engine.h"
#include "runtime/engine/parallel_for.h"
#include "util/error.h"
#include "util/sha256.h"

namespace kiln {

namespace {

constexpr size_t kChunk = size_t{1} << 20;
constexpr size_t kParallelBytes = size_t{16} << 20;

bool known(const Variable& v) {
  return v.value && !v.known_digest.sha256.empty() && v.value->data() == v.known_digest.data &&
         v.value->is_contiguous();
}

}  // namespace

std::vector<std::string> value_digests(const std::vector<Tensor>& given, bool all_cores) {
  struct Chunk {
    const uint8_t* data;
    size_t size;
  };
  std::vector<Tensor> values;
  values.reserve(given.size());
  std::vector<std::pair<size_t, size_t>> ranges;  // per value: first chunk, count
  std::vector<Chunk> chunks;
  for (const Tensor& t : given) {
    const Tensor& c = values.emplace_back(t.contiguous());
    const auto* bytes = static_cast<const uint8_t*>(c.data());
    const size_t first = chunks.size();
    for (size_t at = 0; at < c.nbytes(); at += kChunk)
      chunks.push_back(Chunk{bytes + at, std::min(kChunk, c.nbytes() - at)});
    ranges.emplace_back(first, chunks.size() - first);
  }
  std::vector<std::array<uint8_t, 32>> digests(chunks.size());
  const auto hash_chunk = [&](int part) {
    const Chunk& c = chunks[static_cast<size_t>(part)];
    Sha256 h;
    h.update(c.data, c.size);
    digests[static_cast<size_t>(part)] = h.digest();
  };
  // Waking the workers costs more than hashing a small model's weights on this thread.
  size_t total = 0;
  for (const Tensor& v : values) total += v.nbytes();
  if (chunks.size() > 1 && all_cores && total >= kParallelBytes) {
    parallel_for(default_engine(), static_cast<int>(chunks.size()), hash_chunk, "value digests");
  } else {
    for (size_t k = 0; k < chunks.size(); ++k) hash_chunk(static_cast<int>(k));
  }
  std::vector<std::string> out;
  out.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    Sha256 h;
    h.update("kiln-value-v1 " + std::to_string(values[i].nbytes()) + "\n");
    for (size_t k = 0; k < ranges[i].second; ++k) h.update(digests[ranges[i].first + k].data(), 32);
    out.push_back(h.hex_digest());
  }
  return out;
}

std::string constant_digest(const Variable& constant) {
  return constant_digests({&constant}).at(0);
}

std::vector<std::string> constant_digests(const std::vector<const Variable*>& constants) {
  std::vector<std::string> out(constants.size());
  std::vector<Tensor> unknown;
  std::vector<size_t> where;
  for (size_t i = 0; i < constants.size(); ++i) {
    const Variable& v = *constants[i];
    check_internal(v.value.has_value(), "constant_digests: '" + v.name + "' has no value");
    if (known(v)) {
      out[i] = v.known_digest.sha256;
    } else {
      unknown.push_back(*v.value);
      where.push_back(i);
    }
  }
  std::vector<std::string> hashed = value_digests(unknown);
  for (size_t k = 0; k < where.size(); ++k) out[where[k]] = std::move(hashed[k]);
  return out;
}

void remember_constant_digests(const Graph& graph) {
  std::vector<const Variable*> constants;
  for (const Variable* v : graph.constants())
    if (v->value && v->value->is_contiguous() && !known(*v)) constants.push_back(v);
  const std::vector<std::string> digests = constant_digests(constants);
  for (size_t i = 0; i < constants.size(); ++i) {
    // The digest is a cache of the value's bytes, not part of the graph's meaning.
    auto* v = const_cast<Variable*>(constants[i]);
    v->known_digest = Variable::KnownDigest{v->value->data(), digests[i]};
  }
}

}  // namespace kiln
