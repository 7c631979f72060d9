#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/io/mapped_file.h"
#include "runtime/io/npy.h"
#include "util/error.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/json_text.h"
#include "util/strings.h"

namespace kiln {
namespace {

using nlohmann::json;

// The format's own limit: a header past it is a corrupt or hostile file.
constexpr uint64_t kMaxHeader = 100u << 20;

[[noreturn]] void bad(const std::string& origin, uint64_t offset, const std::string& what) {
  throw UserError(origin + ": byte " + std::to_string(offset) +
                  ": not a valid safetensors file: " + what);
}

struct Code {
  const char* name;
  DType dtype;
};
constexpr Code kCodes[] = {
    {"BOOL", DType::kBool},     {"I8", DType::kInt8},     {"U8", DType::kUInt8},
    {"I32", DType::kInt32},     {"I64", DType::kInt64},   {"F16", DType::kFloat16},
    {"BF16", DType::kBFloat16}, {"F32", DType::kFloat32}, {"F64", DType::kFloat64}};

const char* code_of(DType dt) {
  for (const auto& c : kCodes)
    if (c.dtype == dt) return c.name;
  throw InternalError("no safetensors code for dtype " + std::string(dtype_name(dt)));
}

}  // namespace

const Tensor& Safetensors::at(const std::string& name, const std::string& origin) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors) names.push_back("'" + n + "'");
  throw UserError(origin + ": no tensor named '" + name + "' (it holds " +
                  (names.empty() ? std::string("none") : join(names, ", ")) + ")");
}

Safetensors parse_safetensors(const std::shared_ptr<Storage>& bytes, const std::string& origin) {
  const auto* base = static_cast<const unsigned char*>(bytes->data());
  const uint64_t size = bytes->bytes();
  if (size < 8)
    bad(origin, 0, "shorter than its 8-byte header length (" + std::to_string(size) + " bytes)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(base[i]) << (8 * i);
  if (n > kMaxHeader) bad(origin, 0, "header length " + std::to_string(n) + " exceeds 100 MiB");
  if (n > size - 8) {
    bad(origin, 0,
        "header of " + std::to_string(n) + " bytes runs past the end of the file (" +
            std::to_string(size) + " bytes)");
  }
  // Bounded nesting (a 200,000-deep shape must not exhaust the stack) and no key given twice
  // (two readers must not see different tensors under one name).
  json header;
  try {
    header = parse_untrusted_json(
        std::string_view(reinterpret_cast<const char*>(base) + 8, static_cast<size_t>(n)), origin);
  } catch (const JsonError& e) {
    bad(origin, 8 + e.offset(), "header is not JSON: " + e.reason());
  }
  if (!header.is_object()) bad(origin, 8, "header is not a JSON object");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;

  Safetensors out;
  struct Range {
    uint64_t begin, end;
    std::string name;
    DType dtype;
    Shape shape;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(origin, 8, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          bad(origin, 8, "__metadata__ value " + in_quotes(k) + " is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + in_quotes(name);
    if (!entry.is_object()) bad(origin, 8, where + " is not an object");
    auto dt_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto off_it = entry.find("data_offsets");
    if (dt_it == entry.end() || !dt_it->is_string()) bad(origin, 8, where + " has no dtype string");
    if (shape_it == entry.end() || !shape_it->is_array())
      bad(origin, 8, where + " has no shape list");
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2 ||
        !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned()) {
      bad(origin, 8, where + " has no data_offsets [begin, end]");
    }
    const std::string code = dt_it->get<std::string>();
    const Code* c = std::find_if(std::begin(kCodes), std::end(kCodes),
                                 [&](const Code& k) { return code == k.name; });
    if (c == std::end(kCodes))
      bad(origin, 8, where + " has dtype " + in_quotes(code) + ", which kiln does not support");
    Shape shape;
    for (const auto& d : *shape_it) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 48)) {
        bad(origin, 8, where + " has a bad dimension " + json_excerpt(d));
      }
      shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const uint64_t begin = (*off_it)[0].get<uint64_t>(), end = (*off_it)[1].get<uint64_t>();
    auto need = checked_nbytes(shape, c->dtype);
    if (!need)
      bad(origin, 8, where + " shape " + dims_to_string(shape) + " needs more than 2^64 bytes");
    if (begin > end || end - begin != *need) {
      bad(origin, 8,
          where + " of " + std::string(dtype_name(c->dtype)) + " " + dims_to_string(shape) +
              " needs " + std::to_string(*need) + " bytes but data_offsets are [" +
              std::to_string(begin) + ", " + std::to_string(end) + "]");
    }
    if (end > data_size) {
      bad(origin, data_start + begin,
          where + " ends at data byte " + std::to_string(end) + " but the file has only " +
              std::to_string(data_size) + " bytes of data (truncated?)");
    }
    ranges.push_back({begin, end, name, c->dtype, std::move(shape)});
  }
  // The byte buffer must be covered exactly: no overlaps, no holes, nothing after the end.
  // Checked before any tensor is made, so overlapping entries cost no copies.
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ranges[a].begin != ranges[b].begin ? ranges[a].begin < ranges[b].begin
                                              : ranges[a].end < ranges[b].end;
  });
  uint64_t at = 0;
  for (size_t i : order) {
    if (ranges[i].begin != at) {
      bad(origin, data_start + ranges[i].begin,
          "tensor " + in_quotes(ranges[i].name) + " starts at data byte " +
              std::to_string(ranges[i].begin) + ", expected " + std::to_string(at) +
              (ranges[i].begin < at ? " (tensors overlap)" : " (a hole in the data)"));
    }
    at = ranges[i].end;
  }
  if (at != data_size) {
    bad(origin, data_start + at,
        "the tensors cover " + std::to_string(at) + " bytes of data, the file has " +
            std::to_string(data_size));
  }
  for (size_t i : order) {
    Range& r = ranges[i];
    const unsigned char* p = base + data_start + r.begin;
    Tensor t(bytes, data_start + r.begin, r.dtype, r.shape, contiguous_strides(r.shape));
    // Kernels may assume kiln's 64-byte alignment: an unaligned tensor gets its own copy.
    if (reinterpret_cast<uintptr_t>(p) % 64 != 0) t = t.clone();
    out.tensors.emplace_back(std::move(r.name), std::move(t));
  }
  return out;
}

