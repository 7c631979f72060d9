// util/, ctemplate/ and graph/ building blocks.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "compiler/subprocess.h"
#include "ctemplate/c_layout.h"
#include "ctemplate/code_writer.h"
#include "ctemplate/prelude.h"
#include "ctemplate/template.h"
#include "graph/graph.h"
#include "graph/wire_text.h"
#include "ops/builders.h"
#include "ops/kernel_args.h"
#include "ops/registry.h"
#include "tests/helpers.h"
#include "util/sha256.h"

namespace kiln {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  Sha256 h;
  h.update("ab");
  h.update("c");
  EXPECT_EQ(h.hex_digest(), sha256_hex("abc"));
}

// Lengths around block boundaries, fed whole and in uneven pieces, against Python's hashlib:
// covers the hardware (SHA extensions) path and the buffered path; KILN_NO_SHA_NI=1 in the
// environment runs the same checks on the portable code.
TEST(Sha256, MatchesHashlibAcrossLengthsAndChunkings) {
  std::vector<size_t> lengths{1, 55, 56, 63, 64, 65, 127, 128, 129, 1000, 4096 + 17, 100000};
  std::string script = "import hashlib\nfor n in [";
  for (size_t n : lengths) script += std::to_string(n) + ",";
  script += "]: print(hashlib.sha256(bytes((i * 7 + 3) % 251 for i in range(n))).hexdigest())";
  ProcessResult py = run_process({"/usr/bin/python3", "-c", script});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  std::istringstream expected(py.out);
  for (size_t n : lengths) {
    std::string data(n, '\0');
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>((i * 7 + 3) % 251);
    std::string want;
    expected >> want;
    EXPECT_EQ(sha256_hex(data), want) << n;
    Sha256 pieces;
    for (size_t at = 0, step = 1; at < n; at += step, step = step * 3 % 97 + 1) {
      pieces.update(data.data() + at, std::min(step, n - at));
    }
    EXPECT_EQ(pieces.hex_digest(), want) << n << " in pieces";
  }
}

TEST(Sha256, RunsThePathTheEnvironmentAsksFor) {
  if (std::getenv("KILN_NO_SHA_NI")) {
    EXPECT_FALSE(sha256_uses_sha_extensions()) << "KILN_NO_SHA_NI=1 must run the portable code";
  } else {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
    EXPECT_EQ(sha256_uses_sha_extensions(), text.find(" sha_ni") != std::string::npos);
  }
}

TEST(Template, RendersAndFailsLoudlyOnUnknownPlaceholders) {
  EXPECT_EQ(render_template("a ${x} b ${y}", {{"x", "1"}, {"y", "2"}}), "a 1 b 2");
  try {
    render_template("line one\nuses ${nope} here", {{"x", "1"}}, "my template");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "my template: line 2: unknown placeholder '${nope}'");
  }
  EXPECT_THROW(render_template("${unterminated", {}), UserError);
  EXPECT_EQ(render_template("$x and $ alone", {}), "$x and $ alone");
}

TEST(CodeWriter, SourceMapPointsAtNodeAndFragmentLine) {
  CodeWriter w;
  w.line("/* header */");
  w.indent();
  w.fragment("int a = 1;\nint b = 2;\n", 7, "c_code");
  w.dedent();
  w.line("}");
  EXPECT_EQ(w.str(), "/* header */\n  int a = 1;\n  int b = 2;\n}\n");
  EXPECT_EQ(w.origin(1)->node, -1);
  EXPECT_EQ(w.origin(3)->node, 7);
  EXPECT_EQ(w.origin(3)->fragment, "c_code");
  EXPECT_EQ(w.origin(3)->fragment_line, 2);
  EXPECT_EQ(w.origin(99), nullptr);
}

