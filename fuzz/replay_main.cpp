// Runs a fuzz target without libFuzzer, with any compiler: every file of the given folders,
// then deterministic mutations of each (bit flips, interesting bytes, truncations, inserted
// and repeated chunks, oversized numbers). It is the fuzz targets' smoke run in the test
// suite, replaying the seeds and every input a fuzzer ever crashed on (fuzz/seeds/);
// scripts/fuzz runs the coverage-guided libFuzzer builds.
//   fuzz_replay_TARGET [--mutations N] [--seconds S] DIR...
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

std::string mutate(std::string in, Rng& rng) {
  static const unsigned char kBytes[] = {0, 1, 0x7f, 0x80, 0xff, '-', '9', '"', '{', ']'};
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits; ++e) {
    const size_t at = rng.below(in.size() + 1);
    switch (rng.below(6)) {
      case 0:
        if (!in.empty()) in[rng.below(in.size())] ^= static_cast<char>(1u << rng.below(8));
        break;
      case 1:
        if (!in.empty())
          in[rng.below(in.size())] = static_cast<char>(kBytes[rng.below(sizeof kBytes)]);
        break;
      case 2:
        in.resize(at);
        break;
      case 3:
        in.insert(at, 1, static_cast<char>(rng.next()));
        break;
      case 4: {
        const size_t len = rng.below(64);
        if (at + len <= in.size()) in.insert(at, in.substr(at, len));
        break;
      }
      default:
        in.insert(at, rng.below(2) ? "99999999999999999999" : "1e99999");
        break;
    }
  }
  return in;
}

void run(const std::string& bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  int mutations = 200;
  double seconds = 10;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc) {
      mutations = std::atoi(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(a)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      std::fprintf(stderr, "usage: %s [--mutations N] [--seconds S] DIR...\n", argv[0]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "%s: no seed files\n", argv[0]);
    return 2;
  }
  std::sort(files.begin(), files.end());
  const auto start = std::chrono::steady_clock::now();
  long runs = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    std::ifstream in(files[f], std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string seed = buf.str();
    run(seed);
    ++runs;
    Rng rng{0x9e3779b97f4a7c15ull ^ (f + 1)};
    // Each seed gets its share of the time, so a large seed cannot starve the rest.
    const double budget = seconds * static_cast<double>(f + 1) / static_cast<double>(files.size());
    for (int m = 0; m < mutations; ++m) {
      run(mutate(seed, rng));
      ++runs;
      const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
      if (spent.count() > budget) break;
    }
  }
  std::printf("%ld inputs from %zu seeds ran clean\n", runs, files.size());
  return 0;
}
