// The sinks, parsers and readers every model-controlled string goes through (util/escape.h,
// util/quantity.h, util/json_text.h), checked against an independent judge where one exists:
// the C compiler for C text, byte-by-byte round trips for literals, the definitions for sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "compiler/subprocess.h"
#include "graph/graph.h"
#include "tests/helpers.h"
#include "util/escape.h"
#include "util/fs.h"
#include "util/json_text.h"
#include "util/quantity.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// Every byte value, and the sequences that end comments, splice lines and form trigraphs.
std::vector<std::string> hostile_strings() {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  return {all,
          "*/",
          "*\\\n/",
          "??/",
          "??/\n*/",
          "\"",
          "\\",
          "\\\"",
          "?\?=",
          "a\0b",
          "*??/\n/",
          "x/*y",
          "\xe2\x80\xae",
          "\xc2\x9b"
          "31m",
          "\xff\xfe",
          "\xed\xa0\x80",
          "emoji \xf0\x9f\x94\xa5"};
}

// Compiles `body` under strict C11 (trigraphs on) with warnings as errors; the program prints
// its one string literal's bytes as hex, which the test compares with the input.
std::string run_c(const std::string& body) {
  const fs::path dir = testing::temp_dir("util-c");
  write_file_atomic(dir / "t.c", body);
  auto cc = run_process({"cc", "-std=c11", "-Wall", "-Werror", "-Wno-trigraphs", "-o",
                         (dir / "t").string(), (dir / "t.c").string()});
  if (cc.exit_code != 0) return "compile error: " + cc.err;
  return run_process({(dir / "t").string()}).out;
}

