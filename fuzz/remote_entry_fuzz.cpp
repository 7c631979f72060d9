// libFuzzer target: what the remote tier does with the bytes a store hands over — expand a
// zstd blob (bounded), then unpack the entry against the key its own meta.json claims; an
// entry it accepts must pack back to the same bytes, compressed or not.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cache/blob_codec.h"
#include "cache/remote_tier.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    const std::string blob = kiln::decode_blob(raw, uint64_t{1} << 22);
    // The key a genuine blob describes; any other is refused before the files are read.
    const auto at = blob.find("\"key\": \"");
    const std::string key =
        at == std::string::npos ? std::string(64, '0') : blob.substr(at + 8, 64);
    kiln::RemoteEntry e = kiln::unpack_entry(blob, key);
    std::vector<std::string> files;
    for (const auto& [name, bytes] : e.files) files.push_back(bytes);
    const std::string packed = kiln::pack_entry(e.meta, files);
    if (kiln::unpack_entry(packed, key).meta.to_json() != e.meta.to_json()) std::abort();
    if (kiln::decode_blob(kiln::encode_blob(packed, 1), packed.size()) != packed) std::abort();
  });
}
