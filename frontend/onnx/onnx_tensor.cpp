#include "frontend/onnx/onnx_tensor.h"

#include <fcntl.h>
#include <onnx/onnx_pb.h>
// After onnx_pb.h, which sets up the declarations it relies on.
#include <onnx/onnx-data_pb.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "frontend/model_files.h"
#include "runtime/engine/default_engine.h"
#include "runtime/engine/parallel_for.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/strings.h"

namespace kiln {
namespace fs = std::filesystem;

std::optional<DType> dtype_from_onnx(int code) {
  switch (code) {
    case onnx::TensorProto::FLOAT:
      return DType::kFloat32;
    case onnx::TensorProto::DOUBLE:
      return DType::kFloat64;
    case onnx::TensorProto::INT8:
      return DType::kInt8;
    case onnx::TensorProto::UINT8:
      return DType::kUInt8;
    case onnx::TensorProto::INT32:
      return DType::kInt32;
    case onnx::TensorProto::INT64:
      return DType::kInt64;
    case onnx::TensorProto::BOOL:
      return DType::kBool;
    case onnx::TensorProto::FLOAT16:
      return DType::kFloat16;
    case onnx::TensorProto::BFLOAT16:
      return DType::kBFloat16;
    case onnx::TensorProto::INT16:
      return DType::kInt16;
    case onnx::TensorProto::UINT16:
      return DType::kUInt16;
    case onnx::TensorProto::UINT32:
      return DType::kUInt32;
    case onnx::TensorProto::UINT64:
      return DType::kUInt64;
    default:
      return std::nullopt;
  }
}

std::string onnx_dtype_name(int code) {
  if (onnx::TensorProto::DataType_IsValid(code)) {
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(code));
  }
  return "data type " + std::to_string(code);
}

int onnx_dtype_code(DType dt) {
  for (int code = onnx::TensorProto::DataType_MIN; code <= onnx::TensorProto::DataType_MAX;
       ++code) {
    if (dtype_from_onnx(code) == dt) return code;
  }
  throw InternalError("no ONNX data type for " + std::string(dtype_name(dt)));
}

void tensor_to_onnx(const Tensor& t, const std::string& name, onnx::TensorProto* proto) {
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(onnx_dtype_code(t.dtype()));
  for (int64_t d : t.shape()) proto->add_dims(d);
  const Tensor c = t.contiguous();
  proto->set_raw_data(std::string(static_cast<const char*>(c.data()), c.nbytes()));
}

namespace {

// Where an external tensor's bytes are, checked: the file resolves (symlinks included) inside
// `base_dir`, and holds `expect` bytes at the offset, so nothing is read or allocated for a
// size the file cannot back.
struct ExternalSpan {
  fs::path file;
  int64_t offset = 0;
  int64_t length = 0;
};

ExternalSpan locate_external(const onnx::TensorProto& proto, const fs::path& base_dir,
                             const std::string& where, uint64_t expect, const std::string& what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    try {
      size_t used = 0;
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value(), &used);
      if (kv.key() == "length") length = std::stoll(kv.value(), &used);
      if ((kv.key() == "offset" || kv.key() == "length") && used != kv.value().size())
        throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      throw UserError(where + ": external data '" + kv.key() + "' is not a number: '" + kv.value() +
                      "'");
    }
  }
  if (location.empty()) throw UserError(where + ": external data without a location");
  if (offset < 0 || length < -1) {
    throw UserError(where + ": external data offset " + std::to_string(offset) + " length " +
                    std::to_string(length) + " is negative");
  }
  const fs::path file = file_beside_model(base_dir, location, where + ": external data location");
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0)
    throw UserError(where + ": cannot open external data file " + file.string());
  if (!S_ISREG(st.st_mode))
    throw UserError(where + ": external data file " + file.string() + " is not a regular file");
  const int64_t size = st.st_size;
  if (offset > size || (length >= 0 && length > size - offset)) {
    throw UserError(where + ": external data file " + file.string() + " has " +
                    std::to_string(size) + " bytes; offset " + std::to_string(offset) + " length " +
                    std::to_string(length) + " runs past its end");
  }
  if (length < 0) length = size - offset;
  if (static_cast<uint64_t>(length) != expect) {
    throw UserError(where + ": external data has " + std::to_string(length) + " bytes (offset " +
                    std::to_string(offset) + " of " + file.string() + "), " + what + " needs " +
                    std::to_string(expect));
  }
  return ExternalSpan{file, offset, length};
}

