#pragma once
// How an entry travels to and from a remote: compressed with zstd ("kiln-zstd 1\n<size>\n"
// then one zstd frame of the packed entry), or plain (the packed entry itself, as writers with
// KILN_REMOTE_COMPRESS=off and earlier versions store it). A reader bounds the size an entry
// expands to before it allocates anything: the header's size, the frame's own content size
// and the output buffer all have to agree, so a small blob that would expand to gigabytes (a
// decompression bomb) is refused after reading a few bytes.
#include <cstdint>
#include <string>

namespace kiln {

// level 0: the packed entry as it is; 1..19: zstd at that level.
std::string encode_blob(const std::string& packed, int level);
// The packed entry; throws CacheEntryError naming what is wrong (a bad header, a size past
// max_bytes, a frame that is corrupt, truncated, or expands to another size).
std::string decode_blob(const std::string& blob, uint64_t max_bytes);
bool is_compressed_blob(const std::string& blob);

}  // namespace kiln
