#pragma once
// The one parser for each kind of setting a user types: sizes, durations and names. Every
// environment variable and flag of that kind goes through it, so "1e30", "inf", "0x10" or a
// glob character is refused the same way everywhere, with the variable or flag named.
#include <cstdint>
#include <string>

namespace kiln {

// "2G", "500MiB", "64k", "1.5GB", "1000000": a decimal number (digits, an optional fraction;
// no sign, exponent, hex, inf or nan) and an optional binary unit (B, K, M, G, T, P, with an
// optional "i" and "B"; any case). The result must lie in [min_bytes, 2^63]. Throws UserError
// naming `what` (the variable or flag) otherwise.
uint64_t parse_size(const std::string& text, const std::string& what, uint64_t min_bytes = 1);

// "250ms", "1.5", "30s", "5m", "12h", "7d", "2w": a decimal number as for sizes and an
// optional unit; without one, `default_unit` ("s" or "ms"). The result, in seconds, must lie
// in [min_s, max_s]; the error says the range. Throws UserError naming `what` otherwise.
double parse_duration(const std::string& text, const std::string& what, double min_s, double max_s,
                      const char* default_unit = "s");

// A name kiln uses inside keys and patterns (a remote namespace, a signing key's name):
// 1 to 64 characters of [A-Za-z0-9._-], not starting with '.' or '-'. Throws UserError naming
// `what` otherwise (no glob characters, separators, spaces or control bytes can pass).
const std::string& check_name(const std::string& text, const std::string& what);

}  // namespace kiln