// An external tensor's bytes: mapped where they start 64 bytes into a page or at a multiple
// of that (exporters align large tensors to pages), so a model of many gigabytes costs no
// copy and pages are read as they are used; copied otherwise. The mapping is private and
// read-only: the model's file is never written.
Tensor external_tensor(const ExternalSpan& span, DType dtype, const Shape& shape,
                       const std::string& where) {
  const int fd = ::open(span.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError(where + ": cannot open external data file " + span.file.string());
  const FdCloser closer{fd};
  const auto length = static_cast<size_t>(span.length);
  const auto page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  if (length > 0 && span.offset % 64 == 0) {
    const int64_t start = span.offset / page * page;
    const size_t mapped = length + static_cast<size_t>(span.offset - start);
    void* base = ::mmap(nullptr, mapped, PROT_READ, MAP_PRIVATE, fd, start);
    if (base != MAP_FAILED) {
      auto storage = std::make_shared<Storage>(
          base, mapped, [mapped](void* p) { ::munmap(p, mapped); }, false);
      return Tensor(std::move(storage), static_cast<size_t>(span.offset - start), dtype, shape,
                    contiguous_strides(shape));
    }
  }
  Tensor t = Tensor::empty(dtype, shape);
  auto* out = static_cast<char*>(t.data());
  for (size_t got = 0; got < length;) {
    const ssize_t n = ::pread(fd, out + got, length - got, static_cast<off_t>(span.offset) + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw UserError(where + ": reading external data file " + span.file.string() + " failed" +
                      (n < 0 ? std::string(": ") + std::strerror(errno) : " (it shrank)"));
    }
    got += static_cast<size_t>(n);
  }
  return t;
}

template <class Field>
void copy_field(const Field& field, Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (is_float(t.dtype())) {
      t.store(i, static_cast<double>(field.Get(static_cast<int>(i))));
    } else {
      t.store_int(i, static_cast<int64_t>(field.Get(static_cast<int>(i))));
    }
  }
}

}  // namespace

void MappedCopies::add(void* to, const void* from, size_t bytes) {
  if (bytes) copies_.push_back({static_cast<char*>(to), static_cast<const char*>(from), bytes});
}

void MappedCopies::run() {
  constexpr size_t kPiece = size_t{2} << 20;
  constexpr size_t kParallelBytes = size_t{16} << 20;  // below, waking workers costs more
  std::vector<Copy> pieces;
  size_t total = 0;
  for (const Copy& c : copies_) {
    for (size_t at = 0; at < c.bytes; at += kPiece)
      pieces.push_back({c.to + at, c.from + at, std::min(kPiece, c.bytes - at)});
    total += c.bytes;
  }
  copies_.clear();
  const auto copy = [&](int k) {
    const Copy& p = pieces[static_cast<size_t>(k)];
    std::memcpy(p.to, p.from, p.bytes);
  };
  if (total >= kParallelBytes) {
    parallel_for(default_engine(), static_cast<int>(pieces.size()), copy, "model weights");
  } else {
    for (size_t k = 0; k < pieces.size(); ++k) copy(static_cast<int>(k));
  }
}

