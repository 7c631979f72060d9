#include "runtime/io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"
#include "util/strings.h"

namespace kiln {
namespace {

[[noreturn]] void bad(const std::string& origin, size_t offset, const std::string& what) {
  throw UserError(origin + ": byte " + std::to_string(offset) + ": not a valid .npy file: " + what);
}

DType dtype_from_descr(const std::string& descr, const std::string& origin, size_t at) {
  // '|' marks byte-sized types; '<' little-endian; '=' native (little on every target kiln runs).
  if (descr.size() < 2) bad(origin, at, "bad descr '" + descr + "'");
  char order = descr[0];
  std::string code = descr.substr(1);
  if (order == '>' && code != "b1" && code != "i1" && code != "u1") {
    bad(origin, at, "big-endian data ('" + descr + "') is not supported");
  }
  if (code == "b1") return DType::kBool;
  if (code == "i1") return DType::kInt8;
  if (code == "u1") return DType::kUInt8;
  if (code == "i4") return DType::kInt32;
  if (code == "i8") return DType::kInt64;
  if (code == "f2") return DType::kFloat16;
  if (code == "i2") return DType::kInt16;
  if (code == "u2") return DType::kUInt16;
  if (code == "u4") return DType::kUInt32;
  if (code == "u8") return DType::kUInt64;
  if (code == "f4") return DType::kFloat32;
  if (code == "f8") return DType::kFloat64;
  bad(origin, at, "unsupported dtype '" + descr + "'");
}

std::string descr_for(DType dt) {
  switch (dt) {
    case DType::kBool:
      return "|b1";
    case DType::kInt8:
      return "|i1";
    case DType::kUInt8:
      return "|u1";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kFloat16:
      return "<f2";
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kInt16:
      return "<i2";
    case DType::kUInt16:
      return "<u2";
    case DType::kUInt32:
      return "<u4";
    case DType::kUInt64:
      return "<u8";
    case DType::kBFloat16:
      break;
  }
  throw UserError("bfloat16 tensors cannot be written as .npy (NumPy has no such dtype)");
}

// Finds `'key':` in the header dict and returns the offset just after the colon.
size_t find_key(const std::string& header, const std::string& key, const std::string& origin,
                size_t base) {
  size_t p = header.find("'" + key + "'");
  if (p == std::string::npos) bad(origin, base, "header has no '" + key + "' entry");
  p = header.find(':', p);
  if (p == std::string::npos) bad(origin, base + p, "no ':' after '" + key + "'");
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  return p;
}

}  // namespace

namespace {

// Where the header ends (the data begins), from the magic, the version and the header length.
size_t npy_header_end(std::string_view bytes, const std::string& origin) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0) {
    bad(origin, 0, "missing \\x93NUMPY magic");
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  if (major == 1) {
    return 10 + (static_cast<uint8_t>(bytes[8]) | (size_t(static_cast<uint8_t>(bytes[9])) << 8));
  }
  if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad(origin, 8, "truncated header length");
    size_t header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    return 12 + header_len;
  }
  bad(origin, 6, "unsupported format version " + std::to_string(major));
}

struct NpyLayout {
  DType dtype;
  Shape shape;
  bool fortran;
  size_t data_start, need;  // the data's offset and byte count
};

// The header's dtype, shape and order; `bytes` holds at least the whole header.
NpyLayout npy_layout(std::string_view bytes, const std::string& origin) {
  const size_t data_start = npy_header_end(bytes, origin);
  const size_t header_start = static_cast<uint8_t>(bytes[6]) == 1 ? 10 : 12;
  const size_t header_len = data_start - header_start;
  if (data_start > bytes.size()) {
    bad(origin, header_start,
        "header of " + std::to_string(header_len) + " bytes runs past the end of the file");
  }
  std::string header(bytes.substr(header_start, header_len));

  size_t p = find_key(header, "descr", origin, header_start);
  if (p >= header.size() || header[p] != '\'')
    bad(origin, header_start + p, "descr is not a string");
  size_t q = header.find('\'', p + 1);
  if (q == std::string::npos) bad(origin, header_start + p, "unterminated descr");
  DType dt = dtype_from_descr(header.substr(p + 1, q - p - 1), origin, header_start + p);

  p = find_key(header, "fortran_order", origin, header_start);
  bool fortran;
  if (header.compare(p, 4, "True") == 0) {
    fortran = true;
  } else if (header.compare(p, 5, "False") == 0) {
    fortran = false;
  } else {
    bad(origin, header_start + p, "fortran_order is neither True nor False");
  }

  p = find_key(header, "shape", origin, header_start);
  if (p >= header.size() || header[p] != '(') bad(origin, header_start + p, "shape is not a tuple");
  Shape shape;
  size_t i = p + 1;
  while (true) {
    while (i < header.size() && (header[i] == ' ' || header[i] == ',')) ++i;
    if (i >= header.size()) bad(origin, header_start + i, "unterminated shape tuple");
    if (header[i] == ')') break;
    if (header[i] < '0' || header[i] > '9') {
      bad(origin, header_start + i, std::string("unexpected '") + header[i] + "' in shape");
    }
    int64_t d = 0;
    while (i < header.size() && header[i] >= '0' && header[i] <= '9') {
      d = d * 10 + (header[i] - '0');
      if (d > (int64_t(1) << 48)) bad(origin, header_start + i, "dimension too large");
      ++i;
    }
    shape.push_back(d);
  }
  // Each dimension is bounded, but their product is not: check it before trusting it.
  auto checked = checked_nbytes(shape, dt);
  if (!checked) {
    bad(origin, header_start + p,
        "shape " + dims_to_string(shape) + " of " + std::string(dtype_name(dt)) +
            " needs more bytes than fit in 64 bits");
  }
  return {dt, std::move(shape), fortran, data_start, static_cast<size_t>(*checked)};
}

