// Imported models as cache entries: a model loaded before comes back from its entry with its
// weights mapped and their digests known, exactly the graph its importer gave; a changed
// file, a damaged or forged entry, or a shared cache never hands out a stale or bad graph.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/cache_store.h"
#include "cache/entry_meta.h"
#include "compiler/compile.h"
#include "compiler/entries/graph_file.h"
#include "compiler/entries/background_stores.h"
#include "compiler/entries/model_entries.h"
#include "compiler/value_digest.h"
#include "frontend/model_loader.h"
#include "frontend/onnx/onnx_model.h"
#include "helpers.h"
#include "ops/registry.h"
#include "runtime/io/npy.h"
#include "util/fs.h"
#include "util/sha256.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;

const fs::path kExamples = KILN_EXAMPLES_DIR;

std::vector<fs::path> example_models() {
  std::vector<fs::path> out;
  for (const auto& dir : fs::directory_iterator(kExamples / "onnx"))
    if (dir.is_directory())
      for (const auto& f : fs::directory_iterator(dir.path()))
      if (f.path().extension() == ".onnx") out.push_back(f.path());
  std::sort(out.begin(), out.end());
  return out;
}

// This test's own cache, as KILN_CACHE_DIR (load_model uses the user's cache).
class ModelCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir(std::string("model-cache-") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    cache_ = dir_ / "cache";
    ::setenv("KILN_CACHE_DIR", cache_.c_str(), 1);
    clear_compile_memo();
  }
  void TearDown() override {
    wait_for_background_stores();
    ::unsetenv("KILN_CACHE_DIR");
    ::unsetenv("KILN_CACHE_UMASK");
    clear_compile_memo();
  }
  // The model entries of the cache (family "model"), by the folder of their graph file.
  std::vector<fs::path> model_entries() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& shard : fs::directory_iterator(cache_ / "objects", ec))
      for (const auto& e : fs::directory_iterator(shard.path()))
        if (fs::exists(e.path() / "graph.json")) out.push_back(e.path());
    return out;
  }
  // A copy of an example model whose change time has settled, so its digest is remembered.
  fs::path settled_copy(const std::string& example) {
    const fs::path p = dir_ / "model.onnx";
    fs::copy_file(kExamples / "onnx" / example / "model.onnx", p,
                  fs::copy_options::overwrite_existing);
    settle();
    return p;
  }
  static void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(80)); }
  fs::path dir_, cache_;
};

bool maps(const Tensor& t, const fs::path& file) {
  // The tensor's bytes lie inside a mapping of `file` (/proc/self/maps lists each one).
  const auto at = reinterpret_cast<uintptr_t>(t.data());
  std::ifstream in("/proc/self/maps");
  const std::string name = fs::canonical(file).string();
  for (std::string line; std::getline(in, line);) {
    if (line.size() < name.size() || line.compare(line.size() - name.size(), name.size(), name))
      continue;
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi) return true;
  }
  return false;
}

TEST(GraphFile, EveryExampleModelComesBackTheSameAndGeneratesTheSameSource) {
  for (const fs::path& p : example_models()) {
    SCOPED_TRACE(p.string());
    const Graph g = load_onnx_model(p);
    std::optional<GraphFiles> files = graph_files(g);
    ASSERT_TRUE(files);
    add_value_digests(*files);
    const Graph back =
        graph_from_files(files->structure, Safetensors{files->tensors, files->digests}, "test");
    EXPECT_TRUE(same_graph(g, back));
    EXPECT_EQ(generate_source(g), generate_source(back));
  }
}

