#pragma once
// UTF-8 for the tokenizers: code points to bytes and back, well-formedness after Unicode's
// table 3-7, and the replacement of ill-formed bytes by U+FFFD as Python and Rust do it.
#include <cstddef>
#include <string>
#include <string_view>

namespace quartet {

// Length of the UTF-8 sequence that starts with `lead` (the text is valid UTF-8). Inline, as
// next_code_point: the tokenizers' inner loops call them once a character.
inline size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Appends the UTF-8 bytes of code point `cp`.
void append_utf8(std::string& out, char32_t cp);

// The code point at s[i] of valid UTF-8; advances i past it.
inline char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_length(b0);
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

// Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7), or 0 when ill-formed;
// `consumed` is then how many bytes form the maximal ill-formed prefix to replace by one U+FFFD.
size_t well_formed_at(std::string_view s, size_t i, size_t& consumed);

bool is_valid_utf8(std::string_view s);

// Invalid UTF-8 becomes U+FFFD, one per maximal ill-formed subpart: the W3C/Unicode practice,
// which is what Python's bytes.decode(errors="replace") and Rust's from_utf8_lossy do, so text that
// reached HF through either gets the same tokens here. Never throws; valid input is returned as is.
std::string sanitize_utf8(const std::string& s);

// Unicode White_Space, which Rust's char::is_whitespace and its regex \s use (added-token lstrip /
// rstrip in HF).
bool is_white_space(char32_t c);

// "'é' (U+00E9)": one UTF-8 character for an error message.
std::string describe_char(std::string_view ch);

}  // namespace quartet
