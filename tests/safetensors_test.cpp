// safetensors: reading files built by hand (independent of kiln's writer), round trips,
// alignment, and a clear error for every way a file can be wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "tests/helpers.h"
#include "util/fs.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// A file from a header text and raw data, as the format's definition lays it out.
std::string file_of(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

std::shared_ptr<Storage> bytes_of(const std::string& s) {
  auto st = allocate_storage(s.size());
  std::memcpy(st->data(), s.data(), s.size());
  return st;
}

std::string error_parsing(const std::string& s) {
  return testing::error_of([&] { parse_safetensors(bytes_of(s), "w.safetensors"); });
}

std::string raw(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// The same JSON library failure the fuzzers found in meta.json and the JSON loader.
TEST(Safetensors, AHeaderNumberTooLargeForAnyTypeIsNamed) {
  const std::string header = R"({"w": {"dtype": "F32", "shape": [1e92247], "data_offsets": [0, 4]}})";
  uint64_t n = header.size();
  const std::string file = raw(&n, 8) + header + std::string(4, '\0');
  EXPECT_NE(error_parsing(file).find("w.safetensors"), std::string::npos) << error_parsing(file);
  EXPECT_NE(error_parsing(file).find("header is not JSON"), std::string::npos);
}

TEST(Safetensors, ReadsAHandBuiltFile) {
  const float a[] = {1.5f, -0.0f, std::numeric_limits<float>::infinity(), NAN, 3.25f, -7.0f};
  const int64_t b[] = {-1, 1LL << 40};
  // b listed first in the header but stored second: order comes from the offsets.
  std::string header =
      R"({"b":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},)"
      R"("__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  Safetensors st = parse_safetensors(bytes_of(file_of(header, raw(a, 24) + raw(b, 16))), "mem");
  ASSERT_EQ(st.tensors.size(), 2u);
  EXPECT_EQ(st.tensors[0].first, "a");
  EXPECT_EQ(st.metadata.at("format"), "pt");
  const Tensor& ta = st.at("a", "mem");
  EXPECT_EQ(ta.dtype(), DType::kFloat32);
  EXPECT_EQ(ta.shape(), (Shape{2, 3}));
  std::vector<double> v = ta.to_doubles();
  EXPECT_EQ(v[0], 1.5);
  EXPECT_TRUE(std::signbit(v[1]));
  EXPECT_TRUE(std::isinf(v[2]));
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_EQ(v[5], -7.0);
  const Tensor& tb = st.at("b", "mem");
  EXPECT_EQ(tb.dtype(), DType::kInt64);
  EXPECT_EQ(tb.load_int(1), 1LL << 40);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tb.data()) % 64, 0u);  // copied: it sat at byte 24
  std::string m = testing::error_of([&] { st.at("c", "mem"); });
  EXPECT_NE(m.find("no tensor named 'c' (it holds 'a', 'b')"), std::string::npos) << m;
}

TEST(Safetensors, WritesWhatItReadsAndAligns) {
  fs::path dir = testing::temp_dir("safetensors");
  Tensor odd = Tensor::from_doubles(DType::kFloat64, {3}, {1, -2, 0.5});  // 24 bytes
  Tensor big = Tensor::empty(DType::kFloat32, {4, 16});                   // 256 bytes
  for (int64_t i = 0; i < big.numel(); ++i) big.store(i, i * 0.25 - 3);
  Tensor flags = Tensor::from_doubles(DType::kBool, {2, 2}, {1, 0, 0, 1});
  Tensor scalar = Tensor::scalar(DType::kInt32, -5);
  Tensor view = big.permute({1, 0});  // written contiguous
  write_safetensors(dir / "t.safetensors",
                    {{"odd", odd}, {"big", big}, {"flags", flags}, {"s", scalar}, {"view", view}},
                    {{"kiln.model", "abc"}});
  Safetensors back = read_safetensors(dir / "t.safetensors");
  ASSERT_EQ(back.tensors.size(), 5u);
  EXPECT_EQ(back.tensors[0].first, "big");  // whole 64-byte multiples first
  EXPECT_EQ(back.metadata.at("kiln.model"), "abc");
  EXPECT_EQ(back.at("odd", "").to_doubles(), odd.to_doubles());
  EXPECT_EQ(back.at("big", "").to_doubles(), big.to_doubles());
  EXPECT_EQ(back.at("flags", "").dtype(), DType::kBool);
  EXPECT_EQ(back.at("flags", "").to_doubles(), flags.to_doubles());
  EXPECT_EQ(back.at("s", "").shape(), Shape{});
  EXPECT_EQ(back.at("view", "").to_doubles(), view.contiguous().to_doubles());
  for (const auto& [n, t] : back.tensors)
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << n;
  // The mapped bytes outlive the Safetensors object through the tensors' storage.
  Tensor kept = back.at("big", "");
  back = {};
  EXPECT_EQ(kept.to_doubles(), big.to_doubles());

  std::string m = testing::error_of([&] {
    write_safetensors(dir / "u.safetensors", {{"a", odd}, {"a", big}});
  });
  EXPECT_NE(m.find("tensor 'a'"), std::string::npos) << m;
}