TEST(GraphFile, PropsOfEveryKindRoundTripExactly) {
  // Doubles as hex floats: -0.0, infinities and denormals survive; strings and lists too.
  Graph g("props");
  Variable* x = g.add_input("x", TensorType{DType::kFloat32, {kDynamic, 4}});
  const auto& reg = OpRegistry::instance();
  Node* a = g.add_node(reg.create("leaky_relu", {{"alpha", 4.9406564584124654e-324}}), {x},
                       "tiny slope", {"a"});
  Node* b = g.add_node(reg.create("elu", {{"alpha", -0.0}}), {a->outputs[0]}, "", {"b"});
  Node* c = g.add_node(reg.create("leaky_relu", {{"alpha", -std::numeric_limits<double>::infinity()}}),
                       {b->outputs[0]});
  Node* d = g.add_node(reg.create("transpose", {{"perm", std::vector<int64_t>{1, 0}}}),
                       {c->outputs[0]});
  Node* e = g.add_node(reg.create("convert", {{"to", std::string("float64")}}), {d->outputs[0]});
  g.set_outputs({e->outputs[0]});
  std::optional<GraphFiles> files = graph_files(g);
  ASSERT_TRUE(files);
  const Graph back = graph_from_files(files->structure, Safetensors{files->tensors, {}}, "test");
  ASSERT_TRUE(same_graph(g, back));
  for (size_t i = 0; i < g.nodes().size(); ++i)
    EXPECT_EQ(back.nodes()[i]->op->props(), g.nodes()[i]->op->props()) << i;
  EXPECT_TRUE(std::signbit(std::get<double>(back.nodes()[1]->op->props().at("alpha"))));
  EXPECT_EQ(back.inputs()[0]->type.dims, (std::vector<int64_t>{kDynamic, 4}));
  EXPECT_EQ(back.nodes()[0]->name, "tiny slope");
  EXPECT_EQ(back.outputs()[0]->type.dtype, DType::kFloat64);
  // A structure that names an op nobody registered, or a variable not yet made, is an error
  // naming its origin.
  std::string bad = files->structure;
  bad.replace(bad.find("\"elu\""), 5, "\"nope\"");
  EXPECT_NE(testing::error_of([&] { graph_from_files(bad, Safetensors{}, "origin.json"); })
                .find("origin.json: unknown op 'nope'"),
            std::string::npos);
}

TEST_F(ModelCache, ModelsAreHashedOnceAndASecondLoadMapsTheStoredModelWithItsDigestsKnown) {
  const fs::path model = settled_copy("resblock");
  const Graph first = load_model(model);
  // Imported, it is hashed once: the digests its entry stores and its prepared weights use.
  for (const Variable* c : first.constants()) {
    ASSERT_FALSE(c->known_digest.sha256.empty()) << c->name;
    EXPECT_EQ(c->known_digest.sha256, value_digests({*c->value})[0]) << c->name;
  }
  wait_for_background_stores();
  const std::vector<fs::path> entries = model_entries();
  ASSERT_EQ(entries.size(), 1u);
  const Graph second = load_model(model);
  EXPECT_TRUE(same_graph(first, second));
  size_t mapped = 0;
  for (const Variable* c : second.constants()) {
    if (c->type.rank() == 0) continue;
    mapped += maps(*c->value, entries[0] / "constants.safetensors");
    // The digest the entry carries is the one hashing gives.
    ASSERT_FALSE(c->known_digest.sha256.empty()) << c->name;
    EXPECT_EQ(constant_digest(*c), value_digests({*c->value})[0]) << c->name;
  }
  EXPECT_GT(mapped, 0u);
  // Same results, bit for bit.
  Tensor x = read_npy(kExamples / "onnx" / "resblock" / "x.npy");
  Tensor a = compile(first)({x})[0];
  clear_compile_memo();
  Tensor b = compile(second)({x})[0];
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  // A value replaced since is hashed, not taken from the entry.
  Graph edited = load_model(model);
  Variable* w = nullptr;
  for (Variable* c : edited.constants())
    if (c->type.rank() > 0) w = c;
  ASSERT_NE(w, nullptr);
  Tensor other = w->value->clone();
  std::memset(other.data(), 0, other.nbytes());
  w->value = other;
  EXPECT_EQ(constant_digest(*w), value_digests({other})[0]);
  EXPECT_NE(constant_digest(*w), w->known_digest.sha256);
}

