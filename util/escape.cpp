#include "util/escape.h"

#include <cstdint>
#include <cstdio>

namespace kiln {
namespace {

void append_hex(std::string& out, unsigned char c) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

bool printable_ascii(unsigned char c) { return c >= 0x20 && c < 0x7f; }

// The length of the well-formed UTF-8 sequence at s[i], or 0 when there is none.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if ((c & 0xe0) == 0xc0) {
    n = 2, cp = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, cp = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

// Unicode's directional formatting characters: in source or on a terminal they reorder what
// a reader sees ("Trojan Source"), so every sink shows them as escapes. The UTF-8 sequence
// at s[i] of length n is one of them.
bool bidi_control(std::string_view s, size_t i, size_t n) {
  if (n == 2) {  // U+061C ARABIC LETTER MARK
    return static_cast<unsigned char>(s[i]) == 0xd8 && static_cast<unsigned char>(s[i + 1]) == 0x9c;
  }
  if (n != 3 || static_cast<unsigned char>(s[i]) != 0xe2) return false;
  const auto b1 = static_cast<unsigned char>(s[i + 1]), b2 = static_cast<unsigned char>(s[i + 2]);
  // U+200E, U+200F; U+202A..U+202E; U+2066..U+2069.
  return (b1 == 0x80 && (b2 == 0x8e || b2 == 0x8f || (b2 >= 0xaa && b2 <= 0xae))) ||
         (b1 == 0x81 && b2 >= 0xa6 && b2 <= 0xa9);
}

// Well-formed UTF-8 a person can read: not a C1 control, not a directional control.
size_t readable_utf8(std::string_view s, size_t i) {
  const size_t n = utf8_sequence(s, i);
  if (n == 0) return 0;
  if (n == 2 && static_cast<unsigned char>(s[i]) == 0xc2 &&
      static_cast<unsigned char>(s[i + 1]) < 0xa0)
    return 0;  // C1 controls (U+0080..U+009F) act like ESC sequences on many terminals
  return bidi_control(s, i, n) ? 0 : n;
}

}  // namespace

std::string c_comment_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const char last = out.empty() ? '\0' : out.back();
    const bool closes = c == '/' && last == '*';
    const bool opens = c == '*' && last == '/';
    const bool trigraph = c == '?' && last == '?';
    if (printable_ascii(c) && c != '\\' && !closes && !opens && !trigraph) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t n = c < 0x80 ? 0 : readable_utf8(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      append_hex(out, c);
      ++i;
    }
  }
  return out;
}

namespace {

// A quoted literal: quotes, backslashes, unprintable bytes (and '?' where trigraphs exist) as
// three-digit octal escapes, which a following digit cannot extend.
std::string octal_quoted(std::string_view s, bool question_mark) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\' || (question_mark && c == '?') || !printable_ascii(c)) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace

std::string c_string_literal(std::string_view s) { return octal_quoted(s, true); }

std::string asm_string_literal(std::string_view s) { return octal_quoted(s, false); }

std::string terminal_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n' || c == '\t' || printable_ascii(c)) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t n = c < 0x80 ? 0 : readable_utf8(s, i);
    if (n == 0) {
      append_hex(out, c);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string terminal_line(std::string_view s) {
  std::string out;
  for (char c : terminal_text(s)) {
    if (c == '\n' || c == '\t') {
      append_hex(out, static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

std::string in_quotes(std::string_view s, size_t max_bytes) {
  const bool cut = s.size() > max_bytes;
  std::string out = "'" + terminal_line(cut ? s.substr(0, max_bytes) : s) + "'";
  if (cut) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string file_name_for(std::string_view name) {
  std::string out;
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.';
    out += keep ? ch : '_';
  }
  if (out.empty()) return "_";
  if (out[0] == '.') out[0] = '_';
  return out;
}

bool is_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string json_for_html_script(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace kiln
