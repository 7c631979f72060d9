#pragma once
// SHA-256 (FIPS 180-4): content hashes for sources, cache keys and entry verification.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void compress(const uint8_t* blocks, size_t count);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
// True when the CPU's SHA extensions compress blocks; KILN_NO_SHA_NI=1 forces the portable
// code (a ctest variant runs the SHA-256 tests both ways).
bool sha256_uses_sha_extensions();

}  // namespace kiln