TEST_F(ModelCache, AFileChangedInPlaceWithItsTimesPutBackIsImportedAgain) {
  const fs::path model = settled_copy("resblock");
  const Graph first = load_model(model);  // stored, and its digest remembered
  wait_for_background_stores();
  ASSERT_EQ(model_entries().size(), 1u);
  ASSERT_TRUE(fs::exists(cache_ / "digests"));
  // Change the last byte of the file (a weight's byte) without changing its size, then put
  // its modification time back: only the change time and the bytes tell.
  struct stat before {};
  ASSERT_EQ(::stat(model.c_str(), &before), 0);
  std::string bytes = read_file(model);
  const Graph original = load_onnx_model(model);
  // Find a weight byte: the first 4-byte float of the largest constant, located in the file.
  const Variable* big = nullptr;
  for (const Variable* c : original.constants())
    if (!big || c->value->nbytes() > big->value->nbytes()) big = c;
  const std::string needle(static_cast<const char*>(big->value->data()), 16);
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 0x01;
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(bytes[at]);
  }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, model.c_str(), times, 0), 0);
  const Graph changed = load_model(model);
  const Graph truth = load_onnx_model(model);
  EXPECT_TRUE(same_graph(changed, truth)) << "the stale import came back";
  EXPECT_FALSE(same_graph(changed, first));
}

TEST_F(ModelCache, DamagedOrForgedEntriesAreQuarantinedAndTheModelImportedAgain) {
  const fs::path model = settled_copy("lenet");
  const Graph truth = load_onnx_model(model);
  load_model(model);
  wait_for_background_stores();
  ASSERT_EQ(model_entries().size(), 1u);
  const fs::path entry = model_entries()[0];
  // Damaged: a flipped byte in the weights.
  {
    std::string bytes = read_file(entry / "constants.safetensors");
    bytes[bytes.size() - 3] ^= 0x20;
    fs::permissions(entry / "constants.safetensors", fs::perms::owner_read | fs::perms::owner_write);
    write_file_atomic(entry / "constants.safetensors", bytes, 0600, true);
  }
  ::testing::internal::CaptureStderr();
  const Graph after_damage = load_model(model);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("constants.safetensors does not match its SHA-256"), std::string::npos) << err;
  EXPECT_TRUE(same_graph(after_damage, truth));
  EXPECT_TRUE(fs::exists(cache_ / "quarantine"));
  wait_for_background_stores();
  // Forged: a structure that rebuilds another graph, under hashes that match it.
  ASSERT_EQ(model_entries().size(), 1u);
  const fs::path again = model_entries()[0];
  std::string structure = read_file(again / "graph.json");
  const size_t ref = structure.find("\"inputs\":[0");
  ASSERT_NE(ref, std::string::npos) << structure.substr(0, 400);
  structure.replace(ref, 11, "\"inputs\":[99999");
  fs::permissions(again / "graph.json", fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomic(again / "graph.json", structure, 0600, true);
  EntryMeta meta = EntryMeta::parse(read_file(again / "meta.json"), "test");
  for (auto& f : meta.files) {
    const std::string b = read_file(again / f.name);
    f.size = b.size();
    f.sha256 = sha256_hex(b);
  }
  fs::permissions(again / "meta.json", fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomic(again / "meta.json", meta.to_json(), 0600, true);
  ::testing::internal::CaptureStderr();
  const Graph after_forgery = load_model(model);
  const std::string forged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(forged.find("reference to variable 99999 before it exists"), std::string::npos)
      << forged;
  EXPECT_TRUE(same_graph(after_forgery, truth));
  size_t quarantined = 0;
  for (const auto& q : fs::directory_iterator(cache_ / "quarantine")) quarantined += q.is_directory();
  EXPECT_EQ(quarantined, 2u);
}

TEST_F(ModelCache, NothingIsStoredWithTheCacheOffAndNoDigestIsRememberedInASharedCache) {
  const fs::path model = settled_copy("mlp");
  ::setenv("KILN_CACHE", "0", 1);
  load_model(model);
  wait_for_background_stores();
  ::unsetenv("KILN_CACHE");
  EXPECT_TRUE(model_entries().empty());
  // A cache others may write: the stamp of a digest record proves nothing there.
  ::setenv("KILN_CACHE_UMASK", "002", 1);
  cache_ = dir_ / "shared";
  ::setenv("KILN_CACHE_DIR", cache_.c_str(), 1);
  const Graph a = load_model(model);
  wait_for_background_stores();
  const Graph b = load_model(model);
  EXPECT_EQ(model_entries().size(), 1u);
  EXPECT_TRUE(same_graph(a, b));
  EXPECT_FALSE(fs::exists(cache_ / "digests"));
}

}  // namespace
}  // namespace kiln