TEST(Safetensors, ReadTensorFilePicksByNameOrTheOnlyOne) {
  fs::path dir = testing::temp_dir("safetensors");
  Tensor x = Tensor::from_doubles(DType::kFloat32, {2}, {1, 2});
  Tensor y = Tensor::from_doubles(DType::kFloat32, {1}, {3});
  write_safetensors(dir / "one.safetensors", {{"w", x}});
  write_safetensors(dir / "two.safetensors", {{"x", x}, {"y", y}});
  write_npy(dir / "x.npy", x);
  EXPECT_EQ(read_tensor_file(dir / "one.safetensors", "anything").to_doubles(), x.to_doubles());
  EXPECT_EQ(read_tensor_file(dir / "two.safetensors", "y").to_doubles(), y.to_doubles());
  EXPECT_EQ(read_tensor_file(dir / "x.npy", "x").to_doubles(), x.to_doubles());
  std::string m = testing::error_of([&] { read_tensor_file(dir / "two.safetensors", "z"); });
  EXPECT_NE(m.find("no tensor named 'z' (it holds 'x', 'y')"), std::string::npos) << m;
  m = testing::error_of([&] { read_tensor_file(dir / "missing.safetensors", "z"); });
  EXPECT_NE(m.find("cannot open"), std::string::npos) << m;
  EXPECT_NE(m.find("missing.safetensors"), std::string::npos) << m;
}

TEST(Safetensors, BadFilesNameWhatIsWrongAndWhere) {
  const std::string a24(24, '\0');
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  auto expect = [](const std::string& m, const std::string& what) {
    EXPECT_NE(m.find("w.safetensors: byte"), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };
  EXPECT_EQ(error_parsing(file_of(ok, a24)), "no error");
  expect(error_parsing("abc"), "shorter than its 8-byte header length");
  expect(error_parsing(file_of(ok, a24).substr(0, 30)), "runs past the end of the file");
  expect(error_parsing(file_of(ok, a24.substr(0, 20))), "truncated?");
  expect(error_parsing(file_of(ok, a24 + "xx")),
         "the tensors cover 24 bytes of data, the file has 26");
  expect(error_parsing(file_of("{\"a\": [", a24)), "header is not JSON");
  expect(error_parsing(file_of("[1]", "")), "not a JSON object");
  expect(
      error_parsing(file_of(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", a24)),
      "needs 24 bytes but data_offsets are [0, 20]");
  expect(error_parsing(file_of(R"({"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", a24)),
         "dtype 'C64', which kiln does not support");
  expect(error_parsing(file_of(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", a24)),
         "bad dimension -1");
  expect(error_parsing(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", a24)),
         "no data_offsets");
  expect(error_parsing(file_of(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", a24)), "no dtype");
  // A product of bounded dimensions that overflows 64 bits.
  expect(
      error_parsing(file_of(
          R"({"a":{"dtype":"F64","shape":[281474976710656,281474976710656],"data_offsets":[0,8]}})",
          a24)),
      "needs more than 2^64 bytes");
  expect(error_parsing(file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                               R"("b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})",
                               a24.substr(0, 20))),
         "(tensors overlap)");
  expect(error_parsing(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                               a24)),
         "(a hole in the data)");
  expect(error_parsing(file_of(R"({"__metadata__":{"k":1}})", "")), "'k' is not a string");
  std::string huge(8, '\0');
  huge[6] = 1;  // 2^48
  expect(error_parsing(huge), "exceeds 100 MiB");
}

}  // namespace
}  // namespace kiln
