// libFuzzer target: the remote tier's entry unpacker (what a Redis server hands over) on
// arbitrary bytes, against the key the blob's own meta.json claims; an entry it accepts must
// pack back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cache/remote_tier.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string blob(reinterpret_cast<const char*>(data), size);
  return kiln::fuzz::run_reader([&] {
    // The key a genuine blob describes; any other is refused before the files are read.
    const auto at = blob.find("\"key\": \"");
    const std::string key =
        at == std::string::npos ? std::string(64, '0') : blob.substr(at + 8, 64);
    kiln::RemoteEntry e = kiln::unpack_entry(blob, key);
    std::vector<std::string> files;
    for (const auto& [name, bytes] : e.files) files.push_back(bytes);
    const std::string packed = kiln::pack_entry(e.meta, files);
    if (kiln::unpack_entry(packed, key).meta.to_json() != e.meta.to_json()) std::abort();
  });
}