// Fragments are laid out by their structure whatever their emitters' spaces: one level per
// brace, one per braceless loop header, the closing brace under its opener, `} else {`
// continuing the same level, continuation lines inside parentheses two levels deeper, and
// braces inside strings, characters and comments ignored. Preprocessor lines stay verbatim.
TEST(CLayout, IndentsByBracesAndHeadersNotByTheEmittersSpaces) {
  const std::string text =
      "      {\n"
      "int a = 1;\n"
      "    for (int i = 0; i < n; ++i)\n"
      "for (int j = 0; j < n; ++j) {\n"
      "x[i] = \"{\" [0] == '{' ? 1 : 0; /* } */\n"
      "        }\n"
      "if (a) {\n"
      "a = f(b,\n"
      "c);\n"
      "} else {\n"
      "a = 2;\n"
      "}\n"
      "KILN_NOVEC for (;;)\n"
      "break;\n"
      "#define X(a) \\\n"
      "   (a)\n"
      "}\n";
  const std::string expect =
      "{\n"
      "  int a = 1;\n"
      "  for (int i = 0; i < n; ++i)\n"
      "    for (int j = 0; j < n; ++j) {\n"
      "      x[i] = \"{\" [0] == '{' ? 1 : 0; /* } */\n"
      "    }\n"
      "  if (a) {\n"
      "    a = f(b,\n"
      "        c);\n"
      "  } else {\n"
      "    a = 2;\n"
      "  }\n"
      "  KILN_NOVEC for (;;)\n"
      "    break;\n"
      "#define X(a) \\\n"
      "   (a)\n"
      "}\n";
  EXPECT_EQ(lay_out_c_text(text), expect);
  // Laying out is idempotent, so code that passes the linker twice is the same text.
  EXPECT_EQ(lay_out_c_text(expect), expect);
  // The writer puts the same layout under its own depth and maps every line.
  CodeWriter w;
  w.indent();
  w.fragment("if (a)\nb();\n", 3, "c_code");
  EXPECT_EQ(w.str(), "  if (a)\n    b();\n");
  EXPECT_EQ(w.origin(2)->fragment_line, 2);
}

// A kernel's run-time sizes: one slot per name and value, the same name with another value a
// slot of its own, defined (and undefined after) only where the body reads them, and the
// argument array commented with the same names.
TEST(KernelArgs, NamesEachValueOnceAndDeclaresWhatTheBodyReads) {
  KernelArgs args;
  EXPECT_EQ(args.add(56, "out_w"), "kp_out_w");
  EXPECT_EQ(args.add(56, "out_w"), "kp_out_w");
  EXPECT_EQ(args.add(3, "stride"), "kp_stride");
  EXPECT_EQ(args.add(2, "stride"), "kp_stride_2");
  EXPECT_EQ(args.add(3, "stride"), "kp_stride");
  EXPECT_EQ(args.values, (std::vector<int64_t>{56, 3, 2}));
  EXPECT_EQ(args.declarations("y = kp_out_w * kp_stride_2;"),
            (std::vector<std::string>{"#define kp_out_w kp[0]", "#define kp_stride_2 kp[2]"}));
  EXPECT_EQ(args.undefinitions("y = kp_out_w * kp_stride_2;"),
            (std::vector<std::string>{"#undef kp_out_w", "#undef kp_stride_2"}));
  // A name that is only the prefix of another is not a use of it.
  EXPECT_TRUE(args.declarations("kp_stride_20 + kp_out_wide").empty());
  EXPECT_EQ(args.commented_values(),
            (std::vector<std::string>{"/* kp_out_w */ 56LL, /* kp_stride */ 3LL, /* kp_stride_2 */ 2LL"}));
  EXPECT_THROW(args.add(1, "Out W"), InternalError);
  // The ends exporters write for "to the end" are written as C can read them.
  KernelArgs ends;
  ends.add(INT64_MIN, "end");
  ends.add(INT64_MAX, "end");
  EXPECT_EQ(ends.commented_values(),
            (std::vector<std::string>{"/* kp_end */ (-9223372036854775807LL - 1), "
                                      "/* kp_end_2 */ 9223372036854775807LL"}));
  // A long argument array wraps into lines of at most the width asked for.
  KernelArgs many;
  for (int i = 0; i < 12; ++i) many.add(1000 + i, "size_" + std::to_string(i));
  const auto lines = many.commented_values(60);
  EXPECT_GT(lines.size(), 1u);
  for (const auto& l : lines) EXPECT_LE(l.size(), 60u) << l;
}

TEST(Prelude, EmbeddedHeadersAreAvailable) {
  EXPECT_NE(prelude("kiln_index.h").find("kiln_collapse"), std::string_view::npos);
  EXPECT_NE(prelude("kiln_scalar.h").find("kiln_mod_f32"), std::string_view::npos);
  EXPECT_THROW(prelude("nope.h"), UserError);
}