std::string hex(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

TEST(Escape, CStringLiteralsHoldExactlyTheirBytes) {
  std::string program = "#include <stdio.h>\nint main(void) {\n";
  std::string expected;
  for (const auto& s : hostile_strings()) {
    program += "  { static const char s[] = " + c_string_literal(s) +
               "; for (size_t i = 0; i + 1 < sizeof s; ++i) printf(\"%02x\", (unsigned char)s[i]); "
               "printf(\"\\n\"); }\n";
    expected += hex(s) + "\n";
  }
  program += "  return 0;\n}\n";
  EXPECT_EQ(run_c(program), expected);
}

TEST(Escape, CommentTextNeverEndsItsCommentNorSplicesALine) {
  // Each hostile string inside a comment, followed by code that must still be code.
  std::string program = "#include <stdio.h>\nint main(void) {\n  int seen = 0;\n";
  const auto strings = hostile_strings();
  for (const auto& s : strings) program += "  /* " + c_comment_text(s) + " */ ++seen;\n";
  program += "  printf(\"%d\", seen);\n  return 0;\n}\n";
  EXPECT_EQ(run_c(program), std::to_string(strings.size()));
  // Readable where it can be: printable ASCII and UTF-8 stay.
  EXPECT_EQ(c_comment_text("conv1 (?, 64) \xc3\xa9t\xc3\xa9"), "conv1 (?, 64) \xc3\xa9t\xc3\xa9");
  EXPECT_EQ(c_comment_text("a*/b"), "a*\\x2fb");
}

TEST(Escape, TerminalTextKeepsNoControlSequence) {
  for (const auto& s : hostile_strings()) {
    const std::string t = terminal_text(s);
    for (size_t i = 0; i < t.size(); ++i) {
      const auto c = static_cast<unsigned char>(t[i]);
      EXPECT_TRUE(c == '\n' || c == '\t' || c >= 0x20) << "control byte " << int(c) << " kept";
      EXPECT_NE(c, 0x7f);
    }
    EXPECT_TRUE(is_utf8(t)) << "invalid UTF-8 passed through";
    EXPECT_EQ(t.find("\xc2\x9b"), std::string::npos) << "a C1 control (CSI) passed through";
    EXPECT_EQ(t.find("\xe2\x80\xae"), std::string::npos) << "a right-to-left override passed";
    EXPECT_EQ(terminal_line(s).find('\n'), std::string::npos);
  }
  EXPECT_EQ(terminal_text("resnet \xce\xb1\n"), "resnet \xce\xb1\n");
  EXPECT_EQ(in_quotes(std::string(500, 'a'), 10), "'aaaaaaaaaa'... (500 bytes)");
}

TEST(Escape, FileNamesStayInTheirFolder) {
  for (const auto& s : hostile_strings()) {
    const std::string f = file_name_for(s);
    EXPECT_FALSE(f.empty());
    EXPECT_EQ(f.find('/'), std::string::npos);
    EXPECT_EQ(f.find('\0'), std::string::npos);
    EXPECT_NE(f[0], '.');
    EXPECT_EQ((fs::path("/out") / f).parent_path(), fs::path("/out"));
  }
  for (const char* s : {"..", ".", "../../x", "/abs/y", ""}) {
    EXPECT_EQ((fs::path("/out") / file_name_for(s)).lexically_normal().parent_path(),
              fs::path("/out"))
        << s;
  }
  EXPECT_EQ(file_name_for("logits"), "logits");
  EXPECT_EQ(file_name_for("resnet.fc-1"), "resnet.fc-1");
}

TEST(Escape, Utf8ValidationFollowsTheStandard) {
  EXPECT_TRUE(is_utf8("plain"));
  EXPECT_TRUE(is_utf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  EXPECT_FALSE(is_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(is_utf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(is_utf8("\x80"));              // a lone continuation byte
}

TEST(Quantity, SizesAreFiniteDecimalNumbersWithBinaryUnits) {
  EXPECT_EQ(parse_size("2G", "x"), uint64_t{2} << 30);
  EXPECT_EQ(parse_size("1.5KiB", "x"), 1536u);
  EXPECT_EQ(parse_size("64kb", "x"), 65536u);
  EXPECT_EQ(parse_size("1", "x"), 1u);
  EXPECT_EQ(parse_size("8388608T", "x"), uint64_t{1} << 63);  // 2^63 itself is allowed
  for (const char* bad : {"1e30", "inf", "nan", "-0", "0x10", "0", "", " 1", "1 G", "1.2.3", "+5",
                          "8388609T", "99999999999999999999", "5Q", "1e3"}) {
    const std::string m = error_of([&] { parse_size(bad, "KILN_CACHE_MAX_SIZE"); });
    EXPECT_NE(m.find("KILN_CACHE_MAX_SIZE: "), std::string::npos) << bad << ": " << m;
    EXPECT_NE(m.find("is not a size"), std::string::npos) << bad << ": " << m;
  }
  EXPECT_NE(error_of([] { parse_size("1K", "x", 4096); }).find("too small"), std::string::npos);
}

TEST(Quantity, DurationsHaveUnitsAndBounds) {
  EXPECT_DOUBLE_EQ(parse_duration("250ms", "x", 0.01, 600), 0.25);
  EXPECT_DOUBLE_EQ(parse_duration("2", "x", 0.01, 600), 2);
  EXPECT_DOUBLE_EQ(parse_duration("2", "x", 0.001, 600, "ms"), 0.002);
  EXPECT_DOUBLE_EQ(parse_duration("1.5m", "x", 0, 3600), 90);
  EXPECT_DOUBLE_EQ(parse_duration("1w", "x", 0, 1e9), 7 * 86400);
  for (const char* bad : {"0x10", "1e-9", "inf", "nan", "-1", "", "soon", "1 s", "5y"}) {
    const std::string m = error_of([&] { parse_duration(bad, "KILN_REMOTE_TIMEOUT", 0.01, 600); });
    EXPECT_NE(m.find("KILN_REMOTE_TIMEOUT: "), std::string::npos) << bad << ": " << m;
  }
  EXPECT_NE(error_of([] {
              parse_duration("0.001", "KILN_REMOTE_LEASE", 1, 3600);
            }).find("shorter than 1 s"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_duration("2h", "KILN_REMOTE_TIMEOUT", 0.01, 600);
            }).find("longer than 600 s"),
            std::string::npos);
}

TEST(Quantity, NamesAreShortAndPlain) {
  for (const char* good : {"kiln", "team-b", "a.b_c", "K2"}) EXPECT_EQ(check_name(good, "x"), good);
  for (const std::string bad :
       {std::string(""), std::string("a*b"), std::string("a?b"), std::string("a[b"),
        std::string("a:b"), std::string("a b"), std::string(".hidden"), std::string("-flag"),
        std::string(65, 'a'), std::string("a\nb"), std::string("\xc3\xa9")}) {
    const std::string m = error_of([&] { check_name(bad, "KILN_REMOTE_CACHE_NAMESPACE"); });
    EXPECT_NE(m.find("is not a name"), std::string::npos) << bad << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "the message shows a raw newline: " << m;
  }
}

TEST(JsonText, UntrustedJsonIsBoundedAndUnambiguous) {
  EXPECT_EQ(parse_untrusted_json(R"({"a": [1, {"b": "]}"}]})", "t")["a"][1]["b"], "]}");
  const std::string deep = std::string(33, '[') + std::string(33, ']');
  std::string m = error_of([&] { parse_untrusted_json(deep, "f.json"); });
  EXPECT_NE(m.find("f.json: byte 32: nested deeper than 32 levels"), std::string::npos) << m;
  // Brackets inside strings are not nesting.
  EXPECT_NO_THROW(parse_untrusted_json("[\"" + std::string(100, '[') + "\"]", "t"));
  m = error_of([] { parse_untrusted_json(R"({"a": 1, "b": {"a": 2}, "a": 3})", "f.json"); });
  EXPECT_NE(m.find("byte 24: the key 'a' appears twice in one object"), std::string::npos) << m;
  // Spelled differently, the same key.
  m = error_of([] { parse_untrusted_json(R"({"a": 1, "\u0061": 2})", "f.json"); });
  EXPECT_NE(m.find("appears twice"), std::string::npos) << m;
  // One key in two objects is fine.
  EXPECT_NO_THROW(parse_untrusted_json(R"([{"a": 1}, {"a": 2}])", "t"));
  m = error_of([] { parse_untrusted_json("{\"a\": [1, 2,, 3]}", "f.json"); });
  EXPECT_NE(m.find("f.json: byte 12: syntax error"), std::string::npos) << m;
  // Writing never throws on bytes that are not UTF-8.
  EXPECT_EQ(json_text(nlohmann::json("a\xff"
                                     "b")),
            "\"a\xef\xbf\xbd"
            "b\"");
  EXPECT_EQ(json_excerpt(nlohmann::json::parse(R"([1, [2, [3]]])")), "an array of 2 values");
  EXPECT_LE(json_excerpt(nlohmann::json(std::string(1000, 'x'))).size(), 50u);
}

TEST(GraphNames, InventedNamesNeverCollideAndLookupsFollowRenames) {
  Graph src("g");
  src.add_input("x", TensorType{DType::kFloat32, {2}});
  src.add_input("x.nchwc", TensorType{DType::kFloat32, {2}});
  Graph g("g");
  g.reserve_names_of(&src);
  EXPECT_EQ(g.fresh_name("y"), "y");
  EXPECT_EQ(g.fresh_name("x"), "x_2") << "a reserved (source) name was handed out";
  Variable* a = g.add_input(g.fresh_name("x.nchwc"), TensorType{DType::kFloat32, {2}});
  EXPECT_EQ(a->name, "x.nchwc_2");
  Variable* b = g.add_input(g.fresh_name("x.nchwc"), TensorType{DType::kFloat32, {2}});
  EXPECT_EQ(b->name, "x.nchwc_3");
  EXPECT_EQ(g.find_variable("x.nchwc_3"), b);
  g.rename(b, "renamed");
  EXPECT_EQ(g.find_variable("renamed"), b);
  EXPECT_EQ(g.find_variable("x.nchwc_3"), nullptr);
  EXPECT_NE(error_of([&] { g.rename(a, "renamed"); }).find("already used"), std::string::npos);
  // An unnamed value's "t<id>" does not take a name someone gave another value.
  Graph h("h");
  h.add_input("t1", TensorType{DType::kFloat32, {2}});
  Variable* c = h.add_constant(Tensor::from_doubles(DType::kFloat32, {2}, {1, 2}));
  Variable* d = h.add_constant(Tensor::from_doubles(DType::kFloat32, {2}, {1, 2}));
  EXPECT_NE(c->name, d->name);
  EXPECT_EQ(h.find_variable(c->name), c);
}

}  // namespace
}  // namespace kiln