// Reads up to `n` more bytes of fd onto `out`; stops early at the end of the file.
void read_more(int fd, size_t n, std::string& out, const std::string& origin) {
  char buf[1 << 16];
  while (n > 0) {
    const ssize_t got = ::read(fd, buf, std::min(n, sizeof buf));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw UserError("cannot read '" + origin + "': " + std::strerror(errno));
    }
    if (got == 0) return;
    out.append(buf, static_cast<size_t>(got));
    n -= static_cast<size_t>(got);
  }
}

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& origin) {
  const NpyLayout l = npy_layout(bytes, origin);
  const size_t need = l.need, data_start = l.data_start;
  const DType dt = l.dtype;
  const Shape& shape = l.shape;
  if (bytes.size() - data_start < need) {
    bad(origin, bytes.size(),
        "data truncated: expected " + std::to_string(need) + " bytes of data after offset " +
            std::to_string(data_start) + ", found " + std::to_string(bytes.size() - data_start));
  }
  if (!l.fortran) {
    Tensor t = Tensor::empty(dt, shape);
    if (need) std::memcpy(t.data(), bytes.data() + data_start, need);
    return t;
  }
  // Fortran order: the data is the transpose's C order; read it as such, then view back.
  Shape rev(shape.rbegin(), shape.rend());
  Tensor t = Tensor::empty(dt, rev);
  if (need) std::memcpy(t.data(), bytes.data() + data_start, need);
  std::vector<int> perm(shape.size());
  for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int>(perm.size() - 1 - k);
  return t.permute(perm).contiguous();
}

Tensor read_npy(const std::filesystem::path& path) {
  // Read in the header's order — the fixed prefix, the header, then exactly the data it
  // declares — so a device, a pipe or a huge file costs no more than the tensor it holds.
  const std::string origin = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError("cannot open '" + origin + "': " + std::strerror(errno));
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
    throw UserError("cannot read '" + origin + "': it is a folder");
  std::string bytes;
  read_more(fd, 12, bytes, origin);
  const size_t header_end = npy_header_end(bytes, origin);
  if (header_end > bytes.size()) read_more(fd, header_end - bytes.size(), bytes, origin);
  const NpyLayout l = npy_layout(bytes, origin);
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < l.data_start + l.need) {
    bad(origin, static_cast<size_t>(st.st_size),
        "data truncated: expected " + std::to_string(l.need) + " bytes of data after offset " +
            std::to_string(l.data_start) + ", the file has " +
            std::to_string(static_cast<uint64_t>(st.st_size) -
                           std::min<uint64_t>(st.st_size, l.data_start)));
  }
  if (l.data_start + l.need > bytes.size())
    read_more(fd, l.data_start + l.need - bytes.size(), bytes, origin);
  return parse_npy(bytes, origin);
}

std::string to_npy(const Tensor& tensor) {
  std::string header =
      "{'descr': '" + descr_for(tensor.dtype()) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < tensor.shape().size(); ++i) {
    header += std::to_string(tensor.shape()[i]);
    if (tensor.shape().size() == 1 || i + 1 < tensor.shape().size()) header += ", ";
  }
  header += "), }";
  // Pad so the data starts on a 64-byte boundary, newline-terminated (format 1.0).
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  Tensor c = tensor.contiguous();
  out.append(static_cast<const char*>(c.data()), c.nbytes());
  return out;
}

void write_npy(const std::filesystem::path& path, const Tensor& tensor) {
  write_file_atomic(path, to_npy(tensor));
}

}  // namespace kiln