Tensor tensor_from_onnx(const onnx::TensorProto& proto, const fs::path& base_dir,
                        const std::string& where, const MappedRawData* mapped,
                        MappedCopies* copies) {
  auto dt = dtype_from_onnx(proto.data_type());
  if (!dt)
    throw UnsupportedError(where + ": element type " + onnx_dtype_name(proto.data_type()) +
                           " is not supported");
  Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape) {
    if (d < 0) throw UserError(where + ": negative dimension in " + dims_to_string(shape));
  }
  if (proto.has_segment()) throw UnsupportedError(where + ": segmented tensors are not supported");
  // Check the declared size against the data present before allocating anything for it.
  const auto checked = checked_nbytes(shape, *dt);
  if (!checked) {
    throw UserError(where + ": dims " + dims_to_string(shape) + " of " +
                    std::string(dtype_name(*dt)) + " need more bytes than fit in 64 bits");
  }
  const size_t nbytes = static_cast<size_t>(*checked);
  const int64_t n = static_cast<int64_t>(nbytes / dtype_size(*dt));
  auto count_error = [&](const std::string& field, size_t got) {
    return UserError(where + ": " + field + " holds " + std::to_string(got) + " values but dims " +
                     dims_to_string(shape) + " need " + std::to_string(n));
  };
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    const ExternalSpan span = locate_external(
        proto, base_dir, where, nbytes, std::string(dtype_name(*dt)) + " " + dims_to_string(shape));
    return external_tensor(span, *dt, shape, where);
  }
  if (mapped || proto.has_raw_data()) {
    const uint64_t size = mapped ? mapped->length : proto.raw_data().size();
    if (size != nbytes) {
      throw UserError(where + ": raw_data has " + std::to_string(size) + " bytes, " +
                      std::string(dtype_name(*dt)) + " " + dims_to_string(shape) + " needs " +
                      std::to_string(nbytes));
    }
    const char* from = mapped ? static_cast<const char*>(mapped->file->data()) + mapped->offset
                              : proto.raw_data().data();
    Tensor t = Tensor::empty(*dt, shape);
    if (copies && mapped) {
      copies->add(t.data(), from, nbytes);
    } else if (nbytes) {
      std::memcpy(t.data(), from, nbytes);
    }
    return t;
  }
  int64_t present = 0;
  const char* field = "int32_data";
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT:
      present = proto.float_data_size(), field = "float_data";
      break;
    case onnx::TensorProto::DOUBLE:
      present = proto.double_data_size(), field = "double_data";
      break;
    case onnx::TensorProto::INT64:
      present = proto.int64_data_size(), field = "int64_data";
      break;
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64:
      present = proto.uint64_data_size(), field = "uint64_data";
      break;
    default:
      present = proto.int32_data_size();
      break;
  }
  if (present != n) throw count_error(field, static_cast<size_t>(present));
  Tensor t = Tensor::empty(*dt, shape);
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT:
      copy_field(proto.float_data(), t);
      break;
    case onnx::TensorProto::DOUBLE:
      copy_field(proto.double_data(), t);
      break;
    case onnx::TensorProto::INT64:
      copy_field(proto.int64_data(), t);
      break;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: {
      // 16-bit floats travel as their bit patterns in int32_data.
      auto* p = static_cast<uint16_t*>(t.data());
      for (int64_t i = 0; i < n; ++i)
        p[i] = static_cast<uint16_t>(proto.int32_data(static_cast<int>(i)));
      break;
    }
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64: {
      // uint64_data: store_int keeps the low bits, so values past 2^63 survive.
      for (int64_t i = 0; i < n; ++i)
        t.store_int(i, static_cast<int64_t>(proto.uint64_data(static_cast<int>(i))));
      break;
    }
    default:  // INT32, INT16, UINT16, INT8, UINT8, BOOL
      copy_field(proto.int32_data(), t);
      break;
  }
  return t;
}

namespace {

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path.string() + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::vector<Tensor> sequence_elements(const onnx::SequenceProto& seq, const fs::path& path) {
  // SequenceProto.DataType: 1 is TENSOR; sequences of sequences, maps or optionals are not
  // values kiln's models take.
  if (seq.elem_type() != 1 && seq.tensor_values_size() == 0 && seq.elem_type() != 0)
    throw UnsupportedError(path.string() + ": a sequence of element kind " +
                           std::to_string(seq.elem_type()) + " (only tensors are supported)");
  std::vector<Tensor> out;
  for (int i = 0; i < seq.tensor_values_size(); ++i) {
    out.push_back(tensor_from_onnx(seq.tensor_values(i), path.parent_path(),
                                   path.string() + ": element " + std::to_string(i)));
  }
  return out;
}

}  // namespace

Tensor load_onnx_tensor_file(const fs::path& path) {
  onnx::TensorProto proto;
  if (!proto.ParseFromString(file_bytes(path)))
    throw UserError(path.string() + ": not a serialized ONNX TensorProto");
  return tensor_from_onnx(proto, path.parent_path(),
                          path.string() + ": tensor '" + proto.name() + "'");
}

ModelValue load_onnx_value_file(const fs::path& path, ValueKind kind) {
  if (kind == ValueKind::kTensor) return ModelValue::of(load_onnx_tensor_file(path));
  const std::string bytes = file_bytes(path);
  if (kind == ValueKind::kSequence) {
    onnx::SequenceProto seq;
    if (!seq.ParseFromString(bytes))
      throw UserError(path.string() + ": not a serialized ONNX SequenceProto");
    return ModelValue::sequence_of(sequence_elements(seq, path));
  }
  onnx::OptionalProto opt;
  if (!opt.ParseFromString(bytes))
    throw UserError(path.string() + ": not a serialized ONNX OptionalProto");
  // OptionalProto.DataType: 0 is empty, 1 a tensor, 3 a sequence.
  if (opt.has_sequence_value())
    return ModelValue::sequence_of(sequence_elements(opt.sequence_value(), path));
  if (opt.has_tensor_value()) {
    return ModelValue::of(tensor_from_onnx(opt.tensor_value(), path.parent_path(),
                                           path.string() + ": the optional's tensor"));
  }
  if (opt.elem_type() != 0)
    throw UnsupportedError(path.string() + ": an optional of element kind " +
                           std::to_string(opt.elem_type()) +
                           " (tensors and sequences are supported)");
  return ModelValue::none();
}

}  // namespace kiln
