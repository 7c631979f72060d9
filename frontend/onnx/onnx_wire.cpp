#include "frontend/onnx/onnx_wire.h"

namespace kiln {

namespace {

// Field numbers in onnx.proto.
constexpr uint64_t kModelGraph = 7;
constexpr uint64_t kGraphInitializer = 5;
constexpr uint64_t kTensorRawData = 9;

enum WireType : uint64_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number, wire type, and where its payload lies.
struct Field {
  uint64_t number = 0;
  uint64_t wire_type = 0;
  size_t begin = 0;  // the field's first byte (its key)
  size_t data = 0;   // the payload (after the length, for length-delimited fields)
  size_t end = 0;    // one past its last byte
};

class Walker {
 public:
  explicit Walker(std::string_view bytes) : bytes_(bytes) {}

  std::optional<uint64_t> varint(size_t& at, size_t end) const {
    uint64_t value = 0;
    for (int shift = 0; shift < 64 && at < end; shift += 7) {
      const auto byte = static_cast<uint8_t>(bytes_[at++]);
      value |= uint64_t{byte & 0x7fu} << shift;
      if (!(byte & 0x80u)) return value;
    }
    return std::nullopt;  // truncated, or longer than ten bytes
  }

  // The field starting at `at`, or nullopt when it is malformed or a group.
  std::optional<Field> field(size_t at, size_t end) const {
    Field f;
    f.begin = at;
    const auto key = varint(at, end);
    if (!key) return std::nullopt;
    f.number = *key >> 3;
    f.wire_type = *key & 7;
    if (f.number == 0 || f.number > 0x1fffffff) return std::nullopt;
    size_t size = 0;
    switch (f.wire_type) {
      case kVarint:
        if (!varint(at, end)) return std::nullopt;
        break;
      case kFixed64:
        size = 8;
        break;
      case kFixed32:
        size = 4;
        break;
      case kLengthDelimited: {
        const auto n = varint(at, end);
        if (!n || *n > end - at) return std::nullopt;
        size = static_cast<size_t>(*n);
        break;
      }
      default:
        return std::nullopt;  // groups (3, 4) and the unused wire types
    }
    if (size > end - at) return std::nullopt;
    f.data = at;
    f.end = at + size;
    return f;
  }

  std::string_view slice(size_t begin, size_t end) const {
    return bytes_.substr(begin, end - begin);
  }

 private:
  std::string_view bytes_;
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_message(std::string& out, uint64_t number, const std::string& body) {
  put_varint(out, number << 3 | kLengthDelimited);
  put_varint(out, body.size());
  out += body;
}

// Copies the message in [begin, end) to `out` with `rewrite` deciding per field: it returns
// false to keep the field as it is, true when it wrote (or dropped) the field itself.
template <class Rewrite>
bool copy_message(const Walker& w, size_t begin, size_t end, std::string& out, Rewrite rewrite) {
  for (size_t at = begin; at < end;) {
    const std::optional<Field> f = w.field(at, end);
    if (!f) return false;
    const std::optional<bool> handled = rewrite(*f);
    if (!handled) return false;
    if (!*handled) out += w.slice(f->begin, f->end);
    at = f->end;
  }
  return true;
}

}  // namespace

std::optional<LiftedModel> lift_initializer_data(std::string_view model) {
  const Walker w(model);
  LiftedModel lifted;
  lifted.rest.reserve(model.size() < (size_t{1} << 20) ? model.size() : size_t{1} << 20);
  const auto tensor = [&](const Field& t, std::string& graph_out) -> std::optional<bool> {
    std::optional<RawDataSpan> raw;
    std::string body;
    const bool ok =
        copy_message(w, t.data, t.end, body, [&](const Field& f) -> std::optional<bool> {
          if (f.number != kTensorRawData) return false;
          if (f.wire_type != kLengthDelimited) return std::nullopt;
          raw = RawDataSpan{f.data, f.end - f.data};
          return true;
        });
    if (!ok) return std::nullopt;
    lifted.raw.push_back(raw);
    put_message(graph_out, kGraphInitializer, body);
    return true;
  };
  const auto graph = [&](const Field& g) -> std::optional<bool> {
    std::string body;
    const bool ok =
        copy_message(w, g.data, g.end, body, [&](const Field& f) -> std::optional<bool> {
          if (f.number != kGraphInitializer) return false;
          if (f.wire_type != kLengthDelimited) return std::nullopt;
          return tensor(f, body);
        });
    if (!ok) return std::nullopt;
    put_message(lifted.rest, kModelGraph, body);
    return true;
  };
  const bool ok =
      copy_message(w, 0, model.size(), lifted.rest, [&](const Field& f) -> std::optional<bool> {
        if (f.number != kModelGraph) return false;
        if (f.wire_type != kLengthDelimited) return std::nullopt;
        return graph(f);
      });
  if (!ok) return std::nullopt;
  return lifted;
}

}  // namespace kiln