Safetensors read_safetensors(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError("cannot open '" + path.string() + "': " + std::strerror(errno));
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw UserError("cannot stat '" + path.string() + "': " + std::strerror(errno));
  return parse_safetensors(map_file(fd, static_cast<size_t>(st.st_size), path), path.string());
}

namespace {

// A safetensors file as its header (length, JSON and padding) and the tensors' bytes in the
// order they follow it, so a writer can send them without building the file in memory.
struct SafetensorsPieces {
  std::string head;
  std::vector<Tensor> data;  // contiguous
};

SafetensorsPieces safetensors_pieces(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].second.nbytes() % 64 == 0) order.push_back(i);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].second.nbytes() % 64 != 0) order.push_back(i);
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    if (name == "__metadata__" || header.contains(name)) {
      throw UserError("cannot write tensor " + in_quotes(name) +
                      " to safetensors: the name is taken");
    }
    // The header is JSON: a name that is not UTF-8 cannot be written as itself.
    if (!is_utf8(name)) {
      throw UserError("cannot write tensor " + in_quotes(name) +
                      " to safetensors: its name is not UTF-8");
    }
    header[name] = {{"dtype", code_of(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {at, at + t.nbytes()}}};
    at += t.nbytes();
  }
  std::string text = header.dump();
  text.append((64 - (8 + text.size()) % 64) % 64, ' ');
  SafetensorsPieces out;
  out.head.assign(8, '\0');
  for (int i = 0; i < 8; ++i)
    out.head[i] = static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  out.head += text;
  for (size_t i : order) out.data.push_back(tensors[i].second.contiguous());
  return out;
}

}  // namespace

std::string to_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  SafetensorsPieces pieces = safetensors_pieces(tensors, metadata);
  std::string out = std::move(pieces.head);
  size_t total = out.size();
  for (const Tensor& t : pieces.data) total += t.nbytes();
  out.reserve(total);
  for (const Tensor& t : pieces.data) out.append(static_cast<const char*>(t.data()), t.nbytes());
  return out;
}

// Written piece by piece from the tensors' own memory: a file of weights costs no buffer of
// its size (for a transformer, hundreds of megabytes of fresh memory).
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const SafetensorsPieces pieces = safetensors_pieces(tensors, metadata);
  std::vector<std::string_view> views{pieces.head};
  for (const Tensor& t : pieces.data)
    views.emplace_back(static_cast<const char*>(t.data()), t.nbytes());
  write_file_atomic(path, views);
}

bool is_safetensors_path(const std::filesystem::path& path) {
  return path.extension() == ".safetensors";
}

Tensor read_tensor_file(const std::filesystem::path& path, const std::string& name) {
  if (!is_safetensors_path(path)) return read_npy(path);
  Safetensors file = read_safetensors(path);
  for (const auto& [n, t] : file.tensors)
    if (n == name) return t;
  if (file.tensors.size() == 1) return file.tensors[0].second;
  return file.at(name, path.string());  // throws, listing what the file holds
}

}  // namespace kiln
