#include "cache/blob_codec.h"

#include <zstd.h>

#include <cstdlib>

#include "cache/entry_meta.h"
#include "util/escape.h"

namespace kiln {
namespace {
constexpr const char kZstdMagic[] = "kiln-zstd 1\n";
constexpr size_t kMagicLen = sizeof kZstdMagic - 1;
}  // namespace

bool is_compressed_blob(const std::string& blob) {
  return blob.compare(0, kMagicLen, kZstdMagic) == 0;
}

std::string encode_blob(const std::string& packed, int level) {
  if (level <= 0) return packed;
  std::string out = kZstdMagic + std::to_string(packed.size()) + "\n";
  const size_t head = out.size();
  out.resize(head + ZSTD_compressBound(packed.size()));
  const size_t n =
      ZSTD_compress(out.data() + head, out.size() - head, packed.data(), packed.size(), level);
  if (ZSTD_isError(n)) return packed;  // only on a bad level: plain is always readable
  out.resize(head + n);
  return out;
}

std::string decode_blob(const std::string& blob, uint64_t max_bytes) {
  if (!is_compressed_blob(blob)) {
    if (blob.size() > max_bytes)
      throw CacheEntryError("it has " + std::to_string(blob.size()) + " bytes, more than " +
                            std::to_string(max_bytes));
    return blob;
  }
  const size_t nl = blob.find('\n', kMagicLen);
  if (nl == std::string::npos || nl == kMagicLen || nl - kMagicLen > 20)
    throw CacheEntryError("bad compressed-entry header");
  const std::string size_text = blob.substr(kMagicLen, nl - kMagicLen);
  char* end = nullptr;
  const unsigned long long size = std::strtoull(size_text.c_str(), &end, 10);
  if (*end != '\0' || size_text[0] < '0' || size_text[0] > '9')
    throw CacheEntryError("bad expanded size " + in_quotes(size_text));
  if (size > max_bytes) {
    throw CacheEntryError("it would expand to " + std::to_string(size) + " bytes, more than " +
                          std::to_string(max_bytes) + " (KILN_REMOTE_MAX_ENTRY)");
  }
  const char* frame = blob.data() + nl + 1;
  const size_t frame_len = blob.size() - nl - 1;
  const unsigned long long declared = ZSTD_getFrameContentSize(frame, frame_len);
  if (declared == ZSTD_CONTENTSIZE_ERROR) throw CacheEntryError("not a zstd frame");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != size) {
    throw CacheEntryError("its zstd frame expands to " + std::to_string(declared) +
                          " bytes, its header says " + std::to_string(size));
  }
  const size_t frame_size = ZSTD_findFrameCompressedSize(frame, frame_len);
  if (ZSTD_isError(frame_size)) throw CacheEntryError("truncated zstd frame");
  if (frame_size != frame_len)
    throw CacheEntryError(std::to_string(frame_len - frame_size) + " bytes after the zstd frame");
  std::string out(size, '\0');
  // The output buffer is the bound: a frame that would write more fails here.
  const size_t n = ZSTD_decompress(out.data(), out.size(), frame, frame_len);
  if (ZSTD_isError(n))
    throw CacheEntryError(std::string("corrupt zstd frame (") + ZSTD_getErrorName(n) + ")");
  if (n != size)
    throw CacheEntryError("its zstd frame expands to " + std::to_string(n) +
                          " bytes, its header says " + std::to_string(size));
  return out;
}

}  // namespace kiln
