#pragma once
// One escaping rule per sink. Names and labels come from model files, op libraries, cache
// entries and remote servers; any of them may hold "*/", quotes, backslashes, newlines,
// terminal escapes, NUL, "??/" trigraphs or bytes that are not UTF-8. Whatever kiln writes
// into C source, a terminal, a message, a file name or HTML goes through the function for
// that sink (JSON through util/json_text.h), never pasted raw.
#include <string>
#include <string_view>

namespace kiln {

// Text for the inside of a C /* ... */ comment: it can neither end the comment ("*/", or
// "*" + backslash-newline + "/"), nor splice lines, nor form a trigraph, nor reorder how the
// source reads (directional controls). Printable ASCII and readable UTF-8 stay; control
// bytes, invalid UTF-8, directional controls, '\\' and the second character of "*/", "/*" or
// "??" are written as \xNN.
std::string c_comment_text(std::string_view s);

// A complete C string literal ("..." with its quotes) holding exactly the bytes of `s`:
// quotes, backslashes, '?' (trigraphs), control and non-ASCII bytes as octal escapes.
std::string c_string_literal(std::string_view s);

// A string for the GNU assembler (.asciz, .incbin): quotes and backslashes escaped, anything
// unprintable in octal.
std::string asm_string_literal(std::string_view s);

// Text for a terminal: newlines and tabs stay; other control bytes (ESC, CR, BEL, ...), DEL,
// the C1 controls, Unicode's directional controls and bytes that are not UTF-8 are shown as
// \xNN, so a name can neither move the cursor, retitle the window, reorder what follows it
// nor hide it.
std::string terminal_text(std::string_view s);

// terminal_text on one line: newlines and tabs too as \x0a and \x09.
std::string terminal_line(std::string_view s);

// A name quoted for a message: '...' around terminal_text() on one line (newlines too as
// \x0a), cut to `max_bytes` with the full length said, so a message never embeds a
// megabyte of someone else's text.
std::string in_quotes(std::string_view s, size_t max_bytes = 120);

// A file name for a model-controlled name inside a folder kiln writes: [A-Za-z0-9._-] kept,
// every other byte '_', a leading '.' made '_' (no "..", no hidden file), empty made "_".
// Never holds '/', NUL or "..": joined to a folder, it stays in that folder.
std::string file_name_for(std::string_view name);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view s);

// JSON text placed inside an HTML <script> element: every '<' (only ever inside a JSON
// string) becomes \u003c, so "</script>" or "<!--" in a name cannot change how the page parses.
std::string json_for_html_script(std::string_view json);

}  // namespace kiln