TEST(Ops, PropsAreCanonicalWhateverTheirOrder) {
  auto& reg = OpRegistry::instance();
  auto a = reg.create("gemm", {{"alpha", 2.0}, {"transB", int64_t(1)}});
  Attrs reversed;
  reversed.emplace("transB", int64_t(1));
  reversed.emplace("alpha", 2.0);
  auto b = reg.create("gemm", reversed);
  EXPECT_TRUE(*a == *b);
  EXPECT_EQ(a->describe(), "gemm{alpha=2.0, transB=1}");
  EXPECT_FALSE(*a == *reg.create("gemm", {{"alpha", 3.0}}));
  EXPECT_THROW(reg.create("gemm", {{"alpha", std::string("x")}}), AttrError);
  EXPECT_THROW(reg.create("no_such_op", {}), UserError);
}

TEST(Graph, NodesAreTopologicalAndErrorsNameNodeAndOp) {
  Graph g("g");
  Var x = input(g, "x", DType::kFloat32, {kDynamic, 4});
  Var y = relu(x) + 1.0;
  g.set_outputs({y});
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[1]->inputs[0], g.nodes()[0]->outputs[0]);
  EXPECT_THROW(g.add_input("x", TensorType{DType::kFloat32, {1}}), UserError);  // duplicate name
  Graph other("other");
  Var z = input(other, "z", DType::kFloat32, {kDynamic, 4});
  EXPECT_THROW(g.add_node(OpRegistry::instance().create("relu", {}), {z.var()}), UserError);
  try {
    softmax(cast(x, DType::kInt32));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "node 3 (softmax): softmax requires float32 or float64, got int32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The wire text that module plans and op bindings share: what is written reads back exactly
// (NaN, infinities, -0.0 and the smallest subnormal as hex floats; words holding blanks,
// colons and newlines), and text cut anywhere, a count larger than the text, an unknown
// attribute kind or bytes after the end are refused naming the byte.
TEST(WireText, RoundTripsExactlyAndRefusesEveryCut) {
  const Attrs attrs{{"f", -0.0},
                    {"int", int64_t{-7}},
                    {"s", std::string("a b:c\n9:x ")},
                    {"I", std::vector<int64_t>{1, -2, INT64_MIN}},
                    {"F", std::vector<double>{NAN, -INFINITY, 4.9406564584124654e-324}}};
  WireWriter w("kiln-test 1\n");
  w.section("part");
  w.attrs(attrs);
  w.type(TensorType{DType::kFloat16, {kDynamic, 3}});
  w.real(1.0 / 3.0);
  w.ints({4, 0, 2});
  w.word("");
  const std::string text = w.take();
  {
    WireReader r(text, "kiln-test 1\n", "t");
    r.expect("part");
    const Attrs back = r.attrs();
    EXPECT_EQ(attrs_to_string(back), attrs_to_string(attrs));
    EXPECT_TRUE(std::signbit(std::get<double>(back.at("f"))));
    EXPECT_TRUE(std::isnan(std::get<std::vector<double>>(back.at("F"))[0]));
    EXPECT_EQ(std::get<std::vector<double>>(back.at("F"))[2], 4.9406564584124654e-324);
    EXPECT_EQ(r.type().to_string(), TensorType(DType::kFloat16, {kDynamic, 3}).to_string());
    EXPECT_EQ(r.real("third"), 1.0 / 3.0);
    EXPECT_EQ(r.ints("ints", 5), (std::vector<int>{4, 0, 2}));
    EXPECT_EQ(r.word("empty"), "");
    r.finish();
  }
  auto read_all = [](const std::string& t) {
    WireReader r(t, "kiln-test 1\n", "t.txt");
    r.expect("part");
    r.attrs();
    r.type();
    r.real("third");
    r.ints("ints", 5);
    r.word("empty");
    r.finish();
  };
  for (size_t cut = 0; cut < text.size(); ++cut) {
    EXPECT_THROW(read_all(text.substr(0, cut)), WireError) << "cut at " << cut;
  }
  const std::string unknown_kind = [&] {
    std::string t = text;
    t.replace(t.find("3:int 1:i "), 10, "3:int 1:q ");
    return t;
  }();
  EXPECT_NE(testing::error_of([&] { read_all(unknown_kind); }).find("unknown attribute kind 'q'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { read_all(text + "7 "); }).find("t.txt: byte "),
            std::string::npos);
  WireWriter huge("kiln-test 1\n");
  huge.section("part");
  huge.num(1000000000);
  EXPECT_NE(testing::error_of([&] { read_all(huge.take()); }).find("bad count for attributes"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
